"""``Trainer(track_grad_norm=p)`` -> the LightningModule's ``on_before_optimizer_step`` logging
``grad_norm(self, norm_type=p)`` (rule ``track-grad-norm``).

1.x logged the gradients' p-norms itself; 2.x has ``lightning.pytorch.utilities.grad_norm`` for the module to log.
The hook is written where the file shows where it goes: every Trainer in it passes the same literal
``track_grad_norm`` (an int, a float or ``"inf"``), and the file defines exactly one LightningModule, which has no
``on_before_optimizer_step`` yet. Otherwise the Trainer gets the bundle's ``TrackGradNorm`` callback
(``trainer_rewrite.py``, rule ``track-grad-norm-callback``).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from lightning_mgpu.upgrade.scopes import dotted, is_trainer_call
from lightning_mgpu.upgrade.traverse import read_only_visit

HOOK = "on_before_optimizer_step"


@dataclass(frozen=True)
class GradNormPlan:
    """Where the hook goes and the norm it logs."""

    module_class: str
    norm: str  # the code of the literal: 2, 2.0, "inf"


class _Finder(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.norms: set[str] = set()
        self.unreadable = False
        self.modules: list[cst.ClassDef] = []

    def visit_Call(self, node: cst.Call) -> None:
        if not is_trainer_call(node):
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "track_grad_norm":
                if isinstance(arg.value, (cst.Integer, cst.Float, cst.SimpleString)):
                    self.norms.add(cst.Module(body=[]).code_for_node(arg.value))
                else:
                    self.unreadable = True

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if any((dotted(base.value) or "").endswith("LightningModule") for base in node.bases):
            self.modules.append(node)


def plan(module: cst.Module) -> GradNormPlan | None:
    """Where ``track_grad_norm`` goes in this file, or None where the file does not say.

    Args:
        module: the parsed file.
    """
    finder = _Finder()
    read_only_visit(module, finder)
    if finder.unreadable or len(finder.norms) != 1 or len(finder.modules) != 1:
        return None
    target = finder.modules[0]
    if any(isinstance(s, cst.FunctionDef) and s.name.value == HOOK for s in target.body.body):
        return None
    return GradNormPlan(target.name.value, next(iter(finder.norms)))


def add_hook(cls: cst.ClassDef, norm: str) -> cst.ClassDef:
    """``cls`` with ``on_before_optimizer_step`` logging the gradients' ``norm``-norms, as 1.x's track_grad_norm did.

    Args:
        cls: the LightningModule.
        norm: the norm's code (``2``, ``"inf"``).
    """
    hook = cst.parse_statement(
        f"def {HOOK}(self, optimizer):\n"
        f"    # Trainer(track_grad_norm={norm}) in 1.x: the gradients' norms, logged before each optimizer step\n"
        f"    self.log_dict(grad_norm(self, norm_type={norm}))\n"
    )
    assert isinstance(hook, cst.FunctionDef)
    hook = hook.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    body = cls.body
    return cls.with_changes(body=body.with_changes(body=[*body.body, hook]))
