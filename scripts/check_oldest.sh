#!/usr/bin/env bash
# The oldest supported pair, in someone else's environment: torch 2.6 and Lightning 2.5.1.
#
#   bash scripts/check_oldest.sh            # about 10 minutes here; downloads torch 2.6 once (~3 GB, pip's cache)
#
# 1. A fresh venv (.venv-oldest) gets what a user's project pins: torch==2.6.0 from the index (there it is the CUDA
#    build, which runs on CPU) and pytorch-lightning==2.5.1 alone.
# 2. The bundle's wheel and sdist are built (python -m build), and the wheel is installed with the sharded and
#    [pytorch-lightning] extras. Checked: pip moved neither torch nor pytorch-lightning, and did not pull `lightning`.
# 3. The quick start for `import pytorch_lightning as pl` trains there (dp, ddp_sharded and sharded_fsdp2, 2 processes
#    where the strategy launches), with only pytorch-lightning installed.
# 4. lightning==2.5.1, fairscale and the test tools join (torch still pinned), and the compatibility pass runs: the
#    unit tier and a two-process fit per strategy under both namespaces (horovod's wheel is built for .venv's torch,
#    so its cases skip here, by name), then examples/train.py under ddp_sharded, dp and sharded_fsdp2.
# Not part of .ci/run: the torch download and install alone take minutes; CI runs the oldest Lightning on torch 2.13
# (scripts/check_compat.sh). Run this before changing the declared minimums; the README's table records its result.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${TORCH_OLDEST:-2.6.0}
LIGHTNING=${LIGHTNING_OLDEST:-2.5.1}
bash scripts/setup_env.sh
BASE=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
V=.venv-oldest
OPY=$V/bin/python
rm -rf "$V" dist-oldest
"$BASE" -m venv "$V"
$OPY -m pip install -q --upgrade pip
echo "== 1. the user's environment: torch==$TORCH pytorch-lightning==$LIGHTNING"
$OPY -m pip install -q "torch==$TORCH" "pytorch-lightning==$LIGHTNING"
$OPY -m pip freeze | sort > "$V/before.txt"

echo "== 2. wheel and sdist, installed with [pytorch-lightning,sharded]"
.venv/bin/python -m pip install -q -c constraints.txt build
.venv/bin/python -m build -q --outdir dist-oldest . > "$V/build.log" 2>&1 || { cat "$V/build.log"; exit 1; }
ls dist-oldest
wheel=$(ls dist-oldest/lightning_mgpu-*.whl)
$OPY -m pip install -q "$wheel[pytorch-lightning,sharded]"
$OPY -m pip freeze | sort > "$V/after.txt"
$OPY - "$V/before.txt" "$V/after.txt" <<'PY'
import sys
def pins(path):
    return {line.split("==")[0].lower().replace("_", "-"): line.strip() for line in open(path) if "==" in line}
before, after = pins(sys.argv[1]), pins(sys.argv[2])
for name in ("torch", "pytorch-lightning", "lightning-fabric", "torchmetrics", "numpy"):
    if name in before and before[name] != after.get(name):
        sys.exit(f"check_oldest: installing the wheel changed {before[name]} to {after.get(name)}")
if "lightning" in after:
    sys.exit(f"check_oldest: the [pytorch-lightning,sharded] extras pulled {after['lightning']}")
added = sorted(set(after) - set(before))
print(f"check_oldest: torch, pytorch-lightning and numpy untouched, no `lightning`; added: {', '.join(added)}")
PY

echo "== 3. the quick start with pytorch_lightning alone"
# From outside the repository, so that the installed wheel is what is imported.
# A file, not stdin: the *_spawn strategies re-import the main module in their workers.
cat > "$V/quickstart.py" <<'PY'
import importlib.util
assert importlib.util.find_spec("lightning") is None
import pytorch_lightning as pl
import lightning_mgpu
from lightning_mgpu.pl.demos.classifier import ImageClassifier
from lightning_mgpu.pl.demos.digits import DigitsDataModule

