"""Multi-fit scenarios for ``strategy='sharded'``, run inside real gloo ranks by ``test_sharded_integration.py``.

Not a test module by itself (pytest finds no tests here). Each rank runs::

    LOCAL_RANK=r WORLD_SIZE=N MASTER_ADDR=127.0.0.1 MASTER_PORT=P NODE_RANK=0 \\
        python -m tests.integration.runners.run_sharded_scenarios PHASE OUT [--ckpt CKPT]

With the ranks started from outside, Lightning launches nothing itself, so one pair of processes runs
many ``Trainer.fit`` calls on one process group (a launch costs seconds; a fit of 5 steps does not).
Every fit uses the parity harness's deterministic MLP and data (``tests/integration/runners/run_parity.py``).
Each rank saves ``OUT/rank{r}.pt``: a dict of results the test checks; checkpoints go to ``OUT/*.ckpt``.
"""

from __future__ import annotations

import argparse
import os
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader

import lightning_mgpu  # noqa: F401
from lightning_mgpu.callbacks import ZeroGradSetToNone
from lightning_mgpu.strategies import ShardedStrategy, ZeroStrategy
from lightning_mgpu.testing.parity import IN, OUT, ParityModule, make_data
from lightning_mgpu.utilities.optimizers import local_optimizer, local_optimizer_state_bytes
from tests.helpers.trainer import quiet_trainer

