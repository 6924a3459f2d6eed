"""``lightning_mgpu.upgrade.manual_optimization`` (rule ``manual-optimization``): a 1.x
``training_step(..., optimizer_idx)`` over several optimizers becomes Lightning 2's manual optimization, doing what
1.x's automatic loop did.

The converted GANs train here on Lightning 2 (CPU, in-process), and their parameters after a few epochs equal those of
a plain loop written from Lightning 1.9.5's source (loops/optimization/optimizer_loop.py, loops/utilities.py
``_get_active_optimizers``, loops/epoch/training_epoch_loop.py ``update_lr_schedulers``): toggling, zero_grad,
frequencies taking turns over the epoch's batches, schedulers stepped after the batch.
"""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

GAN = """import pytorch_lightning as pl
import torch
from torch import nn


class GAN(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.generator = nn.Linear(4, 4)
        self.discriminator = nn.Linear(4, 1)
        self.seen = []  # (optimizer_idx, generator trainable, discriminator trainable) at each step

    def training_step(self, batch, batch_idx, optimizer_idx):
        (real,) = batch
        self.seen.append((optimizer_idx, self.generator.weight.requires_grad, self.discriminator.weight.requires_grad))
        fake = self.generator(real.flip(0))
        if optimizer_idx == 0:
            return -self.discriminator(fake).mean()
        if optimizer_idx == 1:
            return self.discriminator(fake.detach()).mean() - self.discriminator(real).mean()

    def configure_optimizers(self):
        opt_g = torch.optim.SGD(self.generator.parameters(), lr=0.1, momentum=0.9)
        opt_d = torch.optim.SGD(self.discriminator.parameters(), lr=0.1, momentum=0.9)
        return [opt_g, opt_d], []
"""

RETURNS = "        return [opt_g, opt_d], []\n"
#: configure_optimizers' 1.x shapes, each a fixture: frequencies, schedulers (epoch and step, with frequencies).
FREQUENCY = '        return ({"optimizer": opt_g, "frequency": 1}, {"optimizer": opt_d, "frequency": 2})\n'
SCHEDULERS = (
    "        g = torch.optim.lr_scheduler.StepLR(opt_g, 1, gamma=0.5)\n"
    "        d = torch.optim.lr_scheduler.StepLR(opt_d, 1, gamma=0.9)\n"
    '        return [opt_g, opt_d], [g, {"scheduler": d, "interval": "step", "frequency": 2}]\n'
)
FREQUENCY_AND_SCHEDULERS = (
    "        g = torch.optim.lr_scheduler.StepLR(opt_g, 1, gamma=0.5)\n"
    "        d = torch.optim.lr_scheduler.StepLR(opt_d, 1, gamma=0.9)\n"
    "        return (\n"
    '            {"optimizer": opt_g, "frequency": 2, "lr_scheduler": {"scheduler": g, "interval": "step"}},\n'
    '            {"optimizer": opt_d, "frequency": self.hparams.n_critic, "lr_scheduler": d},\n'
    "        )\n"
)
#: frequencies the file does not spell out (dicts updated in a loop): read at run time (legacy_optimizer_frequencies)
FREQUENCY_AT_RUN_TIME = (
    '        setups = [{"optimizer": opt_g}, {"optimizer": opt_d}]\n'
    "        for setup, turns in zip(setups, self.turns):\n"
    '            setup.update({"frequency": turns})\n'
    "        return setups\n"
)
DICT_RETURN = (
    "            return -self.discriminator(fake).mean()\n",
    '            loss = -self.discriminator(fake).mean()\n            self.log("g_loss", loss)\n'
    '            return {"loss": loss, "fake": fake.detach()}\n',
)
NONE_RETURN = (  # the discriminator sits out odd batches
    "        if optimizer_idx == 1:\n",
    "        if optimizer_idx == 1 and batch_idx % 2 == 1:\n            return None\n        if optimizer_idx == 1:\n",
)


