"""Lightning 1.x scripts, as users wrote them, for ``lightning-mgpu upgrade``'s tests.

Written for this repository, in the shapes public 1.0-1.9 code used (read across public repositories, none copied):
Lightning's own examples that used dp, ddp2, horovod and ddp_sharded (the GAN with two optimizers, the multi-node
ddp2 demo, the sharded plugin), the seed guide's snippets, argparse-built Trainers (``add_argparse_args`` /
``from_argparse_args``, for the Trainer and a DataModule), settings held in dicts and filled in by condition, backends
picked by condition or from a flag, DDP and DeepSpeed plugin objects, apex AMP, epoch-end hooks that aggregate the
steps' outputs, 1.x callbacks and loggers, a 1.0-era module (``self.hparams = hparams``, ``pl.metrics``), an EMA kept in
``training_step_end``, and settings read from YAML. Each runs on synthetic data.

:data:`CORPUS` says, per script, what its conversion must give: the strategy it ends with, the rules of the TODOs a
person must finish (none: fully converted), whether it trains on 2 CPU processes as converted, and its command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Script:
    """What one corpus script must become."""

    #: the strategy class its Trainer ends with
    strategy: str
    #: world size when it trains on this machine (0: it does not train here; its Trainer is only built)
    world: int = 0
    #: the 1.x command line it runs with here
    argv: tuple[str, ...] = ()
    #: rules of the TODOs its conversion leaves (empty: fully converted)
    todos: frozenset[str] = field(default_factory=frozenset)
    #: optional packages it needs (RunIf keywords)
    needs: tuple[str, ...] = ()
    #: for a script without a __main__ block (or one that needs GPUs): the function that builds its Trainer
    build: str | None = None
    #: the 1.x precision it trained with on this machine's path (fp32 stays fp32)
    precision: str = "32-true"


CORPUS: dict[str, Script] = {
    # Trained on 2 CPU processes as converted.
    "ddp_cpu_processes.py": Script("DDPStrategy", world=2),
    "sharded_plugin_cpu.py": Script("ShardedStrategy", world=2, needs=("fairscale",)),
    "horovod_processes.py": Script("HorovodStrategy", world=2, needs=("horovod",)),
    "ddp2_cpu.py": Script("DDP2Strategy", world=1),
    "argparse_trainer.py": Script(
        "DDPStrategy",
        world=2,
        argv=("--gpus", "0", "--num_processes", "2", "--accelerator", "ddp_cpu", "--max_epochs", "1"),
    ),
    "datamodule_argparse.py": Script(
        "DDPStrategy", world=2, argv=("--num_processes", "2", "--accelerator", "ddp_cpu", "--max_epochs", "1")
    ),
    "config_dict.py": Script("DDPStrategy", world=2),
    "conditional_strategy.py": Script("DDPStrategy", world=2),
    "epoch_end_hooks.py": Script("DDPStrategy", world=2),
    "callbacks_1x.py": Script("DDPStrategy", world=2),
    "lightning_1_0.py": Script("DataParallelStrategy", world=1),
    "resume_and_checkpoint.py": Script("DDPStrategy", world=2),
    # GPU scripts: their Trainer is built here with accelerator="cpu".
    "gan_dp.py": Script("DataParallelStrategy", build="build_trainer"),
    "seed_guide.py": Script("DataParallelStrategy", needs=("neptune", "fairscale"), build="build_trainer"),
    "sharded_gpus.py": Script("ShardedStrategy", build="build_trainer"),  # resume: legacy_resume(Trainer(...), ...)
    "multinode_ddp2.py": Script("DDP2Strategy", todos=frozenset(), build="build_trainer"),
    "ddp_plugin.py": Script("DDPStrategy", build="build_trainer"),
    "deepspeed_plugin.py": Script("DDPStrategy", build="build_trainer"),
    "amp_apex.py": Script("DDPStrategy", todos=frozenset({"trainer-apex"}), build="build_trainer"),
    "horovod_dict.py": Script("HorovodStrategy", needs=("horovod",), build="build_trainer"),
    "step_end_ema.py": Script("DDPStrategy", todos=frozenset(), build="build_trainer"),
    "yaml_config.py": Script("SingleDeviceStrategy", build="build_trainer"),
}

#: The scripts that train on this machine once converted, with the strategy each named (for the older tests).
CPU_RUNNABLE = {name: script.strategy for name, script in CORPUS.items() if script.world}
GPU_ONLY = {name: script.strategy for name, script in CORPUS.items() if not script.world}
