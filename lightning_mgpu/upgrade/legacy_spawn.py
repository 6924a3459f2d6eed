"""Lightning 1.x's ``isinstance(strategy, DDPSpawnStrategy)``, for converted scripts (rule ``spawn-isinstance``).

2.0 removed ``DDPSpawnStrategy`` (1.6-1.9; ``DDPSpawnPlugin`` in 1.3-1.5): 2.x's ``"ddp_spawn"`` is
``DDPStrategy(start_method="spawn")``, one class with plain ``"ddp"``, so no 2.x class answers the check alone.
``lightning-mgpu upgrade`` writes ``legacy_is_ddp_spawn(strategy)`` in its place. Imported by converted code: no
libcst here.
"""

from __future__ import annotations

#: 2.x's DDPStrategy start methods that start the processes from the running one, as 1.x's spawn class did; "popen"
#: (2.x's default) launches the script again, as 1.x's DDPStrategy (not a DDPSpawnStrategy) did.
_SPAWNED = frozenset({"spawn", "fork", "forkserver"})


def legacy_is_ddp_spawn(strategy: object) -> bool:
    """Whether 1.x's ``isinstance(strategy, DDPSpawnStrategy)`` held for the strategy 2.x built in its place.

    1.x's spawn class served ``"ddp_spawn"``, and from 1.7 ``"ddp_fork"``/``"ddp_notebook"`` (its
    ``start_method="fork"``); its subclasses served the sharded spawn strategy and TPUs. 2.x serves them all with
    ``DDPStrategy`` (``XLAStrategy`` and this bundle's sharded strategies subclass it) started by
    spawn/fork/forkserver, where ``"ddp"``, DeepSpeed and the bundle's ``"ddp_sharded"`` start with ``"popen"``
    (1.x: ``DDPStrategy`` and its subclasses, never the spawn class). Checked by class name, so that both
    ``lightning.pytorch`` and ``pytorch_lightning`` strategies answer.

    Args:
        strategy: a Trainer's strategy (``trainer.strategy``), or anything else (False).

    Returns:
        True for a DDP-family strategy that starts its processes from the running one.
    """
    family = any(cls.__name__ == "DDPStrategy" for cls in type(strategy).__mro__)
    return family and getattr(strategy, "_start_method", "popen") in _SPAWNED
