# syntax=docker/dockerfile:1
# swapfarm CUDA worker (linux/amd64): CUDA 12.8 runtime + cuDNN 9 on Ubuntu 24.04, torch's CUDA build (the compiled
# engine), onnxruntime-gpu (CUDA and TensorRT providers), and Ubuntu 24.04's FFmpeg 6.1 — a maintained release
# (22.04's 4.4 is not), built with NVENC/NVDEC/CUVID (nv-codec-headers): the driver's libnvcuvid/libnvidia-encode come
# in through the `video` driver capability.
# Jobs choose their encoder (libx264 by default; h264_nvenc/hevc_nvenc on request): H100/H200-class GPUs have NVDEC
# but no NVENC. Needs the NVIDIA Container Toolkit on the host:
#   docker build -f docker/worker-cuda.Dockerfile -t swapfarm/worker-cuda:0.1.0 .
#   docker run --gpus all ... swapfarm/worker-cuda:0.1.0          (see docs/operations.md)
# Bump together: the CUDA base, TORCH_INDEX_URL (PyTorch's wheel index of that CUDA) and onnxruntime-gpu's pin
# in docker/constraints.txt (its CUDA/cuDNN major versions must match the base).
FROM ghcr.io/astral-sh/uv:0.7.13 AS uv

FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

ARG PYTHON_VERSION=3.11.13
ARG FFMPEG_VERSION=7:6.1.1-3ubuntu5
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/opt/swapfarm/src/docker/constraints.txt \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    PATH=/opt/swapfarm/venv/bin:$PATH \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,video \
    SWAPFARM_FAMILY=cuda \
    SWAPFARM_WORK_DIR=/var/lib/swapfarm/work \
    SWAPFARM_MODEL_CACHE_DIR=/var/cache/swapfarm/models \
    SWAPFARM_WORKER_METRICS_PORT=9100 \
    SWAPFARM_WORKER_METRICS_ADDRESS=0.0.0.0 \
    SWAPFARM_TORCH_COMPILE_CACHE_DIR=/var/cache/swapfarm/compile/torch \
    TRITON_CACHE_DIR=/var/cache/swapfarm/compile/triton

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "ffmpeg=${FFMPEG_VERSION}" \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 swapfarm \
    && useradd --system --uid 10001 --gid swapfarm --home-dir /var/lib/swapfarm --create-home \
        --shell /usr/sbin/nologin swapfarm \
    && install -d -o swapfarm -g swapfarm /var/lib/swapfarm/work /var/lib/swapfarm/storage \
        /var/cache/swapfarm/models /var/cache/swapfarm/compile

# Ubuntu 24.04 ships Python 3.12; the project needs 3.11: a pinned standalone build, installed by uv.
COPY --from=uv /uv /usr/local/bin/uv
RUN uv python install "${PYTHON_VERSION}" \
    && ln -s "$(uv python find "${PYTHON_VERSION}")" /usr/local/bin/python3.11

WORKDIR /opt/swapfarm/src
COPY pyproject.toml README.md ./
COPY docker/constraints.txt docker/constraints.txt
COPY scripts/setup scripts/setup
COPY shared shared
COPY api api
COPY workers workers
COPY cli cli
COPY migrations migrations
# The same install command as CI (scripts/test -> scripts/setup); torch's CUDA build from PyTorch's index.
RUN PIP_EXTRA_INDEX_URL="${TORCH_INDEX_URL}" scripts/setup --venv /opt/swapfarm/venv --no-editable cuda

USER 10001:10001
WORKDIR /var/lib/swapfarm
VOLUME ["/var/cache/swapfarm/models", "/var/cache/swapfarm/compile"]
EXPOSE 9100
# Alive = the pool process that runs tasks answers on its metrics port (the prefork parent alone does not).
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/metrics' % os.environ.get('SWAPFARM_WORKER_METRICS_PORT', '9100'), timeout=4)"]
CMD ["swapfarm", "worker"]
