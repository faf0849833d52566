#!/usr/bin/env bash
# The CUDA part of bench/ACCURACY.md, on a GPU machine with no network (the device tool's, or any CUDA box).
#
#   bash bench/cuda_accuracy.sh --wheels [DIR]
#       Here, where PyPI is reachable: download the wheels of layerscope's dependencies for the GPU
#       machine's Python (3.12, x86-64 manylinux) into DIR (default .whl, ignored by git through
#       .git/info/exclude). pyarrow (55 MB) goes into DIR-pyarrow instead: it does not fit one 64 MiB
#       transfer with the rest, and the GPU image may already have it.
#   bash bench/cuda_accuracy.sh [--quick] [DIR]
#       There (e.g. the device tool's run with carry [".whl"]): install from DIR only what python3 cannot
#       import, run the CUDA-gated tests, then bench/bench_accuracy.py --device cuda; results, the
#       calibrated spec, the log and one case's traces go to $OUT (or out/cuda-accuracy).
#       CUDA_ACCURACY_TESTS=0 skips the tests; BENCH_TIMEOUT_S bounds the benchmark (default 480 s).
set -uo pipefail
cd "$(dirname "$0")/.."

# module to import : wheel name prefixes that provide it (with their own needs)
DEPS=(
  "yaml:pyyaml" "pydantic:pydantic pydantic_core annotated_types typing_inspection typing_extensions"
  "typer:typer click shellingham" "rich:rich markdown_it_py mdurl pygments" "duckdb:duckdb" "orjson:orjson"
  "openpyxl:openpyxl et_xmlfile" "pyarrow:pyarrow"
)

if [[ "${1:-}" == "--wheels" ]]; then
  dir="${2:-.whl}"
  mkdir -p "$dir" "$dir-pyarrow"
  if [[ "$dir" != /* ]]; then  # a folder in the checkout: keep it out of git (it travels by carry)
    for d in "$dir" "$dir-pyarrow"; do
      grep -qxF "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude
    done
  fi
  plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
  for entry in "${DEPS[@]}"; do
    for wheel in ${entry#*:}; do
      dest="$dir"; [[ "$wheel" == pyarrow ]] && dest="$dir-pyarrow"
      # The version installed here (what the test suite ran with) where it has a wheel there, else the newest.
      pin=$(python3 -c "import importlib.metadata as m; print('==' + m.version('${wheel//_/-}'))" 2>/dev/null)
      for spec in "${wheel//_/-}$pin" "${wheel//_/-}"; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
          "${plat[@]}" -d "$dest" "$spec" 2>/dev/null && break
        [[ "$spec" == "${wheel//_/-}" ]] && { echo "no wheel of $wheel for Python 3.12" >&2; exit 2; }
        echo "no Python 3.12 wheel of $spec: taking the newest $wheel" >&2
      done
    done
  done
  # transformers: the GPU image has its own, maybe outside the range the capture tests pass on (pyproject's
  # `capture` extra); carry the one installed here, which the run below installs over it when they differ.
  tver=$(python3 -c "import importlib.metadata as m; print(m.version('transformers'))" 2>/dev/null)
  [[ -n "$tver" ]] && python3 -m pip download -q --no-deps --only-binary=:all: -d "$dir" "transformers==$tver"
  du -sh "$dir" "$dir-pyarrow"
  exit 0
fi

quick=()
if [[ "${1:-}" == "--quick" ]]; then quick=(--quick); shift; fi
dir="${1:-.whl}"
out="${OUT:-out/cuda-accuracy}"
mkdir -p "$out"
log="$out/log.txt"
exec > >(tee "$log") 2>&1

python3 - <<'EOF' || exit 2
import torch
assert torch.cuda.is_available(), "torch sees no CUDA GPU"
p = torch.cuda.get_device_properties(0)
print(f"torch {torch.__version__} CUDA {torch.version.cuda}: {p.name}, {p.multi_processor_count} SMs, "
      f"{p.total_memory / 2**30:.0f} GiB")
EOF

missing=()
for entry in "${DEPS[@]}"; do
  module="${entry%%:*}"
  python3 -c "import $module" 2>/dev/null || missing+=(${entry#*:})
done
twheel=$(ls "$dir"/transformers-*.whl 2>/dev/null | head -1)
if [[ -n "$twheel" ]]; then  # the tested transformers, where python3's is another release
  want=$(basename "$twheel" | cut -d- -f2)
  have=$(python3 -c "import transformers; print(transformers.__version__)" 2>/dev/null)
  [[ "$have" == "$want" ]] || missing+=(transformers)
  echo "transformers: ${have:-none} here, $want carried"
fi
python3 -c "import transformers" 2>/dev/null || [[ -n "$twheel" ]] || { echo "transformers is missing: carry its wheels too" >&2; exit 2; }
if ((${#missing[@]})); then
  echo "installing from $dir: ${missing[*]}"
  wheels=()
  for name in "${missing[@]}"; do
    found=$(ls "$dir"/"$name"-*.whl "$dir-pyarrow"/"$name"-*.whl 2>/dev/null | head -1)
    [[ -n "$found" ]] || { echo "no wheel for $name in $dir (run --wheels here first, carry $dir)" >&2; exit 2; }
    wheels+=("$found")
  done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}" || exit 2
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
# The C trace scanner is optional (DuckDB's reader runs without it).
python3 setup.py -q build_ext --inplace > /dev/null 2>&1 || echo "C scanner not built: the pure-Python readers run"

if [[ "${CUDA_ACCURACY_TESTS:-1}" != 0 ]] && python3 -c "import pytest, hypothesis" 2>/dev/null; then
  python3 -m pytest -q -p no:warnings --import-mode=importlib -k "cuda" tests/capture tests/cli tests/analysis
fi

work=/tmp/cuda-accuracy
rm -rf "$work"
timeout "${BENCH_TIMEOUT_S:-480}" python3 bench/bench_accuracy.py --device cuda "${quick[@]}" --work "$work"
rc=$?
cp bench/ACCURACY.md "$work/hardware.yaml" "$out/" 2>/dev/null
# One case's trace pair as test data (the smallest case directory).
small=$(du -s "$work"/*/ 2>/dev/null | sort -n | head -1 | cut -f2)
[[ -n "$small" ]] && tar -czf "$out/traces.tar.gz" -C "$small" . && du -h "$out/traces.tar.gz"
exit $rc
