#!/usr/bin/env bash
# One GPU-machine call: environment facts, the suite's build + evaluation (eager and torch.compile),
# timing fidelity, the gpu-marked tests, then the CUDA compile bench — each step time-boxed, each
# writing under $OUT as it goes so a cut-off run still reports what it finished.
set -uo pipefail
OUT=${OUT:-/tmp/ka-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KERNELARENA_CACHE_DIR=/tmp/ka-cache
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
  nvcc --version | tail -1; nproc; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout "${SUITE_S:-360}" python3 bench/suite_gpu.py --device cuda --baselines eager,compile --timing-budget 1.0 \
  --build-workers 16 --fidelity-runs 5 --out "$OUT/suite.json" --markdown "$OUT/suite.md" > "$OUT/suite.log" 2>&1
echo "suite exit $?"; tail -25 "$OUT/suite.log"
timeout "${TESTS_S:-150}" python3 -m pytest -p no:cacheprovider -q -m gpu -rA tests/gpu_workers/test_gpu_hacks.py \
  tests/gpu_workers/test_suite_evaluation.py > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/gpu_tests.log" | tail -15
timeout "${BENCH_S:-60}" python3 bench/compile_speed.py --device cuda --candidates 1 > "$OUT/compile_speed.log" 2>&1
echo "compile bench exit $?"; tail -6 "$OUT/compile_speed.log"
