"""``lightning_mgpu.upgrade.trainer_args``: a 1.x command line builds the Trainer 1.x built from it, on 2.x."""

from __future__ import annotations

import argparse

import pytest

from lightning_mgpu.upgrade.trainer_args import add_argparse_args, from_argparse_args, legacy_trainer_kwargs


def _parse(trainer_cls: type, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)  # the script's own flag stays its own
    parser = add_argparse_args(trainer_cls, parser)
    return parser.parse_args(argv)


@pytest.fixture(params=["lightning.pytorch", "pytorch_lightning"])
def trainer_cls(request: pytest.FixtureRequest) -> type:
    module = pytest.importorskip(request.param)
    import lightning_mgpu  # noqa: F401  (registers dp, ddp2, ... in both namespaces)

    return module.Trainer


def test_2x_flags_with_their_defaults_and_the_1x_flags(trainer_cls: type) -> None:
    args = _parse(trainer_cls, [])
    assert args.max_epochs is None and args.accelerator == "auto" and args.precision is None
    assert args.gpus is None and args.distributed_backend is None and args.lr == 0.1
    assert _parse(trainer_cls, ["--max_epochs", "3", "--fast_dev_run", "true"]).max_epochs == 3


@pytest.mark.parametrize(
    ("argv", "strategy", "accelerator", "devices", "precision"),
    [
        (
            ["--gpus", "0", "--num_processes", "2", "--accelerator", "ddp_cpu"],
            "DDPStrategy",
            "CPUAccelerator",
            2,
            "32-true",
        ),
        (["--num_processes", "2", "--distributed_backend", "ddp"], "DDPStrategy", "CPUAccelerator", 2, "32-true"),
        (["--accelerator", "dp"], "DataParallelStrategy", "CPUAccelerator", 1, "32-true"),
        (["--precision", "bf16", "--max_epochs", "1"], "SingleDeviceStrategy", "CPUAccelerator", 1, "bf16-mixed"),
        (["--gpus", "0", "--amp_backend", "apex"], "SingleDeviceStrategy", "CPUAccelerator", 1, "32-true"),
    ],
)
def test_a_1x_command_line_builds_the_same_trainer(
    trainer_cls, argv, strategy, accelerator, devices, precision
) -> None:
    trainer = from_argparse_args(trainer_cls, _parse(trainer_cls, argv), logger=False, enable_checkpointing=False)
    assert type(trainer.strategy).__name__ == strategy
    assert type(trainer.accelerator).__name__ == accelerator
    assert trainer.num_devices == devices and trainer.precision == precision


def test_1x_flags_that_map_to_callbacks_and_switches(trainer_cls: type) -> None:
    argv = [
        "--progress_bar_refresh_rate",
        "7",
        "--weights_summary",
        "none",
        "--checkpoint_callback",
        "false",
        "--replace_sampler_ddp",
        "false",
        "--reload_dataloaders_every_epoch",
        "true",
    ]
    trainer = from_argparse_args(trainer_cls, _parse(trainer_cls, argv), logger=False)
    bars = [c for c in trainer.callbacks if type(c).__name__ == "TQDMProgressBar"]
    assert len(bars) == 1 and bars[0].refresh_rate == 7
    assert trainer.checkpoint_callback is None
    assert trainer.reload_dataloaders_every_n_epochs == 1
    assert trainer._accelerator_connector.use_distributed_sampler is False


def test_keywords_win_over_flags_and_the_script_flags_are_ignored(trainer_cls: type) -> None:
    args = _parse(trainer_cls, ["--max_epochs", "3"])
    trainer = from_argparse_args(trainer_cls, args, max_epochs=5, logger=False)
    assert trainer.max_epochs == 5


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"resume_from_checkpoint": "last.ckpt"}, "pass ckpt_path=args.resume_from_checkpoint to trainer.fit"),
        ({"precision": 16, "amp_backend": "apex"}, 'amp_backend="apex" is gone'),
        (
            {"auto_lr_find": True},
            "--auto_lr_find=True: auto_lr_find ran only in tune(): there call Tuner(trainer).lr_find(model)",
        ),
        ({"gpus": 2, "devices": 4}, "gpus=2 maps to devices=2, but devices=4 is given too: choose one"),
        ({"distributed_backend": "nccl"}, "distributed_backend='nccl' is not a strategy"),
        ({"checkpoint_callback": object()}, "pass it in callbacks=[...]"),
    ],
)
def test_what_has_no_2x_meaning_is_refused_naming_the_fix(given: dict, says: str) -> None:
    with pytest.raises(ValueError) as err:
        legacy_trainer_kwargs(given)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_unset_1x_flags_mean_nothing() -> None:
    unset = {
        "gpus": None,
        "auto_lr_find": False,
        "track_grad_norm": -1,
        "resume_from_checkpoint": None,
        "max_steps": None,
    }
    assert legacy_trainer_kwargs({**unset, "max_epochs": 2}) == {"max_epochs": 2, "max_steps": -1}


def test_a_datamodule_is_built_from_its_own_flags() -> None:
    class DataModule:
        def __init__(self, batch_size: int = 32, data_dir: str = "data", transforms=()) -> None:
            self.batch_size, self.data_dir = batch_size, data_dir

    parser = add_argparse_args(DataModule, argparse.ArgumentParser())
    args = parser.parse_args(["--batch_size", "8"])
    assert not hasattr(args, "gpus") and not hasattr(args, "transforms")  # only simple types; no Trainer flags
    dm = from_argparse_args(DataModule, args)
    assert (dm.batch_size, dm.data_dir) == (8, "data")


@pytest.mark.parametrize(
    ("argv", "depths"), [([], [1]), (["--weights_summary", "full"], [-1]), (["--weights_summary", "none"], [])]
)
def test_weights_summary_as_1x_read_it(trainer_cls: type, argv: list[str], depths: list[int]) -> None:
    """1.x's --weights_summary defaulted to "top" (the summary 2.x prints by default), "full" printed every layer
    (2.x: ModelSummary(max_depth=-1)) and None printed nothing."""
    trainer = from_argparse_args(trainer_cls, _parse(trainer_cls, argv), logger=False)
    summaries = [c for c in trainer.callbacks if type(c).__name__ in ("ModelSummary", "RichModelSummary")]
    assert [s._max_depth for s in summaries] == depths


def test_terminate_on_nan_becomes_the_bundles_callback(trainer_cls: type) -> None:
    """1.x's flag read at run time (a dict, a command line) adds the bundle's TerminateOnNaN, of the Trainer's own
    namespace (its Trainer refuses another's callbacks); False adds nothing."""
    import importlib

    namespace = trainer_cls.__module__.removesuffix(".trainer.trainer")
    settings = {"terminate_on_nan": True, "stochastic_weight_avg": True}
    trainer = trainer_cls(**legacy_trainer_kwargs(settings, namespace=namespace), logger=False)
    for name in ("TerminateOnNaN", "LegacyStochasticWeightAveraging"):
        added = [c for c in trainer.callbacks if type(c).__name__ == name]
        assert len(added) == 1 and isinstance(added[0], importlib.import_module(namespace).Callback)
    unset = trainer_cls(**legacy_trainer_kwargs({"terminate_on_nan": False}, namespace=namespace), logger=False)
    assert not any(type(c).__name__ == "TerminateOnNaN" for c in unset.callbacks)