if __name__ == "__main__":
    import torch
    from lightning_mgpu.pl import ShardedStrategy

    assert "site-packages" in lightning_mgpu.__file__, lightning_mgpu.__file__
    fsdp2_on_cpu = hasattr(torch.cpu.Stream, "record_event")  # torch >= 2.7 (lightning_mgpu.utilities._compat)
    for strategy, devices in (("dp", 1), ("ddp_sharded_spawn", 2), (ShardedStrategy(backend="torch", start_method="spawn"), 2), ("sharded_fsdp2_spawn", 2)):
        trainer = pl.Trainer(strategy=strategy, accelerator="cpu", devices=devices, max_steps=20, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        try:
            trainer.fit(ImageClassifier(in_channels=1, num_classes=10), datamodule=DigitsDataModule(batch_size=32))
        except Exception as err:  # noqa: BLE001  # torch 2.6: FSDP2 cannot run on the CPU, and the strategy must say so by name
            assert not fsdp2_on_cpu and "needs torch 2.7 or newer" in str(err), err
            print(f"check_oldest: {strategy} on the CPU refused, as it must with torch {torch.__version__}: needs torch 2.7")
            continue
        assert trainer.state.finished, trainer.state
        print(f"check_oldest: pytorch_lightning {pl.__version__}: {getattr(strategy, 'strategy_name', strategy)} on {devices} process(es) trained (20 steps)")
PY
(cd "$V" && PYTHONPATH= ./bin/python quickstart.py)

echo "== 4. the compatibility pass on torch $TORCH, Lightning $LIGHTNING"
$OPY -m pip install -q "torch==$TORCH" "lightning==$LIGHTNING" "pytorch-lightning==$LIGHTNING" "$wheel[dev,sharded]"
$OPY -m pip uninstall -q -y lightning_mgpu  # the tests import the checkout
export PYTHONPATH=$PWD RAY_USAGE_STATS_ENABLED=0 NEPTUNE_MODE=debug PYTHONUNBUFFERED=1
$OPY -c "import lightning, pytorch_lightning, torch; print(f'check_oldest: lightning {lightning.__version__}, pytorch_lightning {pytorch_lightning.__version__}, torch {torch.__version__}')"
# Every part runs and reports; the script fails at the end if one did.
status=0
$OPY -m pytest -n "${PYTEST_WORKERS:-2}" -p no:cacheprovider tests/unit "$@" || status=1
$OPY -m pytest -n "${PYTEST_WORKERS:-2}" -p no:cacheprovider tests/integration/utilities/test_namespaces.py "$@" || status=1
out=$(mktemp -d)
fsdp2_on_cpu=$($OPY -c "import torch; print(int(hasattr(torch.cpu.Stream, 'record_event')))")
for strategy in ddp_sharded dp sharded_fsdp2; do
  if [ "$strategy" = sharded_fsdp2 ] && [ "$fsdp2_on_cpu" = 0 ]; then
    # torch 2.6: FSDP2 cannot run on the CPU; train.py must say so in one message and exit 2.
    code=0; timeout 120 $OPY examples/train.py --strategy sharded_fsdp2 --max-epochs 1 --logger none --output-dir "$out/fsdp2" > "$out/fsdp2.log" 2>&1 || code=$?
    grep -q "train.py: error: sharded_fsdp2 .* needs torch 2.7 or newer" "$out/fsdp2.log" && [ "$code" = 2 ] \
      || { tail -30 "$out/fsdp2.log"; echo "check_oldest: expected sharded_fsdp2's refusal on torch $TORCH (exit $code)"; exit 1; }
    echo "check_oldest: train.py --strategy sharded_fsdp2 on the CPU: refused with exit 2, naming torch 2.7"
    continue
  fi
  $OPY examples/train.py --strategy "$strategy" --max-epochs 2 --logger none --output-dir "$out/$strategy" > "$out/$strategy.log" 2>&1 \
    || { tail -30 "$out/$strategy.log"; exit 1; }
  echo "check_oldest: train.py --strategy $strategy: $(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(f\"val_acc {s.get('val_acc'):.3f}, world size {s.get('world_size')}\")" "$out/$strategy/summary.json")"
done
rm -rf "$out"
[ "$status" = 0 ] || { echo "check_oldest: a test run above failed (torch $TORCH, Lightning $LIGHTNING)"; exit 1; }
echo "check_oldest: passed (torch $TORCH, Lightning $LIGHTNING)"
