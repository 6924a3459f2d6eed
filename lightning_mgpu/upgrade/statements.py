"""The statements family: assignments and one-statement lines the rewrites change as a whole. A variable that only
carries a strategy into a Trainer, a dict of Trainer settings (assigned, ``settings["gpus"] = 2``,
``settings.update(...)``), ``self.hparams = ...``, ``trainer.tune(...)`` as the Tuner calls the flags asked for, the
last checkpoint's 1.x name after a ``ModelCheckpoint(prefix=...)``, and a 1.x Trainer key left in settings the
rewrites do not follow (a TODO).

Rule ids: trainer-strategy, hparams-assign, tuner-flags, trainer-resume (and the Trainer-arguments rules, through
:mod:`~lightning_mgpu.upgrade.trainer_call`); TODO trainer-key-unfollowed.
"""

from __future__ import annotations

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.checkpoint_prefix import last_name_statement
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.leftover_spellings import legacy_items, legacy_keys
from lightning_mgpu.upgrade.nodes import code as _code
from lightning_mgpu.upgrade.nodes import quoted as _quoted
from lightning_mgpu.upgrade.nodes import string as _string
from lightning_mgpu.upgrade.scopes import MAPPING_CLASSES, base_path, dotted, is_dict_builder
from lightning_mgpu.upgrade.scopes import dotted as _dotted
from lightning_mgpu.upgrade.trainer_call import emit, rewrite_dict, trainer_args
from lightning_mgpu.upgrade.trainer_devices import strategy_value
from lightning_mgpu.upgrade.trainer_rewrite import rewrite_trainer_args
from lightning_mgpu.upgrade.tuner import tune_statements


def leave_assign(ctx: UpgradeContext, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
    target = updated.targets[0].target if len(updated.targets) == 1 else None
    if isinstance(target, cst.Name) and ctx.is_strategy_var(target.value):
        # backend = "ddp" if n > 1 else "ddp_cpu": the variable only carries a strategy into a Trainer.
        mapped = strategy_value(updated.value)
        if mapped is not None and _code(mapped) != _code(updated.value):
            ctx.change(
                original,
                "trainer-strategy",
                f"{target.value} = {_code(updated.value)} -> {_code(mapped)} (a 2.x strategy)",
            )
            return updated.with_changes(value=mapped)
        return updated
    if isinstance(target, cst.Name) and is_dict_builder(updated.value) and ctx.is_trainer_dict(target.value):
        new = rewrite_dict(ctx, updated.value, original)
        return updated if new is None else updated.with_changes(value=new)
    return updated


def leave_simple_statement_line(
    ctx: UpgradeContext, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
    result = rewrite_statement(ctx, original, updated)
    # A 1.x Trainer key the rewrites left in settings they do not follow: a TODO, never silence. Except where the
    # settings go into a named holder (config.trainer = Munch({"gpus": ...}), hparams = {...}, cfg["gpus"] = n)
    # that nothing in the file may hand to a Trainer whole (scopes.py's FileFacts.may_reach_trainer): the script
    # reads its fields itself (gpus=config.trainer.gpus in a Trainer call, which that call's rewrite converts), or
    # hands it to a model; the 1.x name is then only the script's own key.
    # A class attribute (class C: opts = {...}) is read as self.opts, C.opts, obj.opts: not followed, the TODO stays.
    holder = settings_holder(original)
    if holder is not None and original not in ctx.facts.class_lines and not ctx.facts.may_reach_trainer(holder):
        # Settings that reach a Trainer only through the bundle's translation at run time (Trainer(**settings)
        # that the call's rewrite translates, Trainer.from_argparse_args): the keys it translates as 1.x read
        # them need nothing; a key or value it refuses with a ValueError (resume_from_checkpoint=path) gets a TODO.
        translated = ctx.facts.reaches_translation(holder)
        for written in result.nodes if isinstance(result, cst.FlattenSentinel) else [result]:
            items = legacy_items(written) if translated and isinstance(written, cst.CSTNode) else []
            for key in dict.fromkeys(k for k, value in items if not rules.translated_at_run_time(k, value)):
                ctx.todo(original, rules.todo_text("trainer-key-refused", value=repr(key)))
        return result
    for written in result.nodes if isinstance(result, cst.FlattenSentinel) else [result]:
        for key in legacy_keys(written) if isinstance(written, cst.CSTNode) else []:
            ctx.todo(original, rules.todo_text("trainer-key-unfollowed", value=repr(key)))
    return result


def settings_holder(line: cst.SimpleStatementLine) -> str | None:
    """The dotted path a statement writes settings into: ``H = {...}``, ``H = dict(...)``, ``H = Munch({...})`` (a
    mapping class, scopes.MAPPING_CLASSES, around one dict), ``H[key] = value`` (H's base path:
    ``cfg["trainer"]["gpus"] = n`` -> ``cfg``). None for any other statement (a dict handed to a call, which may
    build anything from it: ``trainer = make_trainer({...})``; an ``update``; several statements on a line)."""
    if len(line.body) != 1 or not isinstance(line.body[0], (cst.Assign, cst.AnnAssign)):
        return None
    small = line.body[0]
    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
    value = small.value
    if len(targets) != 1 or value is None:
        return None
    if isinstance(targets[0], cst.Subscript):
        return base_path(targets[0])
    wrapped = (
        isinstance(value, cst.Call)
        and (dotted(value.func) or "").split(".")[-1] in MAPPING_CLASSES
        and len(value.args) == 1
        and value.args[0].keyword is None
        and not value.args[0].star
        and is_dict_builder(value.args[0].value)
    )
    return dotted(targets[0]) if is_dict_builder(value) or wrapped else None


def rewrite_statement(
    ctx: UpgradeContext, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
    if len(updated.body) != 1:
        return updated
    small = updated.body[0]
    first = original.body[0]
    if isinstance(first, cst.Assign) and first.value in ctx.last_checkpoint_names:
        # ModelCheckpoint(prefix=P, save_last=True): 1.x named the last checkpoint "P-last" too.
        name = ctx.assigned_calls[first.value]  # type: ignore[index]
        last = last_name_statement(name, ctx.last_checkpoint_names[first.value])  # type: ignore[index]
        return cst.FlattenSentinel([updated, last])
    if isinstance(first, cst.Assign) and first.value in ctx.facts.resume_vars:
        # trainer = Trainer(..., resume_from_checkpoint=X) where another construction of trainer does not resume:
        # the checkpoint goes into a variable beside each construction (X, or None), which the fits pass as
        # ckpt_path= (scopes.py's FileFacts._close).
        variable, value = ctx.facts.resume_vars[first.value]  # type: ignore[index]
        written = "None" if value is None else _code(value)
        ctx.change(original, "trainer-resume", f"{variable} = {written} beside the Trainer, for fit(ckpt_path=...)")
        beside = cst.parse_statement(f"{variable} = {written}")
        return cst.FlattenSentinel([updated, beside.with_changes(trailing_whitespace=updated.trailing_whitespace)])
    if (
        isinstance(first, cst.Expr)
        and isinstance(first.value, cst.Call)
        and first.value in ctx.tune.tunes
        and isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
    ):
        # trainer.tune(model, dm) -> the Tuner calls the Trainer's flags asked for (tuner.py).
        statements = tune_statements(small.value, ctx.tune.tunes[first.value], ctx.tune.guards.get(first.value))
        ctx.add_import(f"{ctx.namespace}.tuner", "Tuner", None)
        ctx.change(original, "tuner-flags", f"{_code(first.value)} -> Tuner(...) calls")
        statements[0] = statements[0].with_changes(leading_lines=updated.leading_lines)
        return cst.FlattenSentinel(statements)
    # self.hparams = hparams -> self.save_hyperparameters(hparams): hparams is read-only in 2.x.
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and _dotted(small.targets[0].target) == "self.hparams"
        and ctx.class_depth
        and ctx.lightning_class[-1]
    ):
        ctx.change(original, "hparams-assign", "self.hparams = ... -> self.save_hyperparameters(...)")
        call = cst.parse_statement(f"self.save_hyperparameters({_code(small.value)})")
        return call.with_changes(leading_lines=updated.leading_lines)
    # settings["gpus"] = 2 on a dict that reaches a Trainer: each 1.x key rewritten as if passed to the call.
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Subscript)
        and isinstance(small.targets[0].target.value, cst.Name)
        and ctx.is_trainer_dict(small.targets[0].target.value.value)
    ):
        return subscript_assign(ctx, original, updated, small)
    # settings.update(gpus=2) / settings.update({"gpus": 2})
    if (
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and isinstance(small.value.func, cst.Attribute)
        and small.value.func.attr.value == "update"
        and isinstance(small.value.func.value, cst.Name)
        and ctx.is_trainer_dict(small.value.func.value.value)
    ):
        return updated.with_changes(body=[small.with_changes(value=dict_update(ctx, original, small.value))])
    return updated


