# Sandbox image for TIRx attempts: CPU-only torch, the DSL, tmux for Terminus-2 and offline
# API docs generated from the installed DSL. Agents compile and unit-test on CPU here; timing
# and scored grading happen on the grader hosts (docker/grader.Dockerfile).
#
#   docker build -f docker/sandbox-tirx.Dockerfile -t mkb-sandbox-tirx .
#
# Pins match engine/tasks/dsls.py (tests/scale/test_docker_files.py checks them).
FROM python:3.12-slim-bookworm

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

RUN apt-get update \
    && apt-get install -y --no-install-recommends tmux procps less \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" \
    && pip install --no-cache-dir "numpy>=1.26" "apache-tvm==0.27.0.post1" "apache-tvm-ffi==0.1.15.post2"

# offline docs: every public API of the DSL's modules, written from the installed package
COPY engine/__init__.py /opt/mkb/engine/__init__.py
COPY engine/tasks/__init__.py engine/tasks/dsls.py engine/tasks/docs.py /opt/mkb/engine/tasks/
RUN cd /opt/mkb && python -c "from pathlib import Path; \
from engine.tasks.docs import build_docs; from engine.tasks.dsls import dsl_info; \
build_docs(dsl_info('tirx'), Path('/opt/mkb/docs/tirx'))" \
    && test ! -e /opt/mkb/docs/tirx/MISSING.md \
    && rm -rf /opt/mkb/engine

ENV MKB_DSL=tirx MKB_DOCS=/opt/mkb/docs/tirx PYTHONDONTWRITEBYTECODE=1
RUN mkdir -p /workspace /mkb/mailbox
WORKDIR /workspace
