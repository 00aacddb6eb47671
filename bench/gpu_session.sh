#!/usr/bin/env bash
# One GPU-machine call for issue 7's figures: environment facts, the CUDA compile bench (16 cores),
# timing fidelity (5 separate evaluations) with each evaluation's timeline, Nsight Compute agreement,
# the gpu-marked fault/split tests, throughput on one GPU (16 cores), optionally the whole suite table
# (SUITE_S=300), and throughput on every GPU. Each step is
# time-boxed (override with NAME_S variables; 0 skips) and writes under $OUT as it goes, so a cut-off
# run still reports what it finished.
#
# One call holds 10 minutes, so the set comes in parts, each about 9 minutes:
#   PART=1 bash bench/gpu_session.sh   # gpu tests, the CUDA compile bench, throughput on 1 and all GPUs
#   PART=2 bash bench/gpu_session.sh   # timing fidelity (5 evaluations) and Nsight Compute agreement
#   PART=3 bash bench/gpu_session.sh   # the whole suite table through the evaluator, eager and compile
#   PART=4 bash bench/gpu_session.sh   # a short pass over all of it (fault test, compile, throughput at 1M
#                                      # elements, fidelity, ncu) for a session with ~9 minutes left
#   PART=5 bash bench/gpu_session.sh   # gpu tests, compile (1 load_inline, 6 ours), throughput at 1, 4 and 16
#                                      # workers (1M elements, 3 rounds each), fidelity and ncu on gelu
#   PART=7 bash bench/gpu_session.sh   # the fault test, compile (1 load_inline, 6 ours), throughput at 4 and
#                                      # 16 workers (16 and 64 candidates of 1M elements), fidelity, ncu
#   PART=8 bash bench/gpu_session.sh   # throughput at 16 workers (64 candidates of 1M elements) under each cap
#                                      # on shared GPU holders in CAPS (KERNELCOURT_GPU_SHARED_MAX; 0: none)
#   PART=9 bash bench/gpu_session.sh   # test_gpu_hacks, throughput at 1, 4, 16 and 24 workers (1M elements,
#                                      # 4 rounds), fidelity and ncu on gelu
#   PART=10 bash bench/gpu_session.sh  # the fault and hack GPU tests, throughput at 1, 4, 16 and 24 workers
#   PART=11 bash bench/gpu_session.sh  # the hack GPU tests, throughput at 1, 4 and 16 workers, fidelity and ncu
#                                      # on gelu
#   PART=12 bash bench/gpu_session.sh  # throughput at 16 workers on one GPU (16 cores), at 32 on every GPU through
#                                      # the local pool and through Ray (128 candidates each), fidelity and ncu on
#                                      # gelu. Ray from .whl/ray.tar.xz (see RAY_S below)
#   PART=13 bash bench/gpu_session.sh  # the hack and fault GPU tests, every suite task once (medians), ncu on all
#   PART=14 bash bench/gpu_session.sh  # on the 1-GPU kind: throughput at 16 workers (112 candidates), the hack GPU
#                                      # tests, every suite task once (medians) and ncu on all of them
#   PART=15 bash bench/gpu_session.sh  # the hack and fault GPU tests (first: the Landlock confinement and the kept
#                                      # baseline samples have not run on a GPU yet), then throughput at 16 workers
#                                      # (80 candidates) with each median precision in SETTLES (KERNELCOURT_SETTLE_WITHIN)
#   PART=16 bash bench/gpu_session.sh  # the hack, fault and measure GPU tests, then throughput at 16 workers (80
#                                      # candidates) for each of VARIANTS (name:VAR=value,VAR=value; "default" alone)
#   PART=17 bash bench/gpu_session.sh  # throughput for each of VARIANTS, then fidelity (5 evaluations) and ncu on gelu
#   PART=18 bash bench/gpu_session.sh  # which writes CUDA needs under the confinement (bench/confine_cuda.py), the
#                                      # hack and fault GPU tests, throughput at 16 workers (80 candidates)
#   PART=19 bash bench/gpu_session.sh  # the hack GPU tests without the spin (TESTS_ENV), then throughput with and
#                                      # without it and with medians known to 2%
#   PART=20 bash bench/gpu_session.sh  # the hack GPU tests (their results kept), fidelity on gelu without the spin
#                                      # (FIDELITY_VARIANTS) and with it, ncu
#   PART=21 bash bench/gpu_session.sh  # the measure and hack GPU tests, fidelity with the timing on the GPU's own
#                                      # NUMA node's CPUs and without, throughput both ways (64 candidates)
#   PART=22 bash bench/gpu_session.sh  # the measure, hack and fault GPU tests, fidelity on gelu (with each
#                                      # evaluation's empty-iteration time), ncu, throughput (80 candidates)
#   PART=23 bash bench/gpu_session.sh  # throughput (80 candidates, the first round's timeline apart), every suite
#                                      # task once (the reward's medians), ncu on all of them
#   PART=24 bash bench/gpu_session.sh  # throughput from a cold machine (160 candidates; the warm-up builds the
#                                      # bridge and the header before the clock)
#   PART=25 bash bench/gpu_session.sh  # the measure, hack and fault GPU tests, the judge's CPU per comparison with
#                                      # torch's threads against the cap, throughput with and without the cap
#   PART=26 bash bench/gpu_session.sh  # the measure, light-build and hack GPU tests, one candidate's build profile
#                                      # (each command's CPU, nvcc's phases) with and without the light header's PCH
#   PART=27 bash bench/gpu_session.sh  # whether other processes making and ending CUDA contexts move a timed kernel
#                                      # (bench/context_interference.py), then throughput (160 candidates, cold)
#                                      # with candidates' contexts made outside the GPU slot and inside it
#   PART=6 bash bench/gpu_session.sh   # every suite task once (medians), ncu on all of them, throughput on
#                                      # every GPU (the 2-GPU kind)
set -uo pipefail
case "${PART:-all}" in
  1) : "${FIDELITY_S:=0}" "${NCU_S:=0}" ;;
  2) : "${TESTS_S:=0}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" ;;
  4) : "${TESTS:=tests/gpu_workers/test_evaluator_gpu.py}" "${TESTS_S:=110}" "${COMPILE_S:=100}" "${COMPILE_N:=1}" \
       "${EXTRA_OURS:=3}" "${TP1_S:=80}" "${TP_SIZE:=1048576}" "${TPN_S:=0}" "${FIDELITY_S:=130}" "${NCU_S:=55}" ;;
  5) : "${TESTS_S:=150}" "${COMPILE_S:=130}" "${COMPILE_N:=1}" "${EXTRA_OURS:=5}" "${TP1_S:=150}" \
       "${TP_WORKERS:=1 4 16}" "${TP_ROUNDS:=3}" "${TP_SIZE:=1048576}" "${TPN_S:=0}" "${FIDELITY_S:=60}" "${NCU_S:=30}" ;;
  6) : "${TESTS_S:=0}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=150}" "${TP_ROUNDS:=3}" "${TP_SIZE:=1048576}" \
       "${FIDELITY_ONLY:=}" "${FIDELITY_REPEAT:=1}" "${FIDELITY_S:=150}" "${NCU_S:=220}" ;;
  7) : "${TESTS:=tests/gpu_workers/test_evaluator_gpu.py}" "${TESTS_S:=110}" "${COMPILE_S:=200}" "${COMPILE_N:=1}" \
       "${EXTRA_OURS:=5}" "${TP1_S:=130}" "${TP_WORKERS:=4 16}" "${TP_N:=16}" "${TP_ROUNDS:=4}" "${TP_SIZE:=1048576}" \
       "${TPN_S:=0}" "${FIDELITY_S:=100}" "${NCU_S:=20}" ;;
  8) : "${TESTS_S:=0}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${FIDELITY_S:=0}" "${NCU_S:=0}" \
       "${CAPS:=0 2 4 8}" "${CAP_S:=110}" ;;
  9) : "${TESTS:=tests/gpu_workers/test_gpu_hacks.py}" "${TESTS_S:=150}" "${COMPILE_S:=0}" "${TP1_S:=270}" \
       "${TP_WORKERS:=1 4 16 24}" "${TP_N:=16}" "${TP_ROUNDS:=4}" "${TP_SIZE:=1048576}" "${TP_TAIL:=24}" "${TPN_S:=0}" \
       "${FIDELITY_S:=100}" "${NCU_S:=25}" ;;
  10) : "${TESTS:=tests/gpu_workers/test_evaluator_gpu.py tests/gpu_workers/test_gpu_hacks.py}" "${TESTS_S:=230}" \
        "${COMPILE_S:=0}" "${TP1_S:=290}" "${TP_WORKERS:=1 4 16 24}" "${TP_N:=8}" "${TP_ROUNDS:=4}" "${TP_SIZE:=1048576}" \
        "${TP_TAIL:=24}" "${TPN_S:=0}" "${FIDELITY_S:=0}" "${NCU_S:=0}" ;;
  11) : "${TESTS:=tests/gpu_workers/test_gpu_hacks.py}" "${TESTS_S:=150}" "${COMPILE_S:=0}" "${TP1_S:=140}" \
        "${TP_WORKERS:=1 4 16}" "${TP_N:=8}" "${TP_ROUNDS:=4}" "${TP_SIZE:=1048576}" "${TP_TAIL:=12}" "${TPN_S:=0}" \
        "${FIDELITY_S:=130}" "${NCU_S:=25}" ;;
  12) : "${TESTS_S:=0}" "${COMPILE_S:=0}" "${TP1_S:=140}" "${TP_WORKERS:=16}" "${TP_N:=128}" "${TP_ROUNDS:=0}" \
        "${TP_SIZE:=1048576}" "${TP_TAIL:=12}" "${TPN_S:=110}" "${TPN_WORKERS:=32}" "${RAY_S:=110}" \
        "${FIDELITY_S:=110}" "${NCU_S:=30}" ;;
  13) : "${TESTS:=tests/gpu_workers/test_gpu_hacks.py tests/gpu_workers/test_evaluator_gpu.py}" "${TESTS_S:=260}" \
        "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${FIDELITY_ONLY:=}" "${FIDELITY_REPEAT:=1}" "${FIDELITY_S:=170}" \
        "${NCU_S:=130}" ;;
  14) : "${TESTS:=tests/gpu_workers/test_gpu_hacks.py}" "${TESTS_S:=150}" "${COMPILE_S:=0}" "${TP1_S:=150}" \
        "${TP_WORKERS:=16}" "${TP_N:=112}" "${TP_ROUNDS:=0}" "${TP_SIZE:=1048576}" "${TP_TAIL:=6}" "${TPN_S:=0}" \
        "${FIDELITY_ONLY:=}" "${FIDELITY_REPEAT:=1}" "${FIDELITY_S:=160}" "${NCU_S:=120}" ;;
  15) : "${TESTS:=tests/gpu_workers/test_gpu_hacks.py tests/gpu_workers/test_evaluator_gpu.py}" "${TESTS_S:=250}" \
        "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${FIDELITY_S:=0}" "${NCU_S:=0}" "${SETTLES:=0.02 0.01}" \
        "${SETTLE_S:=130}" ;;
  16) : "${TESTS:=tests/gpu_workers/test_gpu_hacks.py tests/gpu_workers/test_evaluator_gpu.py tests/gpu_workers/child/test_measure.py}" \
        "${TESTS_S:=240}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${FIDELITY_S:=0}" "${NCU_S:=0}" \
        "${VARIANTS:=default nice0:KERNELCOURT_COMPILE_NICE=0}" "${VARIANT_S:=140}" ;;
  18) : "${CONFINE_S:=120}" "${TESTS:=tests/gpu_workers/test_gpu_hacks.py tests/gpu_workers/test_evaluator_gpu.py}" \
        "${TESTS_S:=200}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${FIDELITY_S:=0}" "${NCU_S:=0}" \
        "${VARIANTS:=default}" "${VARIANT_S:=140}" ;;
  19) : "${TESTS:=tests/gpu_workers/test_gpu_hacks.py}" "${TESTS_ENV:=}" "${TESTS_S:=150}" \
        "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${FIDELITY_S:=0}" "${NCU_S:=0}" \
        "${VARIANTS:=spin settle2:KERNELCOURT_SETTLE_WITHIN=0.02}" "${VARIANT_S:=120}" ;;
  20) : "${TESTS:=tests/gpu_workers/test_gpu_hacks.py}" "${TESTS_S:=150}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" \
        "${FIDELITY_VARIANTS:=}" "${FIDELITY_S:=130}" "${NCU_S:=40}" ;;
  21) : "${TESTS:=tests/gpu_workers/child/test_measure.py tests/gpu_workers/test_gpu_hacks.py}" "${TESTS_S:=130}" \
        "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${FIDELITY_VARIANTS:=local:KERNELCOURT_TIMING_CPUS=gpu-local}" \
        "${FIDELITY_S:=115}" "${NCU_S:=0}" "${VARIANTS:=default local:KERNELCOURT_TIMING_CPUS=gpu-local}" \
        "${VARIANT_N:=64}" "${VARIANT_S:=95}" ;;
  22) : "${TESTS:=tests/gpu_workers/child/test_measure.py tests/gpu_workers/test_gpu_hacks.py tests/gpu_workers/test_evaluator_gpu.py}" \
        "${TESTS_S:=190}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${FIDELITY_S:=130}" "${NCU_S:=40}" \
        "${VARIANTS:=default}" "${VARIANT_S:=140}" ;;
  23) : "${TESTS_S:=0}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${VARIANTS:=default}" "${VARIANT_S:=130}" \
        "${FIDELITY_ONLY:=}" "${FIDELITY_REPEAT:=1}" "${FIDELITY_S:=200}" "${NCU_S:=180}" ;;
  24) : "${TESTS_S:=0}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${VARIANTS:=default}" "${VARIANT_S:=260}" \
        "${VARIANT_N:=160}" "${FIDELITY_S:=0}" "${NCU_S:=0}" ;;
  25) : "${TESTS:=tests/gpu_workers/child/test_measure.py tests/gpu_workers/test_gpu_hacks.py tests/gpu_workers/test_evaluator_gpu.py}" \
        "${TESTS_S:=190}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${JUDGE_S:=40}" "${FIDELITY_S:=0}" \
        "${NCU_S:=0}" "${VARIANTS:=default judge16:KERNELCOURT_JUDGE_THREADS=16}" "${VARIANT_S:=130}" ;;
  26) : "${TESTS:=tests/gpu_workers/child/test_measure.py tests/gpu_workers/build/test_light.py tests/gpu_workers/test_gpu_hacks.py}" \
        "${TESTS_S:=200}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${PROFILE_S:=90}" "${FIDELITY_S:=0}" \
        "${NCU_S:=0}" "${VARIANTS:=}" ;;
  27) : "${TESTS_S:=0}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${CONTEXT_S:=90}" "${FIDELITY_S:=0}" \
        "${NCU_S:=0}" "${VARIANT_N:=160}" "${VARIANT_S:=200}" \
        "${VARIANTS:=free}" ;;
  17) : "${TESTS_S:=0}" "${COMPILE_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${VARIANTS:=default}" "${VARIANT_S:=140}" \
        "${FIDELITY_S:=150}" "${NCU_S:=40}" ;;
  3) : "${COMPILE_S:=0}" "${FIDELITY_S:=0}" "${NCU_S:=0}" "${TESTS_S:=0}" "${TP1_S:=0}" "${TPN_S:=0}" "${SUITE_S:=540}" ;;
