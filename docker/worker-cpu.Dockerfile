# syntax=docker/dockerfile:1
# swapfarm CPU worker, multi-arch (linux/amd64, linux/arm64): ONNX Runtime on the CPU, ffmpeg from Debian.
# On amd64, --build-arg ORT_BUILD=openvino installs the `openvino` extra instead: ONNX Runtime's OpenVINO build
# (onnxruntime-openvino, pinned there and in docker/constraints.txt) in place of onnxruntime, which it replaces, and
# no torch (x86 CPUs, Intel iGPUs; the worker then reports the `openvino` family and consumes render.openvino).
# OpenVINO's build exists for amd64 only, so an arm64 build with it fails rather than silently falling back.
#   docker buildx build --platform linux/amd64,linux/arm64 -f docker/worker-cpu.Dockerfile \
#       -t swapfarm/worker-cpu:0.1.0 .
# torch's CPU build (the compiled engine: int8 and bf16 where the CPU computes them natively) comes from PyTorch's CPU
# index, TORCH_INDEX_URL, so no CUDA build is pulled; its pin is the worker extra's (pyproject.toml).
# The same image runs the stitcher (`swapfarm worker --queues stitch`), beat and Flower in compose.yaml.
FROM python:3.11.13-slim-bookworm

ARG TARGETARCH
ARG ORT_BUILD=default
ARG FFMPEG_VERSION=7:5.1.9-0+deb12u1
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/opt/swapfarm/src/docker/constraints.txt \
    PATH=/opt/swapfarm/venv/bin:$PATH \
    SWAPFARM_WORK_DIR=/var/lib/swapfarm/work \
    SWAPFARM_MODEL_CACHE_DIR=/var/cache/swapfarm/models \
    SWAPFARM_TORCH_COMPILE_CACHE_DIR=/var/cache/swapfarm/compile/torch \
    SWAPFARM_WORKER_METRICS_PORT=9100 \
    SWAPFARM_WORKER_METRICS_ADDRESS=0.0.0.0

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
    && apt-get install -y --no-install-recommends "ffmpeg=${FFMPEG_VERSION}" \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 swapfarm \
    && useradd --system --uid 10001 --gid swapfarm --home-dir /var/lib/swapfarm --create-home \
        --shell /usr/sbin/nologin swapfarm \
    && install -d -o swapfarm -g swapfarm /var/lib/swapfarm/work /var/lib/swapfarm/storage \
        /var/cache/swapfarm/models /var/cache/swapfarm/compile

WORKDIR /opt/swapfarm/src
COPY pyproject.toml README.md ./
COPY docker/constraints.txt docker/constraints.txt
COPY scripts/setup scripts/setup
COPY shared shared
COPY api api
COPY workers workers
COPY cli cli
COPY migrations migrations
# The same install command as CI (scripts/test -> scripts/setup); ffmpeg is already here, so no apt step.
RUN export PIP_EXTRA_INDEX_URL="${TORCH_INDEX_URL}"; \
    extras=worker; \
    if [ "${ORT_BUILD}" = openvino ]; then \
        if [ "${TARGETARCH}" != amd64 ]; then echo "ORT_BUILD=openvino needs linux/amd64" >&2; exit 1; fi; \
        extras=openvino; \
    fi; \
    scripts/setup --venv /opt/swapfarm/venv --no-editable "${extras}"

USER 10001:10001
WORKDIR /var/lib/swapfarm
VOLUME ["/var/cache/swapfarm/models", "/var/cache/swapfarm/compile"]
EXPOSE 9100
# Alive = the pool process that runs tasks answers on its metrics port (the prefork parent alone does not).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/metrics' % os.environ.get('SWAPFARM_WORKER_METRICS_PORT', '9100'), timeout=4)"]
CMD ["swapfarm", "worker"]
