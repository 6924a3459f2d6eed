"""Example models and data modules."""

from __future__ import annotations

import pytest
import torch

from lightning_mgpu.demos import (
    DigitsDataModule,
    ImageClassifier,
    SyntheticImageDataModule,
    load_digits_tensors,
    make_synthetic_images,
)
from tests.helpers.trainer import quiet_trainer


def test_digits_split_is_fixed_and_complete() -> None:
    a, b = DigitsDataModule(batch_size=16), DigitsDataModule(batch_size=16)
    a.setup("fit"), b.setup("fit")
    assert len(a.train_set) + len(a.val_set) == 1797 and len(a.val_set) == 359
    assert torch.equal(a.train_set.tensors[0], b.train_set.tensors[0])
    x, y = next(iter(a.val_dataloader()))
    assert x.shape == (16, 1, 8, 8) and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
    assert y.dtype == torch.int64 and set(y.tolist()) <= set(range(10))


def test_the_packaged_digits_are_scikit_learns() -> None:
    """The figures of ``sklearn.datasets.load_digits()`` (scikit-learn 1.9.1): per-class counts and the pixel sum."""
    x, y = load_digits_tensors()
    assert x.shape == (1797, 1, 8, 8) and y.shape == (1797,)
    assert torch.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert float((x.double() * 16).sum()) == 35107.375 * 16 and y[:10].tolist() == list(range(10))


def test_an_altered_digits_file_is_refused(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_mgpu.demos import digits

    altered = tmp_path / "digits.csv.gz"
    altered.write_bytes(digits.DIGITS_FILE.read_bytes()[:-10])
    monkeypatch.setattr(digits, "DIGITS_FILE", altered)
    with pytest.raises(RuntimeError, match="is altered.*reinstall lightning_mgpu"):
        load_digits_tensors()
    monkeypatch.setattr(digits, "DIGITS_FILE", tmp_path / "missing.csv.gz")
    with pytest.raises(RuntimeError, match="is missing.*reinstall lightning_mgpu"):
        load_digits_tensors()


def test_synthetic_is_deterministic_per_seed() -> None:
    x1, y1 = make_synthetic_images(64, (3, 16, 16), 5, seed=7)
    x2, y2 = make_synthetic_images(64, (3, 16, 16), 5, seed=7)
    x3, _ = make_synthetic_images(64, (3, 16, 16), 5, seed=8)
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and not torch.equal(x1, x3)
    dm = SyntheticImageDataModule(size=40, val_size=8, image_shape=(2, 12, 12), num_classes=3, batch_size=8)
    dm.setup()
    assert len(dm.train_set) == 40 and len(dm.val_set) == 8 and dm.image_shape == (2, 12, 12)
    assert next(iter(dm.train_dataloader()))[0].shape == (8, 2, 12, 12)


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_classifier_steps_and_optimizers(optimizer: str) -> None:
    model = ImageClassifier(in_channels=3, num_classes=4, width=8, optimizer=optimizer, lr=0.01, weight_decay=1e-4)
    assert model(torch.randn(5, 3, 32, 32)).shape == (5, 4)
    opt = model.configure_optimizers()
    assert opt.defaults["lr"] == 0.01 and opt.defaults["weight_decay"] == 1e-4
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


def test_classifier_learns_digits_in_process() -> None:
    import lightning.pytorch as pl

    pl.seed_everything(0, verbose=False)
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(ImageClassifier(), DigitsDataModule(batch_size=32))
    assert trainer.callback_metrics["val_acc"] > 0.85


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"optimizer": "lbfgs"}, "optimizer='lbfgs' is not supported"), ({"lr": -1.0}, "lr must be positive")],
)
def test_classifier_bad_input(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ImageClassifier(**kwargs)


def test_datamodule_bad_input() -> None:
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        DigitsDataModule(batch_size=0)
    with pytest.raises(ValueError, match=r"image_shape must be \(C, H, W\)"):
        SyntheticImageDataModule(image_shape=(32, 32))
