#!/usr/bin/env bash
# The device pipeline's GPU measurements in one call of at most 9 minutes on the lent H200, each step under its own
# limit (they add up to 520 s; no step starts past the 540 s mark, and one that would end past it is cut to fit);
# benchmarks/device_kit.sh makes the kit and writes the call that starts this script there.
#
#   benchmarks/device_run.sh [DATA]       # DATA: media/ and models/ (default ../shared/data; the kit's .devdata)
#
# Python: $PYTHON, else .venv/bin/python, else python3 (on the lent machine: its python3, 3.12 with torch 2.11 for
# CUDA and ONNX Runtime's CPU build, with the kit's wheels first on PYTHONPATH). No step needs Postgres, Redis or a
# Celery worker: `swapfarm run`'s in-process steps with SQLite and the engines alone.
#
# Prints, in this order: the device; `swapfarm doctor`; the gpu-marked tests; the swapper per bucket (1, 8, 32, 64;
# eager vs default vs max-autotune; fp32, bf16, fp16) in faces/s with peak memory (ONNX Runtime's CUDA and TensorRT
# providers beside them only where present; where absent a row says so and compiled torch is compared with eager
# torch); the warm start from the compile cache (seconds to the first compiled call in a second process); one
# crowd_1080p face-swap chunk end to end in frames/s, its stage split and the device's busy share; the device path
# against the OpenCV path on the same chunk (ms/frame and PSNR); the six FaceFusion processors of issue 30
# (frame_colorizer, expression_restorer, face_editor, age_modifier, deep_swapper, background_remover) with their
# models on the GPU, ms per frame (and per face) batched against one at a time (benchmarks/processors.py --device
# cuda: replicas, uncompiled torch; last, so that it is the step cut when the others overrun).
#
# Each step fails alone, with one line `=== STEP: ...`, and the others go on: a step whose inputs are missing (no
# GPU, a data file) says so in one line and does not start. Everything printed is written to $OUT/device_run.log as
# it comes, and one line per step to $OUT/steps.tsv (OUT: the device machine's folder for files that come back;
# here var/device-run): a run killed at its limit has written what it measured. STEP_SCALE (default 1) multiplies
# every limit, to try the script here with short ones.
set -uo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
python=${PYTHON:-.venv/bin/python}
[[ -x $python ]] || command -v "$python" >/dev/null || python=python3
out=${OUT:-var/device-run}
mkdir -p "$out"
log=$out/device_run.log steps=$out/steps.tsv work=var/device-run-work
: >"$log"
printf 'step\tstatus\tseconds\tlimit\n' >"$steps"
rm -rf "$work" && mkdir -p "$work"
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1 SWAPFARM_TEST_DATA=${SWAPFARM_TEST_DATA:-$data}
scale=${STEP_SCALE:-1}
end=$((SECONDS + $(awk -v k="$scale" 'BEGIN {printf "%d", 540 * k}')))
status=0

say() { printf '%s\n' "$*" | tee -a "$log"; }

# Why the GPU steps cannot run here, or nothing when torch sees a CUDA or ROCm device.
no_gpu=$("$python" -c '
import torch
if not torch.cuda.is_available():
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA"
    print(f"no GPU: torch {torch.__version__} ({build}) sees no CUDA or ROCm device")
' 2>&1 | tail -1)

# step SECONDS TITLE NEEDS COMMAND...: NEEDS is "gpu", a comma-separated list of DATA files, both ("gpu,media/x"),
# or "-". Runs COMMAND under its limit, its output into the log as it comes; a failure is one line and the run goes on.
step() {
    local limit title=$2 needs=$3 missing="" need started code
    limit=$(awk -v s="$1" -v k="$scale" 'BEGIN {printf "%d", s * k < 1 ? 1 : s * k}')
    shift 3
    say ""
    for need in ${needs//,/ }; do  # the data files first: the more particular reason
        if [[ $need != gpu && $need != - && ! -e $data/$need ]]; then
            missing="$data/$need is missing"
            break
        fi
    done
    if [[ -z $missing && ,$needs, == *,gpu,* ]]; then missing=$no_gpu; fi
    if [[ -z $missing ]] && ((end - SECONDS - 5 < limit)); then  # 5 s for a stopped step's last words
        limit=$((end - SECONDS - 5))
        ((limit < 5)) && missing="out of the run's time (${scale}x 540 s)"
    fi
    if [[ -n $missing ]]; then
        say "=== $title: not run: $missing"
        printf '%s\tnot run: %s\t0\t%s\n' "$title" "$missing" "$limit" >>"$steps"
        status=1
        return
    fi
    say "=== $title (limit ${limit}s)"
    started=$SECONDS
    if declare -F "$1" >/dev/null; then set -- bash -c "$1"; fi  # a function of this script (exported below)
    timeout --signal=INT --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$log"
    code=${PIPESTATUS[0]}
    local took=$((SECONDS - started))
    if ((code == 124 || code == 137)); then
        say "=== $title: stopped at its limit of ${limit}s (what it printed above is what it measured)"
        status=1
    elif ((code != 0)); then
        say "=== $title: failed, exit $code after ${took}s"
        status=1
    fi
    printf '%s\t%s\t%s\t%s\n' "$title" "$([[ $code == 0 ]] && echo ok || echo "exit $code")" "$took" "$limit" >>"$steps"
}

device() {  # the machine: GPU, driver, Python and the packages the run uses, ONNX Runtime's providers, ffmpeg
    local failed=0
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || failed=1
    else
        echo "no nvidia-smi on the PATH"
    fi
    "$python" - <<'EOF' || failed=1
import importlib.metadata as md
import sys

import onnxruntime
import torch

print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}, HIP {torch.version.hip})")
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}: compute capability {props.major}.{props.minor}, {props.total_memory / 2**30:.0f} GiB, "
          f"{props.multi_processor_count} multiprocessors")
