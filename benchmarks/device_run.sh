#!/usr/bin/env bash
# The device pipeline's GPU measurements in one run, under 9 minutes on one H200 (each step has its own limit).
#
#   benchmarks/device_run.sh [DATA]      # DATA: the folder with media/ and models/ (default ../shared/data)
#
# Needs a Python with torch built for CUDA (or ROCm), onnxruntime-gpu and the worker extras: $PYTHON, else
# .venv/bin/python. Prints, in order: the machine, `swapfarm doctor` (the encoder/decoder probe included), the
# tests marked gpu, the device path vs the OpenCV path on crowd_1080p, and benchmarks/gpu_check.py (swapper per
# bucket, eager vs compile modes vs ONNX Runtime CUDA/TensorRT, fp32/bf16/fp16, compile cache, stage split, e2e).
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
data=${1:-../shared/data}
export PYTHONPATH=$PWD
status=0

step() {  # step SECONDS TITLE COMMAND...: run with a time limit; a failure is reported and the run goes on
    local limit=$1 title=$2
    shift 2
    printf '\n=== %s (limit %ss)\n' "$title" "$limit"
    timeout --signal=INT --kill-after=10 "$limit" "$@" || { echo "=== $title: exit $?"; status=1; }
}

if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "device_run: no GPU visible to torch ($python); nothing measured" >&2
    exit 2
fi
step 20 "machine" nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
step 60 "swapfarm doctor" "$python" -m cli doctor
step 120 "tests marked gpu, accelerator families" "$python" -m pytest -q -p no:cacheprovider \
    tests/workers/test_gpu.py tests/workers/test_accelerator_families.py
step 120 "device path vs OpenCV path on crowd_1080p (chunk end to end, face_blur pixels)" "$python" -m benchmarks.device_pipeline \
    --device cuda --frames 16 --repeats 2 --data "$data"
step 180 "gpu_check" "$python" benchmarks/gpu_check.py --budget 165 --data "$data" --buckets 1 8 32 64 \
    --modes eager default max-autotune
exit $status