def subscript_assign(
    ctx: UpgradeContext, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine, small: cst.Assign
) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
    target = small.targets[0].target
    assert isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name)
    element = target.slice[0].slice if len(target.slice) == 1 else None
    key = _string(element.value) if isinstance(element, cst.Index) else None
    if key is None:
        return updated
    inner = rewrite_trainer_args(trainer_args(ctx, [(key, small.value, None)]))
    emit(ctx, original, inner)
    if not inner.changes:
        return updated
    name = target.value.value
    lines = [
        cst.parse_statement(f"{name}[{_quoted(k).value}] = {_code(v)}")
        for k, v, _ in inner.items
        if not (k == "callbacks" and isinstance(v, cst.List))
    ]
    for k, v, _ in inner.items:
        if k == "callbacks" and isinstance(v, cst.List):  # a callback added by the rewrite: onto the dict's list
            lines.append(cst.parse_statement(f'{name}.setdefault("callbacks", []).extend({_code(v)})'))
    if not lines:
        lines = [cst.parse_statement("pass")]
    lines[0] = lines[0].with_changes(leading_lines=updated.leading_lines)
    lines[-1] = lines[-1].with_changes(trailing_whitespace=updated.trailing_whitespace)
    return cst.FlattenSentinel(lines)


def dict_update(ctx: UpgradeContext, original: cst.SimpleStatementLine, update: cst.Call) -> cst.Call:
    """``settings.update(gpus=2)`` / ``settings.update({"gpus": 2})`` on a dict that reaches a Trainer: its settings
    rewritten as a dict's."""
    if len(update.args) == 1 and update.args[0].keyword is None and is_dict_builder(update.args[0].value):
        new = rewrite_dict(ctx, update.args[0].value, original)
        if new is not None:
            update = update.with_changes(args=[update.args[0].with_changes(value=new)])
    elif update.args and all(a.keyword is not None for a in update.args):
        new = rewrite_dict(ctx, cst.Call(func=cst.Name("dict"), args=update.args), original)
        if isinstance(new, cst.Call):  # dict(...) in, dict(...) out
            update = update.with_changes(args=new.args)
    return update
