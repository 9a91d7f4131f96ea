# Sandbox image for CuTe DSL attempts: CPU-only torch, the DSL, tmux for Terminus-2 and offline
# API docs generated from the installed DSL. Agents compile and unit-test on CPU here; timing
# and scored grading happen on the grader hosts (docker/grader.Dockerfile).
#
#   docker build -f docker/sandbox-cute.Dockerfile -t mkb-sandbox-cute .
#
# Pins match engine/tasks/dsls.py (tests/scale/test_docker_files.py checks them).
FROM python:3.12-slim-bookworm

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

RUN apt-get update \
    && apt-get install -y --no-install-recommends tmux procps less \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" \
    && pip install --no-cache-dir "numpy>=1.26" "nvidia-cutlass-dsl[cu13]==4.8.1"

# offline docs: every public API of the DSL's modules, written from the installed package
COPY engine/__init__.py /opt/mkb/engine/__init__.py
COPY engine/tasks/__init__.py engine/tasks/dsls.py engine/tasks/docs.py /opt/mkb/engine/tasks/
RUN cd /opt/mkb && python -c "from pathlib import Path; \
from engine.tasks.docs import build_docs; from engine.tasks.dsls import dsl_info; \
build_docs(dsl_info('cute'), Path('/opt/mkb/docs/cute'))" \
    && test ! -e /opt/mkb/docs/cute/MISSING.md \
    && rm -rf /opt/mkb/engine

ENV MKB_DSL=cute MKB_DOCS=/opt/mkb/docs/cute PYTHONDONTWRITEBYTECODE=1
RUN mkdir -p /workspace /mkb/mailbox
WORKDIR /workspace
