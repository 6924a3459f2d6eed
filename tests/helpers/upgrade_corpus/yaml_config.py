"""A 1.x project that keeps the Trainer's settings in a YAML file: the tool cannot see them, so they are translated
when the Trainer is built."""
import yaml

import pytorch_lightning as pl


def build_trainer(path="config.yaml"):
    with open(path) as f:
        config = yaml.safe_load(f)
    return pl.Trainer(**config["trainer"], terminate_on_nan=True)
