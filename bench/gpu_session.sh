#!/usr/bin/env bash
# One GPU-machine call: the gpu-marked tests and the benchmarks whose figures docs/benchmarks.md reports.
#
#   STEPS="tests sweep" bash bench/gpu_session.sh
#
# Steps (each time-boxed by NAME_S seconds, each writing NAME.log under $OUT as it goes, so a call cut off
# at its limit still brings back what it finished):
#   tests       every gpu-marked test (pytest -m gpu; one line per test, each bounded by TEST_TIMEOUT_S), results
#               also as $OUT/junit.xml; TESTS=tests/gpu_workers tests/training tests/agent on a node without the web extras
#   sweep       KernelBench identity sweep (bench/kernelbench_sweep.py; KERNELBENCH: the task folder, carried into the
#               checkout since ../shared does not travel): resumable; its JSONL is $OUT/sweep.jsonl (and every
#               evaluation's phases as they happen, $OUT/sweep.jsonl.progress.log),
#               seeded from SWEEP_RESUME (a JSONL from an earlier call) or else from the last call's rows on a
#               warm machine (SWEEP_STATE, /tmp/kc-state/sweep.jsonl), so a long sweep spans several calls
#   probe       whether a timer can see, from its own context, other processes' work drain from the GPU
#               after they are stopped (bench/drain_probe.py: the basis of timing.await_idle)
#   compile     cold compile-and-load, ours against load_inline (bench/compile_speed.py)
#   throughput  distinct 1M-element candidates through the local pool (bench/throughput.py)
#   realwork    distinct real candidates on KernelBench tasks at their published sizes (REAL_TASKS), each a cold
#               CUDA build, timed once the tasks' baselines are kept (bench/throughput.py --kernelbench);
#               REAL_N candidates (64), REAL_KEEP identity evaluations per task before the clock; PYSPY (below)
#   fidelity    the same kernel in 5 separate evaluations, then Nsight Compute on it (eval_timeline, ncu_agreement)
#   train       one GRPO and one PPO step of a randomly initialised model (bench/train_step.py)
#   watch       the profiler's records of a watched forward, event by event (bench/watch_events.py)
#   overhead    where a host-bound forward's time goes in a child (bench/host_overhead.py) for each of
#               OVERHEAD_TASKS (KernelBench paths under the task folder), with the plain loop and with our
#               timer (OVERHEAD_TIMERS), OVERHEAD_ARGS passed on
#   alternation whether timing two processes in alternation cancels the host's drift (bench/alternation.py)
#               for each of ALT_TASKS (KernelBench paths), free and on one CPU, idle and beside ALT_LOAD busy
#               processes; ALT_ARGS passed on; $OUT/alternation.jsonl
#   repro       the host-timed identities (REPRO_TASKS, default L3 9, 20, 22, 28, 32, 40, 41, 42): 3 repeats at
#               1 worker with the plain method beside each, then once at 16 workers, in one JSONL
#               (repro.jsonl), whose summary gives max/min over the runs and the agreement
# The default is "tests sweep". Variables: SWEEP_WORKERS (16), SWEEP_PROCESSES (1), SWEEP_ARGS (extra arguments),
# TP_WORKERS (16; several, e.g. "16 24": each in turn), TP_PROCESSES (1; several, e.g. "1 4": each in turn),
# TP_N (80 candidates).
set -uo pipefail
OUT=${OUT:-/tmp/kc-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KERNELCOURT_CACHE_DIR=${KERNELCOURT_CACHE_DIR:-/tmp/kc-cache}
GPUS=$(nvidia-smi -L | wc -l)
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
  nvcc --version | tail -1; echo "cores $(nproc), gpus $GPUS, commit $(git rev-parse --short HEAD 2>/dev/null)"
  (ncu --version | tail -1) 2>&1; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# PYSPY=SECONDS (with .whl/py_spy-*.whl carried): once a step's log shows the clock started, sample which Python
# threads of the process under test hold the GIL (py-spy --gil, not pausing it) for that long: $OUT/NAME.gil.txt,
# collapsed stacks, and NAME.active.txt, every thread not waiting in a system call; both folded into NAME.stacks.txt
# (bench/fold_stacks.py: the share of instants the GIL was held tells a saturated interpreter from idle waiting)
sample_gil() {  # sample_gil NAME PATTERN MARKER: after MARKER appears in NAME.log, sample the process matching PATTERN
  local name=$1 pattern=$2 marker=$3 spy pid
  spy=$(ls /tmp/pyspy/*/scripts/py-spy 2>/dev/null | head -1)
  [ -z "$spy" ] && { mkdir -p /tmp/pyspy && python3 -m zipfile -e .whl/py_spy-*.whl /tmp/pyspy >/dev/null 2>&1
    spy=$(ls /tmp/pyspy/*/scripts/py-spy 2>/dev/null | head -1); chmod +x "$spy" 2>/dev/null; }
  [ -z "$spy" ] && { echo "py-spy: no wheel in .whl" > "$OUT/$name.gil.txt"; return; }
  for _ in $(seq 600); do grep -q "$marker" "$OUT/$name.log" 2>/dev/null && break; sleep 1; done
  sleep 20; pid=$(pgrep -f "^python3 $pattern" | head -1); [ -z "$pid" ] && return
  "$spy" record --gil --nonblocking -r 50 -d "$PYSPY" -f raw -o "$OUT/$name.gil.txt" --pid "$pid" > "$OUT/$name.spy.log" 2>&1 &
  "$spy" record --nonblocking -r 50 -d "$PYSPY" -f raw -o "$OUT/$name.active.txt" --pid "$pid" >> "$OUT/$name.spy.log" 2>&1
  wait
  { python3 bench/fold_stacks.py "$OUT/$name.gil.txt" --rate 50 --seconds "$PYSPY"
    python3 bench/fold_stacks.py "$OUT/$name.active.txt" --top 10; } > "$OUT/$name.stacks.txt" 2>&1
}

