"""Resumed fits under Lightning's ``ddp``/``ddp_spawn`` and every sharded engine, recording each hook that the
LightningModule and a callback see, for ``tests/integration/strategies/test_sharded_base.py``.

Not a test module by itself. Two phases::

    LOCAL_RANK=r WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... NODE_RANK=0 \\
        python -m tests.integration.runners.run_resume_hooks popen OUT
    python -m tests.integration.runners.run_resume_hooks spawn OUT     # after popen: resumes OUT/ddp.ckpt

``popen`` (ranks started from outside, as ``ddp`` launches them): ``ddp`` trains ``SAVED_STEPS`` steps and saves
``OUT/ddp.ckpt``; each engine does the same into its own sharded folder (``OUT/<engine>.ckpt/``); then ``ddp`` and every
engine resume the file, and every engine its folder, to ``MAX_STEPS``. ``spawn``: ``ddp_spawn`` and each engine's
``_spawn`` name resume the file. Every process appends ``PID HOOK`` lines to ``OUT/<label>.hooks`` as the hooks run, and
each resumed fit's final weights go to ``OUT/<label>.rank<r>.pt``.
"""

from __future__ import annotations

import argparse
import functools
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.distributed.tensor import DTensor
from torch.nn import functional as F  # noqa: N812
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, TensorDataset

import lightning_mgpu  # noqa: F401  (registers the strategy names)
from lightning_mgpu.strategies import FSDP2Strategy, ShardedStrategy, ZeroStrategy
from tests.helpers.trainer import QUIET, quiet_trainer

SAVED_STEPS = 2
MAX_STEPS = 5
LR = 0.1
#: on_load_checkpoint sets this; configure_optimizers reads it (1.0 before): it reaches the optimizer only if the hook
#: runs first, as Lightning's ddp runs it
RESUMED_LR_FACTOR = 0.25
ENGINES = ("sharded", "sharded_zero", "sharded_fsdp2")
TIMEOUT = timedelta(seconds=120)
IN, HIDDEN, SAMPLES, BATCH = 8, 8, 64, 4


def _lightning_module_hooks() -> list[str]:
    """Every public function of ``LightningModule`` that is not ``nn.Module``'s (as Lightning's ``test_hooks.py``
    chooses them), without the ones that only log or print."""
    members = {name for name in dir(pl.LightningModule) if not name.startswith("_")}
    functions = {name for name in members if callable(getattr(pl.LightningModule, name, None))}
    module = {name for name in dir(nn.Module) if not name.startswith("_")} - {"forward", "zero_grad", "train"}
    return sorted(functions - module - {"log", "log_dict", "print", "optimizers", "lr_schedulers"})


HOOKS = _lightning_module_hooks()


def _record(out: Path, label: str, hook: str) -> None:
    # One short append per call: the ranks (and a spawn's launching process) write one file; the pid tells them apart.
    with open(out / f"{label}.hooks", "a") as f:
        f.write(f"{os.getpid()} {hook}\n")


class _Recorded:
    """A hook that records its name, then runs the method. ``__wrapped__``: Lightning's ``is_overridden`` sees the
    method itself, so wrapping changes no decision of the Trainer's."""

    def __init__(self, owner: ResumeModule, hook: str) -> None:
        self.__wrapped__ = getattr(owner, hook)
        self.owner, self.hook = owner, hook

    @property
    def __code__(self) -> Any:  # noqa: PLW3201  (is_overridden unwraps one level: FSDP2 wraps the step methods again)
        return self.__wrapped__.__code__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _record(self.owner.out, self.owner.label, self.hook)
        return self.__wrapped__(*args, **kwargs)


class ResumeModule(pl.LightningModule):
    """A small regressor whose ``configure_optimizers`` reads what ``on_load_checkpoint`` sets."""

    def __init__(self, out: Path, label: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
        self.lr_factor = 1.0
        self.out, self.label = out, label
        self._install_recorders()

    def _install_recorders(self) -> None:
        for hook in HOOKS:
            setattr(self, hook, _Recorded(self, hook))

    def __getstate__(self) -> dict[str, Any]:
        # Spawn pickles the module: the recorders are put back on the other side (__setstate__).
        state = super().__getstate__()
        return {k: v for k, v in state.items() if not isinstance(v, _Recorded)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._install_recorders()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=LR, momentum=0.9)
        factor = self.lr_factor  # read now: Lightning calls on_load_checkpoint before this
        scheduler = LambdaLR(optimizer, lambda step: factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.lr_factor = RESUMED_LR_FACTOR

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(1)
        x = torch.randn(SAMPLES, IN, generator=generator)
        return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True).sin()), batch_size=BATCH)


