#!/usr/bin/env bash
# The device kit: everything benchmarks/device_run.sh needs on the lent GPU machine that its image lacks, made here,
# so that the first call there measures instead of discovering what is missing.
#
#   benchmarks/device_kit.sh [--python-version 3.12] [--dest .whl] [--data-dest .devdata] [--data ../shared/data]
#
# 1. Downloads the wheels pinned in benchmarks/device_kit.txt for CPython X.Y (default 3.12, the machine's python3)
#    on manylinux x86-64, no dependencies (each one is named there), into DEST; the ffmpeg/ffprobe wheel (a tool,
#    for the machine's Python 3.12 whatever X.Y is) into DEST/tools, installed apart: its `ffmpeg` folder would
#    replace typed-ffmpeg's module of that name.
# 2. Copies the media and models the run reads into DATA-DEST, checked against the data folder's SHA256SUMS.
# 3. Measures what would travel (tracked and untracked-not-ignored files, the project's shared/ among them, plus
#    DEST and DATA-DEST) against the 64 MiB a call may carry, and fails past it.
# 4. Writes the call into DEST/run.json (command, carry, timeout_s) and prints it: the command installs the wheels
#    with pip --no-index --no-deps --target, puts ffmpeg and ffprobe on the PATH, and starts device_run.sh with the
#    machine's python3 and PYTHONPATH (the wheels, then the repository root).
# Both folders are ignored (.gitignore). Nothing of this runs on the lent machine but the printed command.
set -euo pipefail
cd "$(dirname "$0")/.."
python_version=3.12
dest=.whl
data_dest=.devdata
data=../shared/data
while (($#)); do
    case $1 in
        --python-version) python_version=$2; shift 2 ;;
        --dest) dest=$2; shift 2 ;;
        --data-dest) data_dest=$2; shift 2 ;;
        --data) data=$2; shift 2 ;;
        *) echo "device_kit: unknown argument $1" >&2; exit 2 ;;
    esac
done
python=${PYTHON:-$(command -v .venv/bin/python || command -v python3)}
limit=$((64 * 1024 * 1024))
# What device_run.sh reads from the data folder: the gpu tests, gpu_check.py, device_pipeline.py --chunk-only and
# processors.py (group6.jpg: the age modifier's and deep swapper's six faces).
data_files=(media/crowd_1080p.mp4 media/d18.mp4 media/group6.jpg media/s0.jpg models/yunet_2023mar.onnx)

# 1. wheels: a fresh folder, so that no second version of a package is left there (two stop the install)
pins=() tools=()
while read -r raw; do
    line=${raw%%#*}
    line=${line//[[:space:]]/}
    if [[ -z $line ]]; then continue; fi
    if [[ $raw == *"# tool" ]]; then tools+=("$line"); else pins+=("$line"); fi
done <benchmarks/device_kit.txt
rm -rf "$dest"
mkdir -p "$dest/tools"
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$tag")
done
"$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --implementation cp \
    --python-version "$python_version" "${platforms[@]}" -d "$dest" "${pins[@]}"
"$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --implementation cp \
    --python-version 3.12 "${platforms[@]}" -d "$dest/tools" "${tools[@]}"
count=$(find "$dest" -type f -name '*.whl' | wc -l)
if ((count != ${#pins[@]} + ${#tools[@]})); then
    echo "device_kit: $((${#pins[@]} + ${#tools[@]})) pins but $count wheels in $dest" >&2
    exit 1
fi

# 2. data, checked
rm -rf "$data_dest"
for file in "${data_files[@]}"; do
    mkdir -p "$data_dest/$(dirname "$file")"
    cp "$data/$file" "$data_dest/$file"
    grep " $file\$" "$data/SHA256SUMS" >>"$data_dest/SHA256SUMS"
done
(cd "$data_dest" && sha256sum --quiet -c SHA256SUMS)

# 3. sizes
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null \
    | awk '{s += $1} END {print s + 0}')
size() { du -sb "$1" | cut -f1; }
wheel_bytes=$(size "$dest")
data_bytes=$(size "$data_dest")
total=$((tree_bytes + wheel_bytes + data_bytes))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "wheels for CPython $python_version (manylinux x86-64) in $dest:"
find "$dest" -type f -name '*.whl' -printf '%s %P\n' | sort -k2 | awk '{printf "  %9.2f MiB  %s\n", $1 / 1048576, $2}'
printf 'wheels %s, data %s (%s), working tree %s: %s of the %s a call carries\n' "$(mib "$wheel_bytes")" \
    "$(mib "$data_bytes")" "$data_dest" "$(mib "$tree_bytes")" "$(mib "$total")" "$(mib "$limit")"
if ((total > limit)); then
    echo "device_kit: the kit and the working tree weigh $(mib "$total"), over $(mib "$limit")" >&2
    exit 1
fi

# 4. the call
command="python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $dest/*.whl"
command+=" && python3 -m pip install -q --no-index --no-deps --no-compile --ignore-requires-python --target /tmp/tools"
command+=" $dest/tools/*.whl"
command+=" && PATH=/tmp/tools/ffmpeg/install/bin:\$PATH PYTHONPATH=/tmp/site:\$PWD PYTHON=python3"
case $data_dest in /*) data_path=$data_dest ;; *) data_path="\$PWD/$data_dest" ;; esac
command+=" SWAPFARM_TEST_DATA=$data_path bash benchmarks/device_run.sh $data_path"
"$python" - "$command" "$dest" "$data_dest" >"$dest/run.json" <<'EOF'
import json, sys
command, dest, data = sys.argv[1:]
print(json.dumps({"command": command, "carry": [dest, data], "timeout_s": 600}, indent=1))
EOF
echo "the run call ($dest/run.json), command of ${#command} characters (at most 2000):"
cat "$dest/run.json"
