"""A 1.x Horovod job (horovodrun -np 4 python horovod_dict.py): its Trainer settings in a literal dict passed whole."""
import torch

from pytorch_lightning import Trainer

TRAINER_ARGS = {
    "gpus": 1 if torch.cuda.is_available() else 0,
    "distributed_backend": "horovod",
    "precision": 16 if torch.cuda.is_available() else 32,
    "max_epochs": 10,
    "replace_sampler_ddp": True,
}


def build_trainer():
    return Trainer(**TRAINER_ARGS, logger=False)
