"""Two 1.x Trainers with NVIDIA apex: one really trained with apex O2 at precision 16; the other named apex but
kept precision 32, so it trained in fp32 (1.x ignored amp_backend then)."""
from pytorch_lightning import Trainer


def build_trainer(args):
    return Trainer(gpus=args.gpus, amp_backend="apex", amp_level="O2", precision=16, max_epochs=1)


def build_fp32_trainer(args):
    return Trainer(gpus=args.gpus, amp_backend="apex", amp_level="O1", max_epochs=1, auto_select_gpus=True)