class RecordingCallback(Callback):
    """Records every ``Callback`` hook as ``Callback.<name>``; has a state, so its load hooks run on resume."""

    def __init__(self, module: ResumeModule) -> None:
        self.out, self.label = module.out, module.label

    def state_dict(self) -> dict[str, Any]:
        _record(self.out, self.label, "Callback.state_dict")
        return {"seen": True}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _record(self.out, self.label, "Callback.load_state_dict")


def _recording_method(hook: str) -> Any:
    def method(self: RecordingCallback, *args: Any, **kwargs: Any) -> None:
        _record(self.out, self.label, f"Callback.{hook}")

    return functools.update_wrapper(method, getattr(Callback, hook))


for _hook in sorted(n for n in dir(Callback) if n.startswith(("on_", "setup", "teardown"))):
    setattr(RecordingCallback, _hook, _recording_method(_hook))


def engine(name: str, folder: bool = False) -> pl.strategies.Strategy:
    """A fresh strategy launched like ``ddp`` (here: by the ranks already running); ``folder``: sharded checkpoints."""
    if name == "ddp":
        return DDPStrategy(timeout=TIMEOUT)
    fmt = {"checkpoint_format": "sharded" if folder else "full"}
    return {"sharded": ShardedStrategy, "sharded_zero": ZeroStrategy, "sharded_fsdp2": FSDP2Strategy}[name](
        timeout=TIMEOUT, **fmt
    )


def fit(out: Path, label: str, strategy: Any, steps: int, ckpt: Path | None = None, save: Path | None = None) -> Any:
    if "WORLD_SIZE_FOR_RUNNER" in os.environ:  # Lightning's environment teardown removes WORLD_SIZE
        os.environ["WORLD_SIZE"] = os.environ["WORLD_SIZE_FOR_RUNNER"]
    module = ResumeModule(out, label)
    kwargs = {"strategy": strategy, "devices": 2, "max_steps": steps, "callbacks": [RecordingCallback(module)]}
    # Under spawn without CleanExit: in a spawned worker it destroys the process group at teardown, before the spawn
    # launcher gathers sharded_fsdp2's weights for the launching process (a collective).
    spawned = isinstance(strategy, str) and strategy.endswith("_spawn")
    trainer = pl.Trainer(**{**QUIET, **kwargs}) if spawned else quiet_trainer(**kwargs)
    trainer.fit(module, ckpt_path=ckpt)
    if save is not None:
        trainer.save_checkpoint(save)
    # Under spawn, this is the launching process, which got the weights back; FSDP2's are DTensors (a collective).
    params = {
        k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu() for k, v in module.state_dict().items()
    }
    torch.save(params, out / f"{label}.rank{trainer.global_rank}.pt")
    return trainer


def phase_popen(out: Path) -> None:
    os.environ["WORLD_SIZE_FOR_RUNNER"] = os.environ["WORLD_SIZE"]
    ckpt = out / "ddp.ckpt"
    fit(out, "save_ddp", engine("ddp"), SAVED_STEPS, save=ckpt)
    for name in ENGINES:
        fit(out, f"save_{name}", engine(name, folder=True), SAVED_STEPS, save=out / f"{name}.ckpt")
    fit(out, "ddp", engine("ddp"), MAX_STEPS, ckpt=ckpt)
    for name in ENGINES:
        fit(out, f"{name}_file", engine(name), MAX_STEPS, ckpt=ckpt)
        fit(out, f"{name}_folder", engine(name, folder=True), MAX_STEPS, ckpt=out / f"{name}.ckpt")


def phase_spawn(out: Path) -> None:
    ckpt = out / "ddp.ckpt"
    for name in ("ddp_spawn", *(f"{e}_spawn" for e in ENGINES)):
        fit(out, name, name, MAX_STEPS, ckpt=ckpt)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=("popen", "spawn"))
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (phase_popen if args.phase == "popen" else phase_spawn)(args.out)


if __name__ == "__main__":
    main()
