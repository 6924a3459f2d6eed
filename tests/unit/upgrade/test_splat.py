"""Settings splatted into a Trainer from where the tool cannot read them (``trainer-splat-translated``): a config
file's section, a function's ``**kwargs``, an attribute. They become ``legacy_trainer_kwargs(settings)``, which
translates their 1.x keys when the Trainer is built; two such splats in one call are translated together,
``legacy_trainer_kwargs(a, **b)``."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.trainer_args import legacy_trainer_kwargs
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.upgrade_check import upgraded

IMPORT = "from lightning_mgpu.upgrade.trainer_args import legacy_trainer_kwargs\n"


@pytest.mark.parametrize(
    ("body", "after"),
    [
        # A section of a config file (hydra / OmegaConf).
        ("def main(cfg):\n    return Trainer(**cfg.trainer)\n", "Trainer(**legacy_trainer_kwargs(cfg.trainer))"),
        # A YAML file's dict, subscripted.
        (
            "def main(config):\n    return Trainer(**config['trainer_params'])\n",
            "Trainer(**legacy_trainer_kwargs(config['trainer_params']))",
        ),
        # A function's **kwargs handed on, beside literal arguments (rewritten where they stand).
        (
            "def build(gpus=2, **kwargs):\n    return Trainer(max_epochs=3, **kwargs)\n",
            "Trainer(max_epochs=3, **legacy_trainer_kwargs(kwargs))",
        ),
        # Settings kept on an object, or built by a call (a pydantic model's dict()).
        (
            "class Model:\n    def fit(self):\n        return Trainer(**self.trainer_kwargs)\n",
            "Trainer(**legacy_trainer_kwargs(self.trainer_kwargs))",
        ),
        (
            "def main(config):\n    return Trainer(**config.train.dict(), logger=False)\n",
            "Trainer(logger=False, **legacy_trainer_kwargs(config.train.dict()))",  # keywords go first
        ),
        # vars(args): every flag the parser holds.
        ("def main(args):\n    return Trainer(**vars(args))\n", "Trainer(**legacy_trainer_kwargs(vars(args)))"),
    ],
)
def test_unreadable_settings_are_translated_where_the_trainer_is_built(body: str, after: str) -> None:
    out = upgraded("from lightning.pytorch import Trainer\n" + body, no_todo=True)
    assert after in out and IMPORT in out, out
    assert "namespace=" not in out  # lightning.pytorch is the function's default


def test_the_calls_callbacks_go_into_the_translation_and_pytorch_lightning_is_named() -> None:
    out = upgraded(
        "import pytorch_lightning as pl\n"
        "def main(cfg, checkpoint):\n"
        "    return pl.Trainer(logger=False, callbacks=[checkpoint], **cfg.trainer)\n",
        no_todo=True,
    )
    assert (
        'pl.Trainer(logger=False, **legacy_trainer_kwargs(cfg.trainer, namespace="pytorch_lightning",'
        " callbacks=[checkpoint]))"
    ) in out, out


def test_settings_the_tool_can_follow_or_that_are_translated_already_stay_as_they_are() -> None:
    # A dict built in the file: its keys are rewritten where they are set (no run-time translation).
    built = upgraded("def main(n):\n    kwargs = dict(gpus=n)\n    return Trainer(**kwargs)\n", no_todo=True)
    assert "legacy_trainer_kwargs" not in built and 'accelerator="gpu" if n else "cpu"' in built
    # from_argparse_args translates what it is given, the splat included.
    argparse_built = upgraded(
        "def main(args, **kw):\n    return Trainer.from_argparse_args(args, **kw)\n", no_todo=True
    )
    assert (
        "from_argparse_args(Trainer, args, **kw)" in argparse_built and "legacy_trainer_kwargs(" not in argparse_built
    )
    # Already translated, directly or through a name.
    for source in (
        "def main(cfg):\n    return Trainer(**legacy_trainer_kwargs(cfg))\n",
        "def main(cfg):\n    kwargs = legacy_trainer_kwargs(cfg)\n    return Trainer(**kwargs)\n",
    ):
        assert upgrade_source(source).source == source


def test_two_unreadable_splats_are_translated_together() -> None:
    """Translated together, a 1.x key in one and the 2.x key it maps to in the other still meet; the call's own
    callbacks= goes into the translation as with one splat."""
    out = upgraded(
        "def main(base, cfg, cbs):\n    return Trainer(**base, max_epochs=2, callbacks=cbs, **cfg.trainer)\n",
        no_todo=True,
        no_unmarked=True,
    )
    expected = 'legacy_trainer_kwargs(base, **cfg.trainer, namespace="pytorch_lightning", callbacks=cbs)'
    assert f"Trainer(max_epochs=2, **{expected})" in out, out


def test_two_splats_build_what_1x_built() -> None:
    """The converted call, run: the two settings dicts meet in one translation (gpus in one, accelerator="ddp" in
    the other: 1.x's two GPUs under DDP), and a key in both is refused, as 1.x's call refused it (TypeError)."""
    out = upgraded(
        "from lightning.pytorch import Trainer\ndef main(opts, extra):\n    return Trainer(**opts, **extra)\n",
        no_todo=True,
    )
    received: dict[str, object] = {}
    namespace: dict[str, object] = {}
    exec(compile(out, "<converted>", "exec"), namespace)  # noqa: S102
    namespace["Trainer"] = lambda **kwargs: received.update(kwargs)
    namespace["main"]({"gpus": 2, "max_epochs": 3}, {"accelerator": "ddp", "precision": 16})  # type: ignore[operator]
    assert received == {"accelerator": "gpu", "devices": 2, "strategy": "ddp", "precision": "16-mixed", "max_epochs": 3}
    with pytest.raises(TypeError):
        (lambda **kw: kw)(**{"gpus": 1}, **{"gpus": 2})  # 1.x: the same key twice
    with pytest.raises(ValueError, match="given twice"):
        namespace["main"]({"gpus": 1}, {"gpus": 2})  # type: ignore[operator]


def test_the_converted_call_builds_what_1x_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """The converted source, run: the Trainer receives the 2.x arguments of the 1.x settings in the config, and the
    progress bar a 1.x key adds joins the call's own callbacks."""
    from lightning.pytorch.callbacks import TQDMProgressBar

    out = upgraded(
        "from lightning.pytorch import Trainer\n"
        "def main(cfg, checkpoint):\n"
        "    return Trainer(callbacks=[checkpoint], **cfg['trainer'])\n",
        no_todo=True,
    )
    received: dict[str, object] = {}
    namespace: dict[str, object] = {}
    exec(compile(out, "<converted>", "exec"), namespace)  # noqa: S102
    namespace["Trainer"] = lambda **kwargs: received.update(kwargs)
    settings = {"gpus": 2, "accelerator": "ddp", "precision": 16, "progress_bar_refresh_rate": 5, "max_epochs": 3}
    namespace["main"]({"trainer": settings}, "ckpt")  # type: ignore[operator]
    callbacks = received.pop("callbacks")
    assert received == {"accelerator": "gpu", "devices": 2, "strategy": "ddp", "precision": "16-mixed", "max_epochs": 3}
    assert isinstance(callbacks, list) and callbacks[0] == "ckpt" and isinstance(callbacks[1], TQDMProgressBar)
    assert callbacks[1].refresh_rate == 5


def test_callbacks_given_twice_are_refused() -> None:
    with pytest.raises(ValueError, match="callbacks= is given twice"):
        legacy_trainer_kwargs({"callbacks": []}, callbacks=[])
    assert legacy_trainer_kwargs({"max_epochs": 1}, callbacks=["cb"]) == {"max_epochs": 1, "callbacks": ["cb"]}


def test_a_checkpoint_callback_joins_a_sum_of_lists_that_goes_into_the_translation() -> None:
    """``checkpoint_callback=ModelCheckpoint(...)`` beside ``callbacks=[A] + [made for c in cfg]`` and
    ``**cfg.trainer`` (a reserve file of the fourth held-out draw): the checkpoint joins the sum, which goes into the
    translation. Before, the first run left a TODO and moved the callbacks; the second then wrote a second
    ``callbacks=`` beside them (a duplicate keyword at run time)."""
    out = upgraded(
        "import pytorch_lightning as pl\n"
        "from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint\n"
        "def main(cfg):\n"
        "    return pl.Trainer(\n"
        "        **cfg.trainer,\n"
        "        checkpoint_callback=ModelCheckpoint(**cfg.ckpt),\n"
        "        callbacks=[EarlyStopping(**cfg.stop)] + [make(c) for c in cfg.callbacks],\n"
        "    )\n",
        no_todo=True,
    )
    assert (
        'legacy_trainer_kwargs(cfg.trainer, namespace="pytorch_lightning", callbacks=[EarlyStopping(**cfg.stop)]'
        " + [make(c) for c in cfg.callbacks] + [ModelCheckpoint(**cfg.ckpt)])"
    ) in out, out
    assert "checkpoint_callback" not in out


def test_callbacks_an_earlier_run_moved_into_the_translation_get_no_second_list() -> None:
    """A checkpoint callback left with its TODO beside callbacks this tool cannot extend, moved into the translation
    by the first run: a second run keeps the TODO instead of writing ``callbacks=[...]`` beside the translation."""
    source = (
        "import pytorch_lightning as pl\n"
        "def main(cfg, checkpoint):\n"
        "    return pl.Trainer(**cfg.trainer, checkpoint_callback=checkpoint, callbacks=get_callbacks(cfg))\n"
    )
    first = upgrade_source(source).source
    second = upgrade_source(first).source
    assert second == first
    assert "TODO(lightning-mgpu:trainer-checkpoint-callback)" in first
    assert "callbacks=[checkpoint]" not in second and second.count("callbacks=get_callbacks(cfg)") == 1