def variant(configure: str = RETURNS, *replacements: tuple[str, str]) -> str:
    source = GAN.replace(RETURNS, configure)
    if "n_critic" in configure:
        source = source.replace(
            "        super().__init__()\n", "        super().__init__()\n        self.save_hyperparameters()\n"
        )
        source = source.replace("def __init__(self):", "def __init__(self, n_critic=3):")
    for old, new in replacements:
        assert old in source
        source = source.replace(old, new)
    return source


FIXTURES = {
    "gan": variant(),
    "frequency": variant(FREQUENCY),
    "schedulers": variant(SCHEDULERS),
    "frequency_and_schedulers": variant(FREQUENCY_AND_SCHEDULERS),
    "frequency_at_run_time": variant(
        FREQUENCY_AT_RUN_TIME, ("        self.seen = []", "        self.turns = (1, 2)\n        self.seen = []")
    ),
    "dict_return": variant(RETURNS, DICT_RETURN),
    "none_return": variant(RETURNS, NONE_RETURN),
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_each_shape_converts_with_nothing_left(name: str) -> None:
    out = upgraded(FIXTURES[name])
    assert rules.TODO_TAG not in out, out
    assert "    automatic_optimization = False\n" in out
    assert "    def training_step(self, batch, batch_idx):\n" in out
    assert "    def _training_step_1x(self, batch, batch_idx, optimizer_index):\n" in out
    assert "optimizer_idx ==" not in out and "optimizer_idx)" not in out  # the helper's index is renamed
    assert '"frequency": 1}' not in out and '"frequency": 2}, {' not in out  # the optimizers' frequencies moved
    if "scheduler" in name:
        assert '"interval": "step"' in out  # a scheduler's own frequency and interval stay
    findings = upgrade_source(FIXTURES[name]).findings
    assert "manual-optimization" in {f.rule for f in findings}


def test_the_frequencies_become_turns_and_a_schedulers_frequency_stays() -> None:
    out = upgraded(FIXTURES["frequency_and_schedulers"])
    assert "        frequencies = [2, self.hparams.n_critic]\n" in out
    assert '{"optimizer": opt_d, "lr_scheduler": d}' in out
    assert '{"scheduler": g, "interval": "step"}' in out


def test_run_time_frequencies_go_through_the_reader() -> None:
    out = upgraded(FIXTURES["frequency_at_run_time"], no_todo=True, no_unmarked=True)
    assert "from lightning_mgpu.upgrade.legacy_optimizers import legacy_optimizer_frequencies" in out, out
    assert (
        "    def configure_optimizers(self):\n"
        '        # 1.x took turns by the "frequency" keys the optimizers\' dicts hold; 2.x ignores them (a warning):\n'
        "        # read here for _active_optimizers_1x, and dropped from what 2.x gets\n"
        "        config, self._optimizer_frequencies_1x = legacy_optimizer_frequencies("
        "self._configure_optimizers_1x())\n"
        "        return config\n\n"
        "    def _configure_optimizers_1x(self):\n"
    ) in out, out
    assert 'frequencies = getattr(self, "_optimizer_frequencies_1x", [])' in out


@pytest.mark.parametrize(
    ("config", "expected", "frequencies"),
    [
        (
            [{"optimizer": "g", "frequency": 1}, {"optimizer": "d", "frequency": 5}],
            [{"optimizer": "g"}, {"optimizer": "d"}],
            [1, 5],
        ),
        (
            ({"optimizer": "g", "lr_scheduler": "s"}, {"optimizer": "d"}),
            ({"optimizer": "g", "lr_scheduler": "s"}, {"optimizer": "d"}),
            [],
        ),
        ({"optimizer": "g", "frequency": 3}, {"optimizer": "g", "frequency": 3}, []),  # 1.x never read a lone dict's
        ((["g", "d"], ["s"]), (["g", "d"], ["s"]), []),
        ("g", "g", []),
        ([], [], []),
    ],
)
def test_the_reader_takes_what_1x_took(config: object, expected: object, frequencies: list) -> None:
    """1.9.5's core/optimizer.py _configure_optimizers: only a list of dicts carries frequencies."""
    from lightning_mgpu.upgrade.legacy_optimizers import legacy_optimizer_frequencies

    assert legacy_optimizer_frequencies(config) == (expected, frequencies)


def test_the_reader_refuses_what_1x_refused() -> None:
    from lightning_mgpu.upgrade.legacy_optimizers import legacy_optimizer_frequencies

    with pytest.raises(ValueError, match="A frequency must be given to each optimizer"):
        legacy_optimizer_frequencies([{"optimizer": "g", "frequency": 2}, {"optimizer": "d"}])


@pytest.mark.parametrize(
    ("why", "source"),
    [
        (
            "ReduceLROnPlateau's monitor",
            variant(SCHEDULERS.replace("StepLR(opt_d, 1, gamma=0.9)", "ReduceLROnPlateau(opt_d)")),
        ),
        (
            "an optimizer_step override",
            GAN + "\n    def optimizer_step(self, *args, **kwargs):\n        super().optimizer_step(*args, **kwargs)\n",
        ),
        (
            "run-time frequencies, and the class calls configure_optimizers itself",
            variant(
                FREQUENCY_AT_RUN_TIME.replace(
                    "        return setups", "        self.configure_optimizers\n        return setups"
                ),
                ("self.seen = []", "self.seen = []\n        self.turns = (1, 2)"),
            ),
        ),
        ("accumulation", GAN + "\n\ntrainer = pl.Trainer(accumulate_grad_batches=2)\n"),
        ("clipping the file does not show", GAN + "\n\ntrainer = pl.Trainer(gradient_clip_val=args.clip)\n"),
        ("truncated backprop", GAN.replace("batch_idx, optimizer_idx)", "batch_idx, optimizer_idx, hiddens)")),
        ("no configure_optimizers", GAN.split("    def configure_optimizers")[0]),
    ],
)
def test_shapes_it_cannot_make_faithful_keep_the_todo(why: str, source: str) -> None:
    out = upgrade_source(source).source
    assert "optimizer-idx): training_step uses optimizer_idx" in out, why
    assert "automatic_optimization = False" not in out, why


def test_the_trainers_clipping_moves_into_the_step() -> None:
    source = (
        GAN
        + "\n\ndef build():\n"
        + '    return pl.Trainer(gradient_clip_val=0.5, gradient_clip_algorithm="value", max_epochs=1)\n'
    )
    out = upgraded(source)
    assert 'self.clip_gradients(optimizer, gradient_clip_val=0.5, gradient_clip_algorithm="value")' in out
    assert "return pl.Trainer(max_epochs=1)" in out and rules.TODO_TAG not in out


def test_a_second_module_keeps_the_trainers_clipping_and_the_todo() -> None:
    other = (
        "\n\nclass Other(pl.LightningModule):\n    def training_step(self, batch, batch_idx):\n        return batch\n"
    )
    out = upgrade_source(GAN + other + "\n\ntrainer = pl.Trainer(gradient_clip_val=0.5)\n").source
    assert "optimizer-idx)" in out and "gradient_clip_val=0.5" in out


def test_hooks_that_lost_optimizer_idx_drop_it_when_unused() -> None:
    hook = "\n    def on_before_optimizer_step(self, optimizer, optimizer_idx):\n        pass\n"
    out = upgraded(GAN + hook)
    assert "    def on_before_optimizer_step(self, optimizer):\n" in out and rules.TODO_TAG not in out


# -- on Lightning 2 ----------------------------------------------------------------------------------------------------


def _module(source: str, **kwargs):
    namespace: dict[str, object] = {}
    exec(compile(source, "converted", "exec"), namespace)  # noqa: S102
    return namespace["GAN"](**kwargs)  # type: ignore[operator]


def _loader():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    return DataLoader(TensorDataset(torch.randn(20, 4, generator=torch.Generator().manual_seed(1))), batch_size=4)


def _active_1x(frequencies: list[int], batch_idx: int, count: int) -> list[int]:
    """1.9.5's loops/utilities.py _get_active_optimizers."""
    if not frequencies:
        return list(range(count))
    import numpy as np

    cumsum = np.cumsum(frequencies)
    return [int(np.searchsorted(cumsum, batch_idx % cumsum[-1], side="right"))]


def _train_as_1x(model, epochs: int) -> None:
    """Lightning 1.9.5's automatic optimization over several optimizers, in fp32, written out as a plain loop."""
    conf = model.configure_optimizers()
    frequencies: list[int] = []
    if isinstance(conf, (list, tuple)) and len(conf) == 2 and isinstance(conf[0], list):
        optimizers, raw = conf[0], conf[1] if isinstance(conf[1], list) else [conf[1]]
    elif all(isinstance(d, dict) for d in conf):
        optimizers = [d["optimizer"] for d in conf]
        frequencies = [d["frequency"] for d in conf if d.get("frequency") is not None]
        raw = [d["lr_scheduler"] for d in conf if "lr_scheduler" in d]
    else:
        optimizers, raw = list(conf), []
    schedulers = []
    for entry in raw:
        config = {"interval": "epoch", "frequency": 1, **(entry if isinstance(entry, dict) else {"scheduler": entry})}
        config["opt_idx"] = next(i for i, o in enumerate(optimizers) if o is config["scheduler"].optimizer)
        schedulers.append(config)
    params = {p for o in optimizers for g in o.param_groups for p in g["params"]}
    total = 0
    batches = list(_loader())
    for epoch in range(epochs):
        for batch_idx, batch in enumerate(batches):
            for index in _active_1x(frequencies, batch_idx, len(optimizers)):
                # toggle_optimizer: only this optimizer's parameters require grad
                state = {p: p.requires_grad for p in params}
                for p in params:
                    p.requires_grad = False
                for group in optimizers[index].param_groups:
                    for p in group["params"]:
                        p.requires_grad = state[p]
                # the closure: training_step, zero_grad, backward; then the step (fp32 steps even on None)
                out = model.training_step(batch, batch_idx, index)
                optimizers[index].zero_grad()
                loss = out["loss"] if isinstance(out, dict) else out
                if loss is not None:
                    loss.backward()
                optimizers[index].step()
                for p, requires_grad in state.items():  # untoggle_optimizer
                    p.requires_grad = requires_grad
            # update_lr_schedulers("step") then, at the epoch's last batch, ("epoch"); active by the total index
            active = _active_1x(frequencies, total, len(optimizers))
            for config in schedulers:
                if config["opt_idx"] not in active:
                    continue
                if config["interval"] == "step" and (batch_idx + 1) % config["frequency"] == 0:
                    config["scheduler"].step()
                last = batch_idx == len(batches) - 1
                if config["interval"] == "epoch" and last and (epoch + 1) % config["frequency"] == 0:
                    config["scheduler"].step()
            total += 1


def _fit(model, tmp_path, epochs: int, **trainer_kwargs) -> object:
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer(
        "pytorch_lightning", max_epochs=epochs, num_sanity_val_steps=0, default_root_dir=tmp_path, **trainer_kwargs
    )
    trainer.fit(model, _loader())
    return trainer


def test_the_converted_gan_trains_both_nets_each_toggled(tmp_path) -> None:
    import torch

    model = _module(upgraded(FIXTURES["dict_return"]))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = _fit(model, tmp_path, epochs=1)
    after = model.state_dict()
    # (the discriminator's bias cancels out of its loss: the weights are what both losses move)
    assert not torch.equal(before["generator.weight"], after["generator.weight"]), "the generator did not train"
    assert not torch.equal(before["discriminator.weight"], after["discriminator.weight"]), "nor the discriminator"
    # Each optimizer's step saw only its own net trainable (toggle_optimizer), the generator first.
    assert model.seen[:2] == [(0, True, False), (1, False, True)]
    assert len(model.seen) == 10 and trainer.global_step == 10  # 5 batches, 2 optimizers each
    assert "g_loss" in trainer.callback_metrics  # the step's own logging kept
    assert model.generator.weight.requires_grad and model.discriminator.weight.requires_grad  # untoggled


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_the_parameters_equal_lightning_1x_loops(name: str, tmp_path) -> None:
    """Three epochs of 5 batches (turns and epoch-end schedulers cross epochs): the converted module under
    Lightning 2 and the 1.x module under a plain loop of 1.9.5's semantics end with the same parameters and LRs."""
    import torch

    kwargs = {"n_critic": 2} if "n_critic" in FIXTURES[name] else {}
    torch.manual_seed(0)
    converted = _module(upgraded(FIXTURES[name]), **kwargs)
    torch.manual_seed(0)
    original = _module(FIXTURES[name], **kwargs)
    if name == "dict_return":  # self.log needs a Trainer: the 1.x loop calls the step bare
        original.log = lambda *args, **kwargs: None
    trainer = _fit(converted, tmp_path, epochs=3)
    _train_as_1x(original, epochs=3)
    assert [s[0] for s in converted.seen] == [s[0] for s in original.seen]
    for (key, ours), theirs in zip(converted.state_dict().items(), original.state_dict().values()):
        torch.testing.assert_close(ours, theirs, msg=f"{name}: {key}")
    if "scheduler" in name:
        lrs = [o.param_groups[0]["lr"] for o in trainer.optimizers]
        assert lrs != [0.1, 0.1], "no scheduler stepped"


def test_the_moved_clipping_clips(tmp_path) -> None:
    source = GAN + "\n\ndef build():\n    return pl.Trainer(gradient_clip_val=1e-6)\n"
    model = _module(upgraded(source))
    before = model.discriminator.weight.clone()
    _fit(model, tmp_path, epochs=1)  # 2.x would refuse the Trainer's clipping under manual optimization
    # SGD with lr 0.1 and gradients clipped to norm 1e-6: 5 steps move the weights by less than ~1e-5 (momentum)
    assert (model.discriminator.weight - before).abs().max() < 1e-5


SUBCLASSES = (
    GAN
    + '''

class GumbelGAN(GAN):
    def training_step(self, batch, batch_idx, optimizer_idx):
        self.temperature = 0.5
        return super().training_step(batch, batch_idx, optimizer_idx)


class NoDiscriminator(GAN):
    """One optimizer: Lightning's automatic optimization, as before."""

    def training_step(self, batch, batch_idx):
        return self.generator(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.generator.parameters(), lr=0.1)


class Plain(GAN):
    pass
'''
)


def test_subclasses_in_the_file_follow_their_base(tmp_path) -> None:
    """A subclass inherits automatic_optimization = False and the new step: its own 1.x step becomes its helper, and a
    step of one optimizer gets automatic optimization back (else it would silently train nothing)."""
    import torch

    out = upgraded(SUBCLASSES)
    assert rules.TODO_TAG not in out, out
    assert "class GumbelGAN(GAN):\n    def _training_step_1x(self, batch, batch_idx, optimizer_index):\n" in out
    assert "super()._training_step_1x(batch, batch_idx, optimizer_index)" in out  # the base's 1.x step, renamed
    assert '    """One optimizer: Lightning\'s automatic optimization, as before."""\n\n    # its base' in out
    assert "    automatic_optimization = True\n" in out
    namespace: dict[str, object] = {}
    exec(compile(out, "converted", "exec"), namespace)  # noqa: S102
    single = namespace["NoDiscriminator"]()  # type: ignore[operator]
    before = single.generator.weight.clone()
    _fit(single, tmp_path, epochs=1)
    assert not torch.equal(before, single.generator.weight)
    gumbel = namespace["GumbelGAN"]()  # type: ignore[operator]
    _fit(gumbel, tmp_path, epochs=1)
    assert gumbel.temperature == 0.5 and [s[0] for s in gumbel.seen[:2]] == [0, 1]


def test_a_subclass_that_cannot_follow_keeps_the_family_as_it_was() -> None:
    source = SUBCLASSES + "\n\nclass Stepper(GAN):\n    def optimizer_step(self, *args, **kwargs):\n        pass\n"
    out = upgrade_source(source).source
    assert "automatic_optimization" not in out and "optimizer-idx)" in out


#: A base whose configure_optimizers (frequencies read from self, a scheduler each) serves subclasses that each
#: override the base's abstract 1.x step: one clamps weights first, one takes a further keyword parameter and
#: repeats the base's configure_optimizers.
ABSTRACT_BASE = """import pytorch_lightning as pl
import torch
from abc import abstractmethod
from torch import nn


class Duel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.generator = nn.Linear(4, 4)
        self.discriminator = nn.Linear(4, 1)
        self.n_critic = 2
        self.seen = []

    @abstractmethod
    def training_step(self, batch, batch_idx, optimizer_idx):
        pass

    def configure_optimizers(self):
        opt_d = torch.optim.SGD(self.discriminator.parameters(), lr=0.1, momentum=0.9)
        opt_g = torch.optim.SGD(self.generator.parameters(), lr=0.1, momentum=0.9)
        sched_d = torch.optim.lr_scheduler.StepLR(opt_d, 1, gamma=0.5)
        sched_g = torch.optim.lr_scheduler.StepLR(opt_g, 1, gamma=0.9)
        return ({"optimizer": opt_d, "lr_scheduler": sched_d, "frequency": self.n_critic},
                {"optimizer": opt_g, "lr_scheduler": sched_g, "frequency": 1})


class Hinge(Duel):
    def training_step(self, batch, batch_idx, optimizer_idx):
        (real,) = batch
        self.seen.append(optimizer_idx)
        fake = self.generator(real.flip(0))
        if optimizer_idx == 0:
            return (1 - self.discriminator(real)).relu().mean() + (1 + self.discriminator(fake.detach())).relu().mean()
        if optimizer_idx == 1:
            return -self.discriminator(fake).mean()


class Clipped(Duel):
    def training_step(self, batch, batch_idx, optimizer_idx):
        for p in self.discriminator.parameters():
            p.data.clamp_(-0.3, 0.3)
        (real,) = batch
        self.seen.append(optimizer_idx)
        fake = self.generator(real.flip(0))
        if optimizer_idx == 0:
            return self.discriminator(fake.detach()).mean() - self.discriminator(real).mean()
        if optimizer_idx == 1:
            return -self.discriminator(fake).mean()


class Posed(Duel):
    def configure_optimizers(self):
        opt_d = torch.optim.SGD(self.discriminator.parameters(), lr=0.05)
        opt_g = torch.optim.SGD(self.generator.parameters(), lr=0.05)
        return ({"optimizer": opt_d, "frequency": self.n_critic}, {"optimizer": opt_g, "frequency": 1})

    def training_step(self, batch, batch_idx, optimizer_idx,
            pose=None):
        (real,) = batch
        self.seen.append(optimizer_idx)
        fake = self.generator(real.flip(0) if pose is None else real)
        if optimizer_idx == 0:
            out = self.discriminator(fake.detach()).pow(2).mean()
        if optimizer_idx == 1:
            out = (self.discriminator(fake) - 1).pow(2).mean()
        return out
"""


def test_an_abstract_base_step_and_its_subclasses_convert() -> None:
    out = upgraded(ABSTRACT_BASE)
    assert rules.TODO_TAG not in out, out
    assert "    @abstractmethod\n    def _training_step_1x(self, batch, batch_idx, optimizer_index):\n" in out
    for name in ("Hinge", "Clipped"):
        assert f"class {name}(Duel):\n    def _training_step_1x(self, batch, batch_idx, optimizer_index):\n" in out
    assert "    def _training_step_1x(self, batch, batch_idx, optimizer_index,\n            pose=None):\n" in out
    assert '"frequency"' not in out  # the base's and the subclass's copy of them: the new step reads them
    # the base's, and Posed's (with a configure_optimizers of its own, it is converted as a base); the others inherit
    assert out.count("automatic_optimization = False") == 2


@pytest.mark.parametrize("name", ["Hinge", "Clipped", "Posed"])
def test_subclasses_of_an_abstract_base_equal_lightning_1x_loops(name: str, tmp_path) -> None:
    """Each subclass, converted with its base, under Lightning 2, and as 1.x ran it (a plain loop of 1.9.5's
    semantics): the same turns (the discriminator twice, then the generator, anew each epoch), parameters and
    learning rates."""
    import torch

    converted_ns: dict[str, object] = {}
    exec(compile(upgraded(ABSTRACT_BASE), "converted", "exec"), converted_ns)  # noqa: S102
    original_ns: dict[str, object] = {}
    exec(compile(ABSTRACT_BASE, "original", "exec"), original_ns)  # noqa: S102
    torch.manual_seed(0)
    converted = converted_ns[name]()  # type: ignore[operator]
    torch.manual_seed(0)
    original = original_ns[name]()  # type: ignore[operator]
    trainer = _fit(converted, tmp_path, epochs=3)
    _train_as_1x(original, epochs=3)
    assert converted.seen == original.seen and converted.seen[:6] == [0, 0, 1, 0, 0, 0]
    for (key, ours), theirs in zip(converted.state_dict().items(), original.state_dict().values()):
        torch.testing.assert_close(ours, theirs, msg=f"{name}: {key}")
    if name != "Posed":
        assert [o.param_groups[0]["lr"] for o in trainer.optimizers] != [0.1, 0.1], "no scheduler stepped"


def test_a_further_parameter_without_a_default_keeps_the_todo() -> None:
    source = ABSTRACT_BASE.replace("pose=None):", "pose):")
    assert "TODO(lightning-mgpu:optimizer-idx)" in upgrade_source(source).source


def test_a_file_with_truncated_backprop_keeps_the_todo() -> None:
    source = ABSTRACT_BASE + "\n\ndef build():\n    return pl.Trainer(truncated_bptt_steps=2)\n"
    assert "automatic_optimization" not in upgrade_source(source).source


def test_a_subclass_repeating_the_bases_frequencies_loses_them_too() -> None:
    """A subclass without a step of its own whose configure_optimizers repeats the base's frequencies: the inherited
    step turns by them, and the keys go (2.x warns about them)."""
    source = ABSTRACT_BASE + (
        "\n\nclass Slower(Hinge):\n"
        "    def configure_optimizers(self):\n"
        "        opt_d = torch.optim.SGD(self.discriminator.parameters(), lr=0.01)\n"
        "        opt_g = torch.optim.SGD(self.generator.parameters(), lr=0.01)\n"
        '        return ({"optimizer": opt_d, "frequency": self.n_critic}, {"optimizer": opt_g, "frequency": 1})\n'
    )
    out = upgraded(source)
    assert rules.TODO_TAG not in out and '"frequency"' not in out
    assert 'return ({"optimizer": opt_d}, {"optimizer": opt_g})' in out


def test_the_inserted_helpers_keep_a_blank_line_before_the_next_method() -> None:
    # The step ends in whitespace-only lines (libcst keeps them in the step's block) and the next method follows
    # without a blank line of its own: the helpers go between them, and those lines after the last helper.
    source = GAN.replace(
        "            return self.discriminator(fake.detach()).mean() - self.discriminator(real).mean()\n\n",
        "            return self.discriminator(fake.detach()).mean() - self.discriminator(real).mean()\n        \n",
    )
    out = upgrade_source(source).source
    assert upgrade_source(out).source == out
    assert (
        "            return self.discriminator(fake.detach()).mean() - self.discriminator(real).mean()\n"
        "\n    def _active_optimizers_1x(self, batch_idx, count):\n"
    ) in out
    assert "                scheduler.step()\n        \n    def configure_optimizers(self):\n" in out
