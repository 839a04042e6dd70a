# syntax=docker/dockerfile:1
# swapfarm API: FastAPI, the Celery client (send by task name) and ffprobe, which validates uploads before a job
# is accepted. No torch, ONNX Runtime or OpenCV: api/ never imports them (import-linter) and this image lacks them.
#   docker build -f docker/api.Dockerfile -t swapfarm/api:0.1.0 .          (from the repository root)
# Runs `swapfarm api`; `swapfarm db upgrade` (compose's one-shot `migrate`) runs from the same image.
FROM python:3.11.13-slim-bookworm

ARG FFMPEG_VERSION=7:5.1.9-0+deb12u1

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/opt/swapfarm/src/docker/constraints.txt \
    PATH=/opt/swapfarm/venv/bin:$PATH \
    SWAPFARM_WORK_DIR=/var/lib/swapfarm/work

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
    && apt-get install -y --no-install-recommends "ffmpeg=${FFMPEG_VERSION}" \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 swapfarm \
    && useradd --system --uid 10001 --gid swapfarm --home-dir /var/lib/swapfarm --create-home \
        --shell /usr/sbin/nologin swapfarm \
    && install -d -o swapfarm -g swapfarm /var/lib/swapfarm/work /var/lib/swapfarm/storage

WORKDIR /opt/swapfarm/src
COPY pyproject.toml README.md ./
COPY docker/constraints.txt docker/constraints.txt
COPY scripts/setup scripts/setup
COPY shared shared
COPY api api
COPY cli cli
COPY migrations migrations
# The same install command as CI (scripts/test -> scripts/setup), into the image's venv; ffmpeg is already here,
# so the script runs no apt step.
RUN scripts/setup --venv /opt/swapfarm/venv --no-editable api

USER 10001:10001
WORKDIR /var/lib/swapfarm
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["swapfarm", "api", "--host", "0.0.0.0", "--port", "8000"]
