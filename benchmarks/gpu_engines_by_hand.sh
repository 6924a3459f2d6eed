#!/usr/bin/env bash
# One GPU, one bounded call: `sharded_fsdp2` and `ActivationCheckpointing` against their engines driven by hand on
# ResNet-50 and GPT-2 small (bf16, 3 rounds), where FSDP2's host time goes (torch.profiler, per family), then the
# gpu-marked tests and the GPU suite's remaining benchmarks. Steps run most important first, each under its share of
# one deadline, and the results folder is packed after each step, so what ran is kept if the call is cut short.
#
#   LIGHTNING_MGPU_PYTHON=python3 bash benchmarks/gpu_engines_by_hand.sh          # results in ./gpu_out
#   OUT=/tmp/r DEADLINE_S=900 bash benchmarks/gpu_engines_by_hand.sh              # elsewhere, with more time
#   STEPS="ac_gpt gpu_tests suite" bash benchmarks/gpu_engines_by_hand.sh          # some steps, in that order
#
# Steps: ac_and_fsdp2_tests, real_models, profile_fsdp2, ac_gpt (the callback against checkpointing by hand under the
# same Trainer and in a plain loop, GPT-2, 7 rounds), gpu_tests, suite. GPU_TESTS_S, GPU_TESTS_PATHS (default: tests),
# GPU_TESTS_DIST (xdist's --dist, default loadfile; `load` spreads one file's cases), SUITE_S and SUITE_ONLY size the
# last two.
#
# Needs CUDA torch, Lightning, pytest (+ xdist, timeout) in LIGHTNING_MGPU_PYTHON's environment; a node without
# network installs fairscale and torchdata from wheels first (WHEELS=DIR). The full GPU check is benchmarks/gpu_check.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${LIGHTNING_MGPU_PYTHON:-python3}
OUT=${OUT:-gpu_out}
DEADLINE_S=${DEADLINE_S:-570}
work=$(mktemp -d)
start=$(date +%s)
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="/tmp/site"
fi
# The repository first: FairScale installs a `benchmarks` package of its own.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0 NEPTUNE_MODE=debug

step() {  # step NAME SECONDS COMMAND...: run under min(SECONDS, what the deadline leaves), log to NAME.txt, pack
  local name=$1 limit=$2 left
  shift 2
  left=$((DEADLINE_S - ($(date +%s) - start) - 15))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 20 ]; then
    echo "== $name: skipped, ${left}s left" | tee -a "$work/steps.txt"
    return
  fi
  echo "== $name (<= ${limit}s, at $(($(date +%s) - start))s)" | tee -a "$work/steps.txt"
  timeout -k 5 "$limit" "$@" >"$work/$name.txt" 2>&1
  echo "   exit $? after $(($(date +%s) - start))s" | tee -a "$work/steps.txt"
  tail -n 25 "$work/$name.txt"
  tar -czf "$OUT/results.tar.gz" -C "$work" .
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  "$PY" -c "import torch, lightning, sys; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda,
'nccl', torch.cuda.nccl.version(), 'lightning', lightning.__version__)"
  nproc
} >"$work/machine.txt" 2>&1
cat "$work/machine.txt"
run_step() {
  case $1 in
  ac_and_fsdp2_tests)
    step ac_and_fsdp2_tests 90 "$PY" -m pytest -p no:cacheprovider -p no:xdist -q -rA -m gpu \
      tests/unit/callbacks/test_activation_checkpointing.py tests/unit/strategies/fsdp2 ;;
  real_models)
    step real_models 300 "$PY" -m benchmarks.bench_real_models --rounds 3 \
      --arms raw,raw_fsdp2,sharded_fsdp2,sharded_fsdp2_auto,raw_ac,ac,lightning --result "$work/real_models.json" ;;
  profile_fsdp2)
    step profile_fsdp2 110 "$PY" -m benchmarks.profile_fsdp2 --device cuda --model resnet --rounds 1 --steps 10 \
      --arms raw_fsdp2,sharded_fsdp2,sharded_fsdp2_default,sharded_fsdp2_per_module --tables \
      --json "$work/profile_fsdp2.json" ;;
  ac_gpt)
    # GPT-2's checkpointed arms spread 61.7 - 72.5 ms over 3 rounds: more rounds and steps, and the callback's peer
    # under the same Trainer, so that Lightning's own share is not counted against it.
    step ac_gpt 170 "$PY" -m benchmarks.bench_real_models --models gpt --rounds 7 --steps 30 \
      --arms raw_ac,lightning_hand_ac,ac --result "$work/ac_gpt.json" ;;
  gpu_tests)
    # Horovod's GPU tests need a build with NCCL (build-horovod --gpu); they ran on 2026-11-28 and are left out here.
    # shellcheck disable=SC2086
    step gpu_tests "${GPU_TESTS_S:-150}" "$PY" -m pytest -p no:cacheprovider -q -rA -n 4 --dist "${GPU_TESTS_DIST:-loadfile}" \
      -m gpu --durations=15 --ignore=tests/integration/strategies/horovod ${GPU_TESTS_PATHS:-tests} ;;
  suite)
    step suite "${SUITE_S:-240}" "$PY" -m benchmarks.run --gpu --quick \
      --only "${SUITE_ONLY:-starved_gpu,amp,dp,gpu_monitor,sharded_checkpoint}" --out "$work/suite" ;;
  *) echo "unknown step $1" | tee -a "$work/steps.txt" ;;
  esac
}
for name in ${STEPS:-ac_and_fsdp2_tests real_models profile_fsdp2 gpu_tests suite}; do
  run_step "$name"
done
echo "total $(($(date +%s) - start))s"
