#!/usr/bin/env bash
# The one command for a machine with one or more NVIDIA GPUs: set up, run every gpu-marked test (nccl where there are
# two or more GPUs, AMP, real NVML, dp on real devices), then the GPU variants of the benchmark suite, whose report
# lands under benchmarks/results/<date>_<N>x<GPU>/. Without a visible GPU it says what it skipped and exits 0.
#
#   bash benchmarks/gpu_check.sh                     # extra arguments go to benchmarks/run.py, e.g. --quick
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
PY=.venv/bin/python
gpus=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
if [ "$gpus" = "0" ]; then
  echo "gpu_check: no CUDA GPU visible (CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES-unset}'); skipped: the gpu-marked tests and the GPU suite."
  exit 0
fi
echo "gpu_check: $gpus GPU(s): $("$PY" -c "import torch; print(', '.join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))")"
status=0
"$PY" -m pytest -m gpu -q -p no:cacheprovider tests || status=$?
"$PY" benchmarks/run.py --gpu "$@" || status=$?
exit "$status"
