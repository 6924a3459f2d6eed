"""A try/except ImportError that imports one Lightning name two ways (import-fallback), and a spawn class named
without being called (spawn-class-use)."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from tests.helpers.upgrade_check import upgraded

TODO = rules.TODO_PREFIX

#: A data module that accepts two strategies only, written to run on Lightning before and after 1.6.
COMPAT = textwrap.dedent(
    """\
    import pytorch_lightning as pl


    class OnlyTwoStrategies(pl.LightningDataModule):
        def check_strategy(self):
            try:
                from pytorch_lightning.strategies import (
                    DDPStrategy,
                    SingleDeviceStrategy,
                )
                chosen = self.trainer.strategy
            except (ImportError, ModuleNotFoundError):
                # Lightning < 1.6
                from pytorch_lightning.plugins import (
                    DDPPlugin,
                    SingleDevicePlugin,
                )
                DDPStrategy = DDPPlugin
                SingleDeviceStrategy = SingleDevicePlugin
                chosen = self.trainer.training_type_plugin
            if not isinstance(chosen, (SingleDeviceStrategy, DDPStrategy)):
                raise NotImplementedError(f"only {SingleDeviceStrategy.__name__} and {DDPStrategy.__name__}")
            return type(chosen).__name__
    """
)


def test_a_version_compatibility_import_collapses_to_the_try_and_runs() -> None:
    out = upgraded(COMPAT)
    assert "except" not in out and "DDPPlugin" not in out and "SingleDevicePlugin" not in out
    assert "training_type_plugin" not in out and TODO not in out
    assert "DDPStrategy = " not in out and "SingleDeviceStrategy = " not in out  # no self-assignment left
    # Run it under 2.x: every name the method uses is defined (1.x's conversion raised UnboundLocalError here).
    from lightning.fabric.accelerators import CPUAccelerator  # noqa: PLC0415
    from pytorch_lightning.strategies import DDPStrategy, SingleDeviceStrategy  # noqa: PLC0415

    namespace: dict[str, object] = {}
    exec(compile(out, "<compat>", "exec"), namespace)  # noqa: S102
    module = namespace["OnlyTwoStrategies"]()  # type: ignore[operator]

    class FakeTrainer:
        strategy: object = SingleDeviceStrategy(device="cpu", accelerator=CPUAccelerator())

    module.trainer = FakeTrainer()
    assert module.check_strategy() == "SingleDeviceStrategy"
    FakeTrainer.strategy = DDPStrategy()
    assert module.check_strategy() == "DDPStrategy"
    FakeTrainer.strategy = object()
    with pytest.raises(NotImplementedError, match="only SingleDeviceStrategy and DDPStrategy"):
        module.check_strategy()


def test_the_old_path_in_the_try_collapses_too() -> None:
    source = textwrap.dedent(
        """\
        # pick the callback's home
        try:
            from pytorch_lightning.callbacks.progress import ProgressBarBase as BarBase
        except ImportError:
            from pytorch_lightning.callbacks import ProgressBarBase as BarBase
        else:
            from pytorch_lightning import Callback
        print(BarBase, Callback)
        """
    )
    out = upgraded(source)
    assert out.startswith("# pick the callback's home\n")
    assert "try:" not in out and "ProgressBarBase" not in out
    namespace: dict[str, object] = {}
    exec(compile(out, "<compat>", "exec"), namespace)  # noqa: S102
    from pytorch_lightning.callbacks import ProgressBar  # noqa: PLC0415

    assert namespace["BarBase"] is ProgressBar


@pytest.mark.parametrize(
    "source",
    [
        # An optional dependency: the fallback is what runs where Lightning is missing.
        "try:\n    from pytorch_lightning import LightningModule as Base\nexcept ImportError:\n    Base = object\n",
        # Both namespaces are 2.x: which one is installed is what the try asks.
        "try:\n    import lightning.pytorch as pl\nexcept ImportError:\n    import pytorch_lightning as pl\n",
        # The try runs a call: what fails may not be an import.
        "try:\n    from pytorch_lightning import Trainer\n    t = make()\nexcept ImportError:\n"
        "    from pytorch_lightning.trainer import Trainer\n",
        # A handler that catches more than ImportError.
        "try:\n    from pytorch_lightning.strategies import DDPStrategy\nexcept Exception:\n"
        "    from pytorch_lightning.plugins import DDPPlugin as DDPStrategy\n",
        # A third-party import in the try.
        "try:\n    from pytorch_lightning import Trainer\n    import extras\nexcept ImportError:\n"
        "    from pytorch_lightning.trainer import Trainer\n",
        # The branches bind different names.
        "try:\n    from pytorch_lightning.strategies import DDPStrategy\nexcept ImportError:\n"
        "    from pytorch_lightning.plugins import DDPPlugin\n",
    ],
)
def test_other_try_statements_stay(source: str) -> None:
    assert "try:" in upgraded(source)


@pytest.mark.parametrize(
    ("use", "flagged"),
    [
        ("ok = isinstance(s, WorkerSpawn)\n", False),  # legacy_is_ddp_spawn(s): rule spawn-isinstance
        ("class Mine(WorkerSpawn):\n    pass\n", True),
        ("kinds = [WorkerSpawn]\n", True),
        ("made = WorkerSpawn(find_unused_parameters=True)\n", False),
        ("ok = isinstance(s, (DDPStrategy, WorkerSpawn))\n", False),
    ],
)
def test_a_spawn_class_named_but_not_called_gets_a_todo(use: str, flagged: bool) -> None:
    source = "from pytorch_lightning.strategies import DDPStrategy\n"
    source += "from pytorch_lightning.plugins import DDPSpawnPlugin as WorkerSpawn\n" + use
    out = upgraded(source.replace(" as WorkerSpawn", "").replace("WorkerSpawn", "DDPSpawnPlugin"))
    assert (rules.todo_text("spawn-class-use", name="DDPSpawnPlugin") in out) is flagged
    assert rules.rule_of(out) in ("", "spawn-class-use")