GLOBAL_BATCH = 32
NUM_SAMPLES = GLOBAL_BATCH * 8  # enough for 8 steps; every fit (and the harness with --steps 8) sees the same data
STEPS = 5
RESUMED_STEPS = 8
CLIP_NORM = 0.05  # well below the gradient norm of the first steps, so clipping acts
CLIP_VALUE = 0.002
GAN_ACCUMULATE = 2  # micro-batches per optimizer step in the GAN scenario
# Every micro-batch of the data once; each final micro-batch steps both optimizers (2 global steps).
GAN_STEPS = 2 * (NUM_SAMPLES // GLOBAL_BATCH) // GAN_ACCUMULATE
EVAL_SAMPLES, EVAL_BATCH = 64, 16
TIMEOUT = timedelta(seconds=120)  # a broken collective fails the run instead of hanging for 30 minutes


def world() -> int:
    return int(os.environ["WORLD_SIZE_FOR_SCENARIOS"])


def strategy(name: str, **kwargs: Any) -> pl.strategies.Strategy | str:
    """A fresh strategy: ``ddp``, ``dp``, ``fairscale`` (ShardedStrategy) or ``torch`` (ZeroStrategy)."""
    if name == "dp":
        return "dp"  # the bundle's DataParallelStrategy by its registered name (one device on the CPU)
    if name == "ddp":
        return DDPStrategy(timeout=TIMEOUT, **kwargs)
    return {"fairscale": ShardedStrategy, "torch": ZeroStrategy}[name](timeout=TIMEOUT, **kwargs)


def fit(
    name: str,
    module: pl.LightningModule,
    steps: int = STEPS,
    accumulate: int = 1,
    clip: float | None = None,
    clip_algo: str = "norm",
    precision: str = "32-true",
    callbacks: tuple[Callback, ...] = (),
    resume: Path | None = None,
    save: Path | None = None,
    **strategy_kwargs: Any,
) -> pl.Trainer:
    # Lightning's environment teardown removes WORLD_SIZE; the next Trainer needs it back.
    os.environ["WORLD_SIZE"] = str(world())
    trainer = quiet_trainer(
        strategy=strategy(name, **strategy_kwargs),
        devices=world(),
        max_steps=steps,
        accumulate_grad_batches=accumulate,
        gradient_clip_val=clip,
        gradient_clip_algorithm=clip_algo if clip else None,
        precision=precision,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        callbacks=list(callbacks),
    )
    trainer.fit(module, ckpt_path=resume)
    if save is not None:
        trainer.save_checkpoint(save)  # every rank: consolidating the optimizer state is a collective
    return trainer


def mlp(optimizer: str = "sgd", **kwargs: Any) -> ParityModule:
    return ParityModule(optimizer=optimizer, lr=0.1, global_batch=GLOBAL_BATCH, num_samples=NUM_SAMPLES, **kwargs)


def params(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def state_owners(trainer: pl.Trainer) -> list[str]:
    """Names of the parameters whose optimizer state this rank holds."""
    names = {id(p): n for n, p in trainer.lightning_module.named_parameters()}
    return sorted(names[id(p)] for p in local_optimizer(trainer.optimizers[0]).state)


def grad_holders(module: nn.Module) -> list[str]:
    return sorted(n for n, p in module.named_parameters() if p.grad is not None)


class BalancedModule(ParityModule):
    """Four equal weight matrices (so a 2-way shard is exactly half) and a step LR schedule."""

    def __init__(self) -> None:
        super().__init__(optimizer="adam", lr=0.1, global_batch=GLOBAL_BATCH, num_samples=NUM_SAMPLES)
        torch.manual_seed(1)
        self.net = nn.Sequential(
            nn.Linear(IN, 32, bias=False),
            nn.Tanh(),
            nn.Linear(32, 16, bias=False),
            nn.Tanh(),
            nn.Linear(16, 32, bias=False),
            nn.Tanh(),
            nn.Linear(32, 16, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)[:, :OUT]

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class RankZeroOnlyHead(ParityModule):
    """``extra`` takes part in the loss on rank 0 only: rank 1 has a parameter without a gradient."""

    def __init__(self) -> None:
        super().__init__(optimizer="sgd", lr=0.1, global_batch=GLOBAL_BATCH, num_samples=NUM_SAMPLES)
        self.extra = nn.Linear(IN, OUT)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out = self(x)
        if self.global_rank == 0:
            out = out + self.extra(x)
        return nn.functional.mse_loss(out, y)


class GanModule(ParityModule):
    """A GAN trained the Lightning way: two optimizers, each backward inside ``toggle_model(sync_grad=...)``.

    ``toggle_model`` freezes the other optimizer's parameters, so each of the two backward passes per
    ``training_step`` (one forward of the wrapper) reduces a different half of the parameters; the
    discriminator's gradients also accumulate over ``GAN_ACCUMULATE`` micro-batches.
    """

    def __init__(self) -> None:
        super().__init__(optimizer="sgd", lr=0.1, manual=True, global_batch=GLOBAL_BATCH, num_samples=NUM_SAMPLES)
        del self.net
        torch.manual_seed(2)
        self.gen = nn.Sequential(nn.Linear(OUT, 16), nn.Tanh(), nn.Linear(16, IN))
        self.disc = nn.Sequential(nn.Linear(IN, 16), nn.Tanh(), nn.Linear(16, 1))

    def training_step(self, batch: Any, batch_idx: int) -> None:
        real, noise = batch
        final = (batch_idx + 1) % GAN_ACCUMULATE == 0
        opt_g, opt_d = self.optimizers()
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)
        with opt_g.toggle_model(sync_grad=final):
            fake = self.gen(noise)
            self.manual_backward(nn.functional.mse_loss(self.disc(fake), ones) / GAN_ACCUMULATE)
            if final:
                opt_g.step()
                opt_g.zero_grad()
        with opt_d.toggle_model(sync_grad=final):
            loss_d = nn.functional.mse_loss(self.disc(real), ones) + nn.functional.mse_loss(
                self.disc(fake.detach()), zeros
            )
            self.manual_backward(loss_d / GAN_ACCUMULATE)
            if final:
                opt_d.step()
                opt_d.zero_grad()

    def configure_optimizers(self) -> Any:
        return (
            torch.optim.SGD(self.gen.parameters(), lr=0.1, momentum=0.9),
            torch.optim.SGD(self.disc.parameters(), lr=0.1, momentum=0.9),
        )


class EvalModule(ParityModule):
    """Records the model object the strategy runs evaluation steps on (it must be the bare module)."""

    def __init__(self) -> None:
        super().__init__(optimizer="sgd", lr=0.1, global_batch=GLOBAL_BATCH, num_samples=NUM_SAMPLES)
        self.eval_models: dict[str, set[str]] = {}

    def _seen(self, stage: str) -> None:
        self.eval_models.setdefault(stage, set()).add(type(self.trainer.strategy.model).__name__)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._seen("validate")
        self.log("val_loss", nn.functional.mse_loss(self(batch[0]), batch[1]), sync_dist=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._seen("test")
        self.log("test_loss", nn.functional.mse_loss(self(batch[0]), batch[1]), sync_dist=True)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._seen("predict")
        return self(batch[0])

    def val_dataloader(self) -> DataLoader:
        return DataLoader(make_data(EVAL_SAMPLES, seed=5), batch_size=EVAL_BATCH)  # every rank evaluates all of it

    test_dataloader = predict_dataloader = val_dataloader


def evaluate(trainer: pl.Trainer, module: EvalModule) -> dict[str, Any]:
    """validate and predict with the Trainer that just ran ``fit``; test with a fresh Trainer that never did."""
    r: dict[str, Any] = {}
    os.environ["WORLD_SIZE"] = str(world())  # removed by the previous run's environment teardown
    r["validate"] = trainer.validate(module, verbose=False)[0]["val_loss"]
    os.environ["WORLD_SIZE"] = str(world())
    r["predict"] = torch.cat(trainer.predict(module))
    os.environ["WORLD_SIZE"] = str(world())
    fresh = quiet_trainer(strategy=strategy("fairscale"), devices=world(), use_distributed_sampler=False)
    r["test"] = fresh.test(module, verbose=False)[0]["test_loss"]
    x, y = make_data(EVAL_SAMPLES, seed=5).tensors
    with torch.no_grad():
        r["expected_predict"] = module(x)
        # Lightning averages the per-batch losses (equal batch sizes here).
        losses = [
            nn.functional.mse_loss(module(x[i : i + EVAL_BATCH]), y[i : i + EVAL_BATCH])
            for i in range(0, EVAL_SAMPLES, EVAL_BATCH)
        ]
        r["expected_loss"] = float(torch.stack(losses).mean())
    r["models"] = {stage: sorted(names) for stage, names in module.eval_models.items()}
    return r


class ReductionCounter(Callback):
    """Records how many gradient reductions each backward pass issued."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.total = 0
        self.per_backward: list[int] = []
        self._seen = 0
        self._started = False  # a backward pass is open (its reductions are counted at the next one, or at the end)
        self._original_reduce = dist.reduce

    def _count_reduce(self, *args: Any, **kwargs: Any) -> Any:
        self.total += 1
        return self._original_reduce(*args, **kwargs)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.backend == "fairscale":
            # ShardedDataParallel reduces each gradient to its owner with torch.distributed.reduce.
            dist.reduce = self._count_reduce
        else:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            # No annotations: DDP rejects string ones (this module uses `from __future__ import annotations`).
            def hook(state, bucket):  # type: ignore[no-untyped-def]
                self.total += 1
                return default_hooks.allreduce_hook(None, bucket)

            trainer.strategy.model.register_comm_hook(None, hook)

    # Counted between backward passes, not in on_after_backward: overriding that hook makes strategy='sharded' keep
    # (and all-reduce) every gradient for it, which would change what is counted.
    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        if self._started:
            self._close_backward()
        self._started = True

    def _close_backward(self) -> None:
        self.per_backward.append(self.total - self._seen)
        self._seen = self.total

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._started:
            self._close_backward()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        dist.reduce = self._original_reduce


def reference_clipped_run(clip: float, algo: str) -> tuple[dict[str, torch.Tensor], list[float]]:
    """One process, the global batch, plain torch: what every strategy must reproduce with clipping."""
    module = mlp("sgd")
    opt = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    x, y = make_data(NUM_SAMPLES).tensors
    norms = []
    for step in range(STEPS):
        sl = slice(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)
        opt.zero_grad()
        nn.functional.mse_loss(module(x[sl]), y[sl]).backward()
        if algo == "norm":
            norms.append(float(torch.nn.utils.clip_grad_norm_(module.parameters(), clip)))
        else:
            torch.nn.utils.clip_grad_value_(module.parameters(), clip)
        opt.step()
    return params(module), norms


def phase_main(out: Path) -> dict[str, Any]:
    """The 2-rank phase: parity, memory, accumulation, clipping, precision, checkpoints, resume 1 -> 2."""
    r: dict[str, Any] = {}
    # Parity with ddp (SGD and Adam), optimizer/gradient sharding, and the checkpoints for the round trips.
    for opt in ("sgd", "adam"):
        for name in ("ddp", "fairscale", "torch"):
            module = mlp(opt)
            save = out / f"{name}_{opt}.ckpt" if opt == "adam" else None
            trainer = fit(name, module, save=save)
            r[f"params/{name}/{opt}"] = params(module)
            r[f"owners/{name}/{opt}"] = state_owners(trainer)
            r[f"grads/{name}/{opt}"] = grad_holders(module)
            r[f"bytes/{name}/{opt}"] = local_optimizer_state_bytes(trainer.optimizers[0])

    # Memory: equal-size parameters, so each rank of 2 holds exactly half; plus a re-bound LR scheduler.
    for name in ("ddp", "fairscale", "torch"):
        module = BalancedModule()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = fit(name, module)
        r[f"balanced/params/{name}"] = params(module)
        r[f"balanced/bytes/{name}"] = local_optimizer_state_bytes(trainer.optimizers[0])
        sched = trainer.lr_scheduler_configs[0].scheduler
        r[f"balanced/sched_bound/{name}"] = sched.optimizer is trainer.optimizers[0]
        r[f"balanced/lr/{name}"] = [g["lr"] for g in local_optimizer(trainer.optimizers[0]).param_groups]
        r[f"balanced/warnings/{name}"] = [str(w.message) for w in caught if "lr_scheduler" in str(w.message)]

    # Gradient accumulation: reductions only on the final micro-batch; same result as ddp.
    for name in ("ddp", "fairscale", "torch"):
        module = mlp("sgd")
        counter = ReductionCounter(name)
        fit(name, module, steps=3, accumulate=2, callbacks=(counter,) if name != "ddp" else ())
        r[f"accumulate/params/{name}"] = params(module)
        r[f"accumulate/reductions/{name}"] = counter.per_backward
    # Manual optimization: LightningOptimizer.step through OSS; `self.optimizers().zero_grad()` must keep the
    # bucketed gradients attached to their bucket (the multi-node default reduce_buffer_size).
    module = mlp("sgd", manual=True)
    fit("fairscale", module)
    r["manual/params/fairscale"] = params(module)
    module = mlp("sgd", manual=True)
    fit("fairscale", module, reduce_buffer_size=2**20)
    r["manual/bucketed/params/fairscale"] = params(module)

    # A GAN: two optimizers, toggle_model(sync_grad=...), accumulation. DDP needs find_unused_parameters for the
    # frozen half; sharded works without it, with it, and with buckets.
    module = GanModule()
    fit("ddp", module, steps=GAN_STEPS, find_unused_parameters=True)
    r["gan/params/ddp"] = params(module)
    for variant, kwargs in (
        ("default", {}),
        ("unused", {"find_unused_parameters": True}),
        ("bucketed", {"reduce_buffer_size": 2**20}),
    ):
        module = GanModule()
        counter = ReductionCounter("fairscale")
        fit("fairscale", module, steps=GAN_STEPS, callbacks=(counter,), **kwargs)
        r[f"gan/params/fairscale/{variant}"] = params(module)
        r[f"gan/reductions/fairscale/{variant}"] = counter.per_backward
    r["gan/params/init"] = params(GanModule())

    # Validation, test and predict on the bare module, after fit and with a fresh Trainer.
    module = EvalModule()
    trainer = fit("fairscale", module)
    r["eval"] = evaluate(trainer, module)

    # Clipping against a single-process reference.
    r["clip/reference/norm"], r["clip/reference_norms"] = reference_clipped_run(CLIP_NORM, "norm")
    r["clip/reference/value"], _ = reference_clipped_run(CLIP_VALUE, "value")
    for name, algo in (("fairscale", "norm"), ("torch", "norm"), ("fairscale", "value")):
        module = mlp("sgd")
        fit(name, module, clip=CLIP_NORM if algo == "norm" else CLIP_VALUE, clip_algo=algo)
        r[f"clip/params/{name}/{algo}"] = params(module)

    # bf16-mixed needs no scaler and gives ddp's result.
    for name in ("ddp", "fairscale"):
        module = mlp("sgd")
        trainer = fit(name, module, precision="bf16-mixed")
        r[f"bf16/params/{name}"] = params(module)
        r[f"bf16/scaler/{name}"] = getattr(trainer.precision_plugin, "scaler", None) is not None

    # The bucketed reduction path (the multi-node default) and unused parameters.
    module = mlp("sgd")
    fit("fairscale", module, reduce_buffer_size=2**20)
    r["bucketed/params/fairscale"] = params(module)
    # ZeroGradSetToNone must leave bucketed gradients attached to their bucket (it zero-fills them).
    module = mlp("sgd")
    fit("fairscale", module, reduce_buffer_size=2**20, callbacks=(ZeroGradSetToNone(log_memory=False),))
    r["bucketed/zero_grad_callback/params/fairscale"] = params(module)
    for name in ("ddp", "fairscale"):
        module = RankZeroOnlyHead()
        fit(name, module, find_unused_parameters=True)
        r[f"unused/params/{name}"] = params(module)

    # Checkpoint round trips: sharded -> ddp, ddp -> sharded, fairscale -> torch backend (and ddp -> ddp).
    for name, source in (("ddp", "fairscale"), ("fairscale", "ddp"), ("ddp", "ddp"), ("torch", "fairscale")):
        module = mlp("adam")
        fit(name, module, steps=RESUMED_STEPS, resume=out / f"{source}_adam.ckpt")
        r[f"resumed/params/{name}_from_{source}"] = params(module)
    return r


def phase_resume(out: Path, ckpt: Path, tag: str) -> dict[str, Any]:
    """Resume ``ckpt`` (written on a different number of ranks) under sharded: exactly, then continuing."""
    r: dict[str, Any] = {}
    # max_steps equal to the checkpoint's step: restore, take no step, consolidate and save again.
    fit("fairscale", mlp("adam"), steps=STEPS, resume=ckpt, save=out / f"resaved_{tag}.ckpt")
    module = mlp("adam")
    trainer = fit("fairscale", module, steps=RESUMED_STEPS, resume=ckpt)
    r[f"resume_{tag}/params/fairscale"] = params(module)
    r[f"resume_{tag}/owners"] = state_owners(trainer)
    if world() > 1:
        module = mlp("adam")
        fit("ddp", module, steps=RESUMED_STEPS, resume=ckpt)
        r[f"resume_{tag}/params/ddp"] = params(module)
    else:
        # The 2-rank sharded checkpoint also resumes under dp (one device on the CPU) and trains on.
        module = mlp("adam")
        trainer = fit("dp", module, steps=RESUMED_STEPS, resume=ckpt)
        r[f"resume_{tag}/params/dp"] = params(module)
        r[f"resume_{tag}/dp_strategy"] = type(trainer.strategy).__name__
        r[f"resume_{tag}/dp_global_step"] = trainer.global_step
    return r


def _grad_view(module: nn.Module) -> dict[str, Any]:
    """Each parameter's gradient as a hook sees it: ``None``, or (dtype, a copy)."""
    return {
        n: None if p.grad is None else (p.grad.dtype, p.grad.detach().clone()) for n, p in module.named_parameters()
    }


class GradientsInHookModule(ParityModule):
    """Records the gradients ``on_after_backward`` sees, and which remain for ``on_before_optimizer_step``."""

    def __init__(self) -> None:
        super().__init__(lr=0.1, global_batch=GLOBAL_BATCH, num_samples=NUM_SAMPLES)
        self.in_hook: list[dict[str, Any]] = []
        self.before_step: list[list[str]] = []

    def on_after_backward(self) -> None:
        self.in_hook.append(_grad_view(self))

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.before_step.append(grad_holders(self))


class GradientsInCallback(Callback):
    """The same from a callback, for a module that overrides neither hook."""

    def __init__(self) -> None:
        self.in_hook: list[dict[str, Any]] = []
        self.before_step: list[list[str]] = []

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.in_hook.append(_grad_view(pl_module))

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self.before_step.append(grad_holders(pl_module))


class HoldersBeforeStep(Callback):
    """Only which gradients remain before the step (overrides no on_after_backward: ZeRO-2's saving stays)."""

    def __init__(self) -> None:
        self.before_step: list[list[str]] = []

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self.before_step.append(grad_holders(pl_module))


def phase_hooks(out: Path) -> dict[str, Any]:
    """2 ranks at 64-true: the gradients on_after_backward sees under ddp and sharded (module, callback, bucketed);
    which remain for the step; the weights."""
    results: dict[str, Any] = {}
    for name, kwargs in (("ddp", {}), ("fairscale", {}), ("fairscale_bucketed", {"reduce_buffer_size": 2**20})):
        module = GradientsInHookModule()
        trainer = fit(name.removesuffix("_bucketed"), module, steps=3, precision="64-true", **kwargs)
        results[f"hooks/{name}/module"] = {
            "in_hook": module.in_hook,
            "before_step": module.before_step,
            "params": params(module),
            "owned": state_owners(trainer) if name != "ddp" else None,
        }
    callback = GradientsInCallback()
    module = mlp()
    fit("fairscale", module, steps=3, precision="64-true", callbacks=(callback,))
    results["hooks/fairscale/callback"] = {
        "in_hook": callback.in_hook,
        "before_step": callback.before_step,
        "params": params(module),
    }
    plain = HoldersBeforeStep()
    fit("fairscale", mlp(), steps=3, precision="64-true", callbacks=(plain,))
    results["hooks/fairscale/plain"] = {"before_step": plain.before_step}
    return results


def phase_single(out: Path, ckpt: Path | None) -> dict[str, Any]:
    """One process: write the 1-rank checkpoint (for 1 -> 2), or resume a 2-rank one (2 -> 1)."""
    if ckpt is None:
        module = mlp("adam")
        fit("fairscale", module, save=out / "single_fairscale_adam.ckpt")
        return {"single/params": params(module)}
    return phase_resume(out, ckpt, "2to1")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=("main", "single", "hooks"))
    p.add_argument("out", type=Path)
    p.add_argument("--ckpt", type=Path, default=None)
    args = p.parse_args()
    os.environ["WORLD_SIZE_FOR_SCENARIOS"] = os.environ["WORLD_SIZE"]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.phase == "hooks":
        results = phase_hooks(args.out)
    elif args.phase == "main":
        results = phase_main(args.out)
        if args.ckpt is not None:
            results.update(phase_resume(args.out, args.ckpt, "1to2"))
    else:
        results = phase_single(args.out, args.ckpt)
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.save(results, args.out / f"rank{rank}.pt")


if __name__ == "__main__":
    main()