else:
    print("torch sees no CUDA or ROCm device")
providers = onnxruntime.get_available_providers()
print(f"onnxruntime {onnxruntime.__version__}: {', '.join(providers)}")
if "CUDAExecutionProvider" not in providers:
    print("no CUDA provider in ONNX Runtime: the swapper rows compare compiled torch with eager torch")
names = ["numpy", "opencv-python-headless", "onnx", "triton", "kornia", "pydantic", "sqlalchemy", "typer", "nvidia-ml-py"]
versions = []
for name in names:
    try:
        versions.append(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        versions.append(f"{name} absent")
print(", ".join(versions))
EOF
    for tool in ffmpeg ffprobe; do
        "$tool" -hide_banner -version | head -1 || failed=1
    done
    # NVDEC on this build: the doctor's own probe makes its sample with lavfi, which the kit's ffmpeg lacks
    local clip=$data/media/crowd_1080p.mp4 decoder started why
    [[ -e $clip ]] || return $failed
    for decoder in "-hwaccel cuda" "-c:v h264_cuvid" "-c:v h264"; do
        started=$(date +%s.%N)
        # shellcheck disable=SC2086  # the decoder's options are two words
        if why=$(ffmpeg -hide_banner -nostdin -v error $decoder -i "$clip" -frames:v 100 -f null - 2>&1); then
            awk -v s="$started" -v e="$(date +%s.%N)" -v d="$decoder" \
                'BEGIN {printf "ffmpeg %s: 100 frames of crowd_1080p decoded in %.2fs\n", d, e - s}'
        else
            echo "ffmpeg $decoder: fails here: ${why%%$'\n'*}"
        fi
    done
    return $failed
}

gpu_tests() {  # the test modules with gpu-marked tests, and those tests alone
    local files
    mapfile -t files < <(grep -rlE --include='test_*.py' '^\s*@?pytest\.mark\.gpu\b' tests | sort)
    "$python" -m pytest -q -p no:cacheprovider -m gpu "${files[@]}"
}
export -f device gpu_tests
export python data

check=(benchmarks/gpu_check.py --keep "$work/gpu-check" --data "$data")
step 20 "device" - device
step 25 "swapfarm doctor" - "$python" -m cli doctor
step 80 "tests marked gpu" gpu gpu_tests
step 140 "swapper per bucket: eager vs default vs max-autotune, fp32 bf16 fp16 (faces/s, peak memory)" gpu \
    "$python" "${check[@]}" --parts throughput fit --models inswapper_128 --budget 130 --buckets 1 8 32 64 \
    --modes eager default max-autotune --precisions fp32 bf16 fp16 --seconds-per-point 0.5
step 60 "warm start from the compile cache (first compiled call in a second process)" gpu \
    "$python" "${check[@]}" --parts cache --budget 55
# eager: a compiled chunk's cold run would compile the swapper's buckets in its precision and the detector's, past
# this step's limit (the swapper step above gives compiled against eager)
step 90 "crowd_1080p face-swap chunk end to end (frames/s, device busy share, stage split)" \
    gpu,media/crowd_1080p.mp4,media/s0.jpg,models/yunet_2023mar.onnx \
    "$python" "${check[@]}" --parts e2e stage --budget 85 --e2e-mode eager --stage-frames 24
step 45 "device path vs OpenCV path on the same crowd_1080p chunk (ms/frame, PSNR)" \
    gpu,media/crowd_1080p.mp4,media/s0.jpg,models/yunet_2023mar.onnx \
    "$python" -m benchmarks.device_pipeline --device cuda --chunk-only --frames 16 --batch 8 --repeats 2 --data "$data"
# the same arguments on the CPU, tiny: tests/benchmarks/test_processors_step.py
processors=(-m benchmarks.processors --only frame_colorizer portrait age_modifier deep_swapper background_remover
    --frames 8 --batch 8 --crop-frames 4 --repeats 1)
step 60 "six processors: models on the GPU, batched vs one at a time (ms/frame, ms/face; replicas, eager torch)" \
    gpu,media/d18.mp4,media/crowd_1080p.mp4,media/group6.jpg,models/yunet_2023mar.onnx \
    "$python" "${processors[@]}" --device cuda
say ""
say "=== steps (also in $steps):"
awk -F '\t' '{printf "%-5s %-7s %-9s %s\n", $4, $3, $2 == "ok" || $2 == "status" ? $2 : "not ok", $1}' "$steps" \
    | tee -a "$log"
exit $status