step() {  # step NAME SECONDS COMMAND...: run, keep the log, print its tail
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: exit $? in $((SECONDS - t0)) s"; tail -"${TAIL:-12}" "$OUT/$name.log" | cut -c1-700
}

for s in ${STEPS:-tests sweep}; do
  case "$s" in
    tests)
      step tests "${TESTS_S:-300}" python3 -m pytest -p no:cacheprovider -p bench.instafail -v --tb=short --timeout "${TEST_TIMEOUT_S:-150}" -m gpu -rfEs --junitxml "$OUT/junit.xml" \
        ${TESTS:-tests} ;;
    sweep)
      # A warm machine keeps /tmp between calls: the sweep's rows (and the kept baselines in the cache)
      # carry over to the next call without a round trip, unless SWEEP_RESUME names a file to start from.
      STATE=${SWEEP_STATE:-/tmp/kc-state/sweep.jsonl}; mkdir -p "$(dirname "$STATE")"
      if [ -n "${SWEEP_RESUME:-}" ] && [ -f "$SWEEP_RESUME" ]; then cp "$SWEEP_RESUME" "$OUT/sweep.jsonl"
      elif [ -f "$STATE" ]; then cp "$STATE" "$OUT/sweep.jsonl"; fi
      TAIL=30 step sweep "${SWEEP_S:-500}" python3 bench/kernelbench_sweep.py --root "${KERNELBENCH:-$( [ -d shared/kernelbench ] && echo shared/kernelbench || echo ../shared/kernelbench)}" \
        --device cuda --workers "${SWEEP_WORKERS:-16}" --processes "${SWEEP_PROCESSES:-1}" --out "$OUT/sweep.jsonl" \
        --stop-after "${SWEEP_STOP:-$(( ${SWEEP_S:-500} - 100 ))}" ${SWEEP_ARGS:-}
      cp "$OUT/sweep.jsonl" "$STATE" 2>/dev/null ;;
    probe)
      step probe "${PROBE_S:-120}" python3 bench/drain_probe.py --out "$OUT/drain_probe.json" ;;
    compile)
      step compile "${COMPILE_S:-200}" python3 bench/compile_speed.py --device cuda --candidates 1 --extra-ours 5 ;;
    throughput)
      step throughput "${TP_S:-200}" python3 bench/throughput.py --device cuda --build --gpus "$GPUS" \
        --workers ${TP_WORKERS:-16} --candidates "${TP_N:-80}" --size 1048576 ;;
    realwork)
      root=$( [ -d shared/kernelbench ] && echo shared/kernelbench || echo ../shared/kernelbench)
      [ -n "${PYSPY:-}" ] && sample_gil realwork "bench/throughput.py" "baselines kept before the clock" &
      TAIL=30 step realwork "${REAL_S:-450}" python3 bench/throughput.py --device cuda --gpus "$GPUS" \
        --workers ${TP_WORKERS:-16} --processes ${TP_PROCESSES:-1} --candidates "${REAL_N:-64}" --kernelbench "$root" \
        --tasks ${REAL_TASKS:-1/1 1/12 2/12 2/17 2/40 2/80 3/8 3/36} ${REAL_KEEP:+--keep-runs $REAL_KEEP} ;;
    fidelity)
      step fidelity "${FIDELITY_S:-200}" python3 bench/eval_timeline.py --device cuda --only gelu --repeat 5 \
        --out "$OUT/fidelity.json"
      [ -f "$OUT/fidelity.json" ] && step ncu "${NCU_S:-90}" python3 bench/ncu_agreement.py \
        --suite-json "$OUT/fidelity.json" --out "$OUT/ncu.json" ;;
    train)
      step train_0.5b "${TRAIN_S:-200}" python3 bench/train_step.py --device cuda --shape qwen2-0.5b --seq 4096 --batch 8
      step train_1.5b_lora "${TRAIN_S:-200}" python3 bench/train_step.py --device cuda --shape qwen2-1.5b --seq 4096 \
        --batch 8 --lora 64
      step train_7b_lora "${TRAIN_S:-200}" python3 bench/train_step.py --device cuda --shape qwen2-7b --seq 16384 \
        --batch 8 --lora 64 ;;
    watch)
      step watch "${WATCH_S:-60}" python3 bench/watch_events.py --device cuda --out "$OUT/watch_events.json" ;;
    overhead)
      root=$( [ -d shared/kernelbench ] && echo shared/kernelbench || echo ../shared/kernelbench)
      for timer in ${OVERHEAD_TIMERS:-loop ours}; do
        TAIL=40 step "overhead_$timer" "${OVERHEAD_S:-300}" bash -c 'for t in $0; do echo "== $t"; python3 bench/host_overhead.py "$1/$t" --device cuda --timer "$2" $3; done' \
          "${OVERHEAD_TASKS:-level3/28_VisionTransformer.py}" "$root" "$timer" "${OVERHEAD_ARGS:---repeat 2}"
      done ;;
    alternation)
      root=$( [ -d shared/kernelbench ] && echo shared/kernelbench || echo ../shared/kernelbench)
      TAIL=40 step alternation "${ALT_S:-300}" bash -c 'for t in $0; do for load in 0 $2; do for pin in "" "--pin 3"; do
          python3 bench/alternation.py "$1/$t" --device cuda --load $load $pin $3 --out "$4" | tail -2; done; done; done' \
        "${ALT_TASKS:-level3/28_VisionTransformer.py}" "$root" "${ALT_LOAD:-12}" "${ALT_ARGS:---pairs 3}" "$OUT/alternation.jsonl" ;;
    repro)
      root=$( [ -d shared/kernelbench ] && echo shared/kernelbench || echo ../shared/kernelbench)
      tasks=${REPRO_TASKS:-3/9 3/20 3/22 3/28 3/32 3/40 3/41 3/42}
      TAIL=30 step repro_1w "${REPRO_S:-400}" python3 bench/kernelbench_sweep.py --root "$root" --device cuda \
        --workers 1 --repeat 3 --plain --tasks $tasks --out "$OUT/repro.jsonl"
      # a fourth run of each, at 16 workers: appended as repeat 3 (the rows of repeats 0-2 are kept)
      TAIL=30 step repro_16w "${REPRO_S:-400}" python3 bench/kernelbench_sweep.py --root "$root" --device cuda \
        --workers 16 --repeat 4 --tasks $tasks --out "$OUT/repro.jsonl" ;;
    *) echo "unknown step $s (tests sweep probe compile throughput realwork fidelity train watch overhead alternation repro)"; exit 2 ;;
  esac
done
exit 0
