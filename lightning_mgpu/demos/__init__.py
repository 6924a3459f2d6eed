"""Example LightningModules and DataModules used by the examples, tests and benchmarks."""

from lightning_mgpu.demos.classifier import ImageClassifier
from lightning_mgpu.demos.digits import DigitsDataModule, load_digits_tensors
from lightning_mgpu.demos.synthetic import (
    SyntheticImageDataModule,
    make_synthetic_images,
)

__all__ = [
    "DigitsDataModule",
    "ImageClassifier",
    "SyntheticImageDataModule",
    "load_digits_tensors",
    "make_synthetic_images",
]
