#!/usr/bin/env bash
# One call on a CUDA machine (the device tool's `run`): the GPU-flagged checks of notebook 04, then the
# GPU benchmark (`rope-lit-bench --device cuda`) with the Triton tile sweep. Results go under $OUT
# (default /tmp/rope_lit_gpu). Packages missing there travel as wheels in .whl/ (see the device README).
set -uo pipefail
rest=()
while [ $# -gt 0 ]; do            # its own options (or environment variables); the rest go to the benchmark
  case "$1" in
    --out) OUT=$2; shift ;;
    --test-timeout) TEST_TIMEOUT=$2; shift ;;
    --bench-timeout) BENCH_TIMEOUT=$2; shift ;;
    --sweep) SWEEP=1 ;;
    --full) FULL=1 ;;
    --skip-tests) SKIP_TESTS=1 ;;
    *) rest+=("$1") ;;
  esac; shift
done
set -- "${rest[@]+"${rest[@]}"}"
OUT=${OUT:-/tmp/rope_lit_gpu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee -a "$OUT/gpu.txt"
# GPU checks: FULL=1 runs the whole notebook (`run_tests.py --flags gpu`, CPU cells too); the default runs
# only its `#| gpu` cells against the exported module, which fits a short lease.
if [ "${FULL:-0}" = 1 ]; then
  timeout ${TEST_TIMEOUT:-300} python3 tools/run_tests.py nbs/04_kernels.ipynb --flags gpu 2>&1 | tee "$OUT/tests.log"; tests=${PIPESTATUS[0]}
elif [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout ${TEST_TIMEOUT:-300} python3 tools/run_gpu_cells.py nbs/04_kernels.ipynb rope_lit.kernels 2>&1 | tee "$OUT/tests.log"; tests=${PIPESTATUS[0]}
fi
timeout ${BENCH_TIMEOUT:-600} python3 -c "import sys; from rope_lit.bench_cli import main; main(sys.argv[1:])" --device cuda --out "$OUT/bench" --no-progress ${SWEEP:+--sweep} "$@" 2>&1 | tee "$OUT/bench.log"; bench=${PIPESTATUS[0]}
# a failing check or benchmark fails the call (the benchmark still runs after failed checks, to keep its numbers)
[ "${tests:-0}" = 0 ] && [ "$bench" = 0 ] || { echo "gpu_bench: FAIL (checks exit ${tests:-0}, benchmark exit $bench)"; exit 1; }