esac
OUT=${OUT:-/tmp/ka-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KERNELCOURT_CACHE_DIR=${KERNELCOURT_CACHE_DIR:-/tmp/ka-cache}
GPUS=$(nvidia-smi -L | wc -l)
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
  nvcc --version | tail -1; echo "cores $(nproc), gpus $GPUS"; (ncu --version | tail -1) 2>&1
  lscpu | grep -i -E "numa|socket|model name"; nvidia-smi topo -m; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
step() {  # step NAME SECONDS COMMAND...: run, keep the log, print its tail
  local name=$1 secs=$2; shift 2
  [ "$secs" -gt 0 ] || return 0
  local t0=$SECONDS
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: exit $? in $((SECONDS - t0)) s"; tail -${TAIL:-8} "$OUT/$name.log" | cut -c1-${WIDTH:-700}
}
CORES16="taskset -c 0-15"
step confine_cuda "${CONFINE_S:-0}" python3 bench/confine_cuda.py
step gpu_tests "${TESTS_S:-170}" env ${TESTS_ENV:-} python3 -m pytest -p no:cacheprovider -q -m gpu -rA ${TESTS:-tests/gpu_workers/build/test_light.py \
  tests/gpu_workers/test_evaluator_gpu.py tests/gpu_workers/build/test_split.py::test_split_build_failure_falls_back_to_the_plain_build}
[ -f test-artifacts/gpu_hack_results.json ] && cp test-artifacts/gpu_hack_results.json "$OUT/"
step compile_profile "${PROFILE_S:-0}" bash -c "python3 bench/compile_profile.py --device cuda --repeat 3 && \
  python3 bench/compile_profile.py --device cuda --repeat 3 --no-lite-pch"
step context_interference "${CONTEXT_S:-0}" python3 bench/context_interference.py --seconds 6 --neighbours 6 \
  --residents 8 --out "$OUT/context.json"
step judge_compare "${JUDGE_S:-0}" python3 bench/judge_compare.py --elements 1048576 --concurrent 16 --repeat 10
step compile_speed "${COMPILE_S:-170}" $CORES16 python3 bench/compile_speed.py --device cuda --candidates "${COMPILE_N:-2}" \
  --extra-ours "${EXTRA_OURS:-0}"
TAIL=${TP_TAIL:-6} step throughput_1gpu "${TP1_S:-100}" $CORES16 python3 bench/throughput.py --device cuda --build --gpus 1 \
  --workers ${TP_WORKERS:-16} --candidates "${TP_N:-32}" --rounds "${TP_ROUNDS:-0}" --size "${TP_SIZE:-0}"
[ "$GPUS" -gt 1 ] && TAIL=${TP_TAIL:-4} step throughput_all_gpus "${TPN_S:-100}" python3 bench/throughput.py --device cuda \
  --build --gpus "$GPUS" --workers ${TPN_WORKERS:-16} --candidates "${TP_N:-32}" --rounds "${TP_ROUNDS:-0}" --size "${TP_SIZE:-0}"
# Ray on every GPU (one actor per GPU): Ray's files come as .whl/ray.tar.xz, made by bench/pack_ray.sh
# (its wheel unpacked and packed with xz: the wheel itself is over the carry limit), with the wheels of
# its missing dependencies beside it
if [ "${RAY_S:-0}" -gt 0 ] && [ -f .whl/ray.tar.xz ]; then
  mkdir -p /tmp/site && tar xJf .whl/ray.tar.xz -C /tmp/site && python3 -m pip install -q --no-index --no-deps \
    --no-compile --target /tmp/site .whl/*.whl > "$OUT/ray_install.log" 2>&1
  PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} TAIL=${TP_TAIL:-4} step throughput_ray "$RAY_S" python3 \
    bench/throughput.py --device cuda --build --pool ray --gpus "$GPUS" --workers ${TPN_WORKERS:-16} \
    --candidates "${TP_N:-32}" --size "${TP_SIZE:-0}"
fi
for settle in ${SETTLES:-}; do
  TAIL=3 KERNELCOURT_SETTLE_WITHIN=$settle step "throughput_settle$settle" "${SETTLE_S:-130}" $CORES16 python3 \
    bench/throughput.py --device cuda --build --gpus 1 --workers 16 --candidates 80 --size 1048576
done
for variant in ${VARIANTS:-}; do  # name, or name:VAR=value,VAR=value: the same throughput run under each setting
  name=${variant%%:*}; settings=(); [ "$name" != "$variant" ] && IFS=, read -ra settings <<< "${variant#*:}"
  TAIL=4 step "throughput_$name" "${VARIANT_S:-140}" env "${settings[@]}" $CORES16 python3 bench/throughput.py \
    --device cuda --build --gpus 1 --workers 16 --candidates "${VARIANT_N:-80}" --size 1048576
done
for cap in ${CAPS:-}; do
  TAIL=4 KERNELCOURT_GPU_SHARED_MAX=$cap step "throughput_cap$cap" "${CAP_S:-110}" $CORES16 python3 bench/throughput.py \
    --device cuda --build --gpus 1 --workers 16 --candidates 64 --size 1048576
done
for variant in ${FIDELITY_VARIANTS:-}; do  # name:VAR=value,...: fidelity under another setting, before the main one
  name=${variant%%:*}; settings=(); [ "$name" != "$variant" ] && IFS=, read -ra settings <<< "${variant#*:}"
  TAIL=3 step "fidelity_$name" "${FIDELITY_S:-220}" env "${settings[@]}" python3 bench/eval_timeline.py --device cuda \
    --only ${FIDELITY_ONLY-gelu} --repeat "${FIDELITY_REPEAT:-5}" --out "$OUT/fidelity_$name.json"
done
TAIL=${FIDELITY_TAIL:-3} step fidelity "${FIDELITY_S:-220}" python3 bench/eval_timeline.py --device cuda \
  --only ${FIDELITY_ONLY-gelu} --repeat "${FIDELITY_REPEAT:-5}" --out "$OUT/fidelity.json"
[ -f "$OUT/fidelity.json" ] && step ncu "${NCU_S:-90}" python3 bench/ncu_agreement.py --suite-json "$OUT/fidelity.json" \
  --out "$OUT/ncu.json"
TAIL=24 step suite "${SUITE_S:-0}" python3 bench/suite_gpu.py --device cuda --baselines eager,compile \
  --timing-budget 0.5 --build-workers 16 --fidelity-runs 0 --out "$OUT/suite.json" --markdown "$OUT/suite.md"
exit 0
