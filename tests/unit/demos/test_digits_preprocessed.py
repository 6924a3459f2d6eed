"""The digits example for lightning_mgpu.data: an expensive deterministic transform, cached."""

from __future__ import annotations

import numpy as np
import torch

from lightning_mgpu.data import fingerprint_transform
from lightning_mgpu.demos import ImageClassifier
from lightning_mgpu.demos.digits_preprocessed import (
    DigitsFeatures,
    digits_preprocessed_datamodule,
    digits_splits,
)
from tests.helpers.trainer import quiet_trainer


def test_features_are_deterministic_orientation_maps():
    train, val = digits_splits()
    assert (len(train), len(val)) == (1438, 359)  # the DigitsDataModule split
    f = DigitsFeatures()
    x, y = f(train[0])
    x2, _ = f(train[0])
    assert x.shape == f.output_shape == (17, 8, 8) and x.dtype == np.float32 and y.dtype == np.int64
    assert np.array_equal(x, x2) and np.isfinite(x).all()
    assert int(y) == int(train[0][1])
    # Orientation channels respond to structure: two different digits give different maps.
    assert not np.allclose(x, f(train[1])[0])
    assert (
        fingerprint_transform(DigitsFeatures())
        == fingerprint_transform(f)
        != fingerprint_transform(DigitsFeatures(scales=(1.0,)))
    )


def test_datamodule_trains_from_the_cache(tmp_path):
    dm = digits_preprocessed_datamodule(
        tmp_path, backend="serial", batch_size=16, num_workers=0, max_samples=64, progress=False
    )
    assert dm.image_shape == (17, 8, 8) and dm.num_classes == 10
    model = ImageClassifier(in_channels=dm.image_shape[0], num_classes=dm.num_classes)
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, dm)
    assert trainer.global_step == 4 and "val_acc" in trainer.callback_metrics
    assert (tmp_path / "train" / "manifest.json").exists() and (tmp_path / "val" / "manifest.json").exists()
    fly = digits_preprocessed_datamodule(
        tmp_path / "none", backend="serial", batch_size=16, max_samples=64, cache=False
    )
    fly.setup("fit")
    for i in (0, 31, 63):
        (a, ya), (b, yb) = dm.datasets["train"][i], fly.datasets["train"][i]
        assert torch.equal(a, b) and torch.equal(ya, yb)
