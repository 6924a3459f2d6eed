"""A LightningModule's 1.x ``get_progress_bar_dict`` override (rule progress-bar-dict), for the classes family
(:mod:`~lightning_mgpu.upgrade.classes`), and the one place a run-time mixin of the bundle is added as a class's last
base (:func:`with_last_base`, also :class:`~lightning_mgpu.upgrade.step_ends.LegacyStepEnds`'s).

An override the 1.x Trainer called (``def get_progress_bar_dict(self)``, on a module) stays as it is, and the class
gets :class:`~lightning_mgpu.upgrade.progress_bar_dict.LegacyProgressBarDict` as its last base: at run time the
progress bar shows what the override returns, with the ``prog_bar`` metrics over it, and its
``super().get_progress_bar_dict()`` gives 1.x's default (see that module). A method of that name on a callback, a
progress bar or a DataModule is the user's own (1.x never called it there): it stays, without a TODO. An override with
another signature or a decorator keeps the TODO: 1.x called it with no argument, and what it made of it is unclear.
"""

from __future__ import annotations

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.scopes import dotted

HOOK = "get_progress_bar_dict"
MIXIN_MODULE = "lightning_mgpu.upgrade.progress_bar_dict"
MIXIN = "LegacyProgressBarDict"
#: What :func:`plan` gives: the class gets the mixin, or the method gets the TODO.
ADD_MIXIN, KEEP_TODO = "mixin", "todo"
#: Parts of a base's name that make a class a callback, a progress bar or a DataModule, not a LightningModule.
_NOT_A_MODULE = ("Callback", "ProgressBar", "DataModule")


def plan(node: cst.ClassDef, datamodules: set[str]) -> str | None:
    """What becomes of the class's ``get_progress_bar_dict``: :data:`ADD_MIXIN`, :data:`KEEP_TODO`, or ``None``
    (no such method, or one that is not 1.x's module hook)."""
    method = next(
        (s for s in node.body.body if isinstance(s, cst.FunctionDef) and s.name.value == HOOK),
        None,
    )
    if method is None:
        return None
    bases = {(dotted(b.value) or "").rsplit(".", 1)[-1] for b in node.bases}
    # Decision: a callback's, a progress bar's or a DataModule's method of that name is the user's own helper (1.x
    # called the hook on the LightningModule only, the bars' was get_metrics): nothing to convert.
    if bases & datamodules or any(part in base for base in bases for part in _NOT_A_MODULE):
        return None
    params = method.params
    # Decision: only 1.x's signature, (self) and nothing else, undecorated, is the hook 1.x called with no argument;
    # anything else keeps the TODO.
    if (
        len(params.params) == 1
        and not params.posonly_params
        and not params.kwonly_params
        and isinstance(params.star_arg, cst.MaybeSentinel)
        and params.star_kwarg is None
        and not method.decorators
    ):
        return ADD_MIXIN
    return KEEP_TODO


def with_last_base(ctx: UpgradeContext, cls: cst.ClassDef, module: str, name: str) -> cst.ClassDef:
    """``cls`` with ``name`` (a bundle mixin, imported from ``module``) as its last positional base (last: a base
    that already has it, in this file or another, keeps a consistent MRO); unchanged where it has it already."""
    ctx.add_import(module, name, None)
    if any(dotted(b.value) == name for b in cls.bases):
        return cls
    bases = list(cls.bases)
    positional = [i for i, b in enumerate(bases) if b.keyword is None and not b.star]
    index = positional[-1] + 1 if positional else 0
    new = cst.Arg(cst.Name(name))
    if index < len(bases):
        new = new.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    elif bases:
        bases[-1] = bases[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    bases.insert(index, new)
    return cls.with_changes(
        bases=bases,
        lpar=cls.lpar if bases and not isinstance(cls.lpar, cst.MaybeSentinel) else cst.LeftParen(),
        rpar=cls.rpar if bases and not isinstance(cls.rpar, cst.MaybeSentinel) else cst.RightParen(),
    )


def convert(ctx: UpgradeContext, original: cst.ClassDef, updated: cst.ClassDef) -> tuple[cst.ClassDef, str | None]:
    """The class with the mixin where :func:`plan` says so; and the TODO text for its method, where one stays."""
    how = plan(original, ctx.datamodules)
    if how == ADD_MIXIN:
        ctx.change(original, "progress-bar-dict", f"{HOOK} kept: {MIXIN} shows it in the progress bar, as 1.x did")
        return with_last_base(ctx, updated, MIXIN_MODULE, MIXIN), None
    if how == KEEP_TODO:
        return updated, rules.todo_text("progress-bar-dict")
    return updated, None
