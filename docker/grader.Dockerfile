# GPU grader image: CUDA torch, both DSLs and this project, serving `mkb grader serve`.
# The same image works as the harbor grading backend's docker_image (python3, torch, DSLs).
#
#   docker build -f docker/grader.Dockerfile -t mkb-grader .
#   docker run --gpus all -p 8765:8765 -e MKB_GRADER_TOKEN=SECRET mkb-grader
#
# One evaluation per visible GPU at a time; --gpus all gives it every GPU of the host.
FROM nvidia/cuda:13.0.1-devel-ubuntu24.04

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev \
        build-essential ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    CUDA_PATH=/usr/local/cuda \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" \
    && pip install --no-cache-dir "nvidia-cutlass-dsl[cu13]==4.8.1" \
        "apache-tvm==0.27.0.post1" "apache-tvm-ffi==0.1.15.post2"

# the project: the grader service, the grading contract and the problem catalog
WORKDIR /opt/mkb
COPY pyproject.toml README.md ./
COPY app ./app
COPY engine ./engine
COPY problems ./problems
COPY screens ./screens
COPY storage ./storage
RUN pip install --no-cache-dir ".[cute,tirx]" \
    && python -c "import torch, cutlass, tvm; from engine.grading import worker"

EXPOSE 8765
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/health')"
ENTRYPOINT ["mkb", "grader", "serve", "--host", "0.0.0.0", "--port", "8765"]
CMD ["--gpus", "auto"]
