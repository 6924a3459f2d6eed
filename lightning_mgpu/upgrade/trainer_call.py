"""The Trainer-call family: a ``Trainer(...)`` call (or one under another name: ``cls(...)`` in a classmethod and
``super().__init__(...)`` in ``__init__`` of a Trainer subclass, :func:`~lightning_mgpu.upgrade.scopes.
subclass_construction`) and a dict of Trainer settings (a literal or ``dict(...)``, splatted
into a call or assigned to a name that reaches one) rewritten through
:func:`~lightning_mgpu.upgrade.trainer_rewrite.rewrite_trainer_args`, with what this file says about each value;
the settings that values this tool cannot read decide with moved into ``legacy_trainer_kwargs(...)``
(:mod:`~lightning_mgpu.upgrade.translate_args`); what the module-level plans took out of the call (track_grad_norm,
the tuner flags, gradient clipping under manual optimization) left out; and the rewrite's findings emitted.

Rule ids: tuner-flags, tuner-flags-unused, manual-optimization, trainer-args-translated, trainer-resume
(legacy_resume), trainer-splat-translated; TODOs trainer-resume, trainer-splat; notes tuner-flags-unused,
ddp-cpu-gradient-mean (and the rules of :func:`~lightning_mgpu.upgrade.trainer_rewrite.rewrite_trainer_args`, emitted
here).
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.manual_optimization import CLIP_ARGS
from lightning_mgpu.upgrade.nodes import code as _code
from lightning_mgpu.upgrade.nodes import commas as _commas
from lightning_mgpu.upgrade.nodes import dict_commas as _dict_commas
from lightning_mgpu.upgrade.nodes import keyword_arg as _keyword_arg
from lightning_mgpu.upgrade.nodes import kwarg as _kwarg
from lightning_mgpu.upgrade.nodes import quoted as _quoted
from lightning_mgpu.upgrade.nodes import string as _string
from lightning_mgpu.upgrade.nodes import without_comment as _without_comment
from lightning_mgpu.upgrade.scopes import dotted, is_dict_builder, translates_at_run_time
from lightning_mgpu.upgrade.scopes import literal as _literal
from lightning_mgpu.upgrade.trainer_devices import may_hold_strategy
from lightning_mgpu.upgrade.trainer_kwargs import TrainerArgs
from lightning_mgpu.upgrade.trainer_rewrite import rewrite_trainer_args
from lightning_mgpu.upgrade.translate_args import (
    LEAVE_THE_CALL,
    may_be_ddp_cpu,
    meaningless,
    settles,
    split,
    translation,
)
from lightning_mgpu.upgrade.tuner import FLAGS as TUNER_FLAGS


def trainer_args(
    ctx: UpgradeContext,
    items: list[tuple[str, cst.BaseExpression, cst.Arg | None]],
    translated: frozenset[str] = frozenset(),
) -> TrainerArgs:
    """Keyword arguments to rewrite, with what this file says about their values (and the keys in the call's
    ``**legacy_trainer_kwargs(...)``, where it has one)."""
    scope = ctx.scopes[-1]
    return TrainerArgs(
        items,
        translated=translated,
        resolve=lambda node: ctx.facts.values(node, scope),
        assigned=lambda node: ctx.facts.assigned(node, scope),
        strategy_var=lambda node: isinstance(node, cst.Name) and ctx.is_strategy_var(node.value),
        namespace=ctx.namespace,
        spells=ctx.facts.spells,
    )


def trainer_call(ctx: UpgradeContext, original: cst.Call, updated: cst.Call) -> cst.Call:
    positional = [a for a in updated.args if a.keyword is None and not a.star]
    keywords = [a for a in updated.args if a.keyword is not None]
    stars = [a for a in updated.args if a.star]
    items: list[tuple[str, cst.BaseExpression, cst.Arg | None]] = [
        (a.keyword.value, a.value, a) for a in keywords if a.keyword is not None
    ]
    kept = _left_to_plans(ctx, original, items)
    # A call whose splats go into legacy_trainer_kwargs (_splats): a setting beside them whose value this tool
    # cannot read and that the translation reads as 1.x did (progress_bar_refresh_rate=rate, terminate_on_nan=flag)
    # goes into that translation as a keyword, instead of its TODO.
    beside = [item for item in kept if item[0] in BESIDE_SPLATS and _literal(item[1]) is ...]
    if not beside or not _translated_splats(ctx, original, updated):
        beside = []
    kept = [item for item in kept if all(item is not other for other in beside)]
    trainer = rewrite_trainer_args(trainer_args(ctx, kept, _translated_keys(stars)))
    plugins = trainer.get("plugins")  # still plugins= after the rewrite: not every value is a strategy
    translated: cst.Arg | None = None
    if (
        settles(trainer.todos)
        and not stars
        and not translates_at_run_time(original)
        and ("plugins" not in {key for key, _, _ in kept} or plugins is not None)
        and not literal_conflict(ctx, kept)
    ):
        # Values this tool cannot read (accelerator=args.accelerator beside gpus=args.gpus): the settings they
        # decide with move into legacy_trainer_kwargs(...), translated when the Trainer is built
        # (translate_args.py). A plugins= the rewrite left as it was (plugins=args.plugins: a command-line name or a
        # list, whatever the run gives) moves with them: the translation takes a strategy out of it as 1.x's
        # accelerator connector did and passes the other plugins on.
        also = ("plugins",) if plugins is not None else ()
        trainer, expression = moved_into_translation(ctx, kept, updated.args, also=also)
        translated = cst.Arg(star="**", value=expression)
    elif (
        settles(trainer.todos)
        and not stars
        and not translates_at_run_time(original)
        and "plugins" in {key for key, _, _ in kept}
        and not trainer.has("plugins")
        and not literal_conflict(ctx, trainer.items)
    ):
        # plugins=DDPPlugin(...) beside values this tool cannot read: the rewrite above turned the plugin into
        # strategy=DDPStrategy(...), and a second run would then move that strategy into legacy_trainer_kwargs(...)
        # with the rest (the 2.x spelling, which the translation takes as given). Done here, from the rewritten
        # settings, the first run writes what the second would (rule trainer-args-translated), and the TODOs the
        # translation settles are not written.
        first = trainer
        trainer, expression = moved_into_translation(ctx, first.items, updated.args)
        trainer.changes[:0] = first.changes
        trainer.todos[:0] = [t for t in first.todos if rules.rule_of(t) in LEAVE_THE_CALL]
        trainer.notes[:0] = first.notes
        trainer.imports[:0] = first.imports
        translated = cst.Arg(star="**", value=expression)
    elif (
        not stars
        and not translates_at_run_time(original)
        and plugins is not None
        and may_hold_strategy(plugins, ctx.facts.assigned(plugins, ctx.scopes[-1]))
        and not literal_conflict(ctx, kept)
    ):
        # plugins=plugins, a name given DDPPlugin(...) in one branch and None or a command-line value in others:
        # 2.x's Trainer refuses a strategy in plugins=, and whether the name holds one only the run knows. plugins=
        # moves into legacy_trainer_kwargs(...) with the settings that decide the strategy and the devices (in their
        # 1.x spelling), which moves a strategy it holds to strategy= as 1.x's accelerator connector took it
        # (rule trainer-args-translated). Where every assignment gives a strategy, the rewrite above has made it
        # strategy= already, and this branch is not taken.
        trainer, expression = moved_into_translation(ctx, kept, updated.args, also=("plugins",))
        translated = cst.Arg(star="**", value=expression)
    resume: cst.BaseExpression | None = None  # the checkpoint the Trainer itself keeps (legacy_resume)
    if any(key == "resume_from_checkpoint" for key, _, _ in trainer.items):
        value = trainer.get("resume_from_checkpoint")
        trainer.remove("resume_from_checkpoint")
        if original in ctx.facts.resolved_resume:
            pass  # moved to the fits of its name in this function (scopes.py; calls.py writes it)
        elif isinstance(original.func, cst.Attribute) and original.func.attr.value == "__init__":
            # super().__init__(..., resume_from_checkpoint=X) in a Trainer subclass: the call returns None, so
            # there is no object to wrap here; a person passes X on (or fits with ckpt_path=X).
            trainer.todo("trainer-resume", value=_code(value))  # type: ignore[arg-type]
        else:
            # Decision: the fits are not this function's (the Trainer is returned, handed on, also given something
            # else, or fitted where a variable cannot follow): the checkpoint stays with the Trainer object,
            # legacy_resume(Trainer(...), X), and its next fit without a ckpt_path resumes from it, once, as
            # 1.4-1.9's did, wherever that fit is (lightning_mgpu.upgrade.legacy_resume).
            resume = value
            trainer.imports.append(("lightning_mgpu.upgrade.legacy_resume", "legacy_resume"))
            written = _code(value)  # type: ignore[arg-type]
            trainer.change("trainer-resume", f"resume_from_checkpoint={written} -> legacy_resume(Trainer(...), ...)")
    new_stars = _splats(ctx, original, updated, trainer, stars, beside)
    strategy = trainer.get("strategy")
    if strategy is not None and _string(strategy) in rules.BUNDLE_STRATEGY_NAMES:
        ctx.needs_bundle_import = True
    emit(ctx, original, trainer)
    if not trainer.changes and new_stars == stars and len(trainer.items) == len(items):
        return updated
    new_args = positional + [_keyword_arg(key, value, like) for key, value, like in trainer.items] + new_stars
    if translated is not None:  # last, where the call's closing parenthesis was
        if new_args:
            translated = translated.with_changes(whitespace_after_arg=new_args[-1].whitespace_after_arg)
            new_args[-1] = new_args[-1].with_changes(whitespace_after_arg=cst.SimpleWhitespace(""))
        new_args.append(translated)
    rewritten = updated.with_changes(args=_commas(new_args, updated.args))
    if resume is not None:
        return cst.Call(func=cst.Name("legacy_resume"), args=[cst.Arg(rewritten), cst.Arg(resume)])
    return rewritten


def _left_to_plans(
    ctx: UpgradeContext, original: cst.Call, items: list[tuple[str, cst.BaseExpression, cst.Arg | None]]
) -> list[tuple[str, cst.BaseExpression, cst.Arg | None]]:
    """``items`` without the arguments a module-level plan took out of the call: the tuner flags (tuner.py),
    gradient clipping under manual optimization (manual_optimization.py)."""
    kept = items
    tuner_flags = [
        (key, value)
        for key, value, _ in kept
        if key in TUNER_FLAGS and (original in ctx.tune.unused or _literal(value) in (False, None, 0, ""))
    ]
    if original in ctx.tune.moved or tuner_flags:
        # auto_lr_find/auto_scale_batch_size: only tune() read them (tuner.py). Moved to the tune() statement,
        # or dropped where nothing could run them.
        kept = [item for item in kept if item[0] not in TUNER_FLAGS]
        if original in ctx.tune.moved:
            ctx.change(original, "tuner-flags", "auto_lr_find/auto_scale_batch_size -> the Tuner calls of tune()")
        else:
            ctx.note(original, rules.note_text("tuner-flags-unused"))
            written = ", ".join(f"{key}={_code(value)}" for key, value in tuner_flags)
            ctx.change(original, "tuner-flags-unused", f"{written} dropped (nothing runs them)")
    if ctx.manual.clip is not None and any(key in CLIP_ARGS for key, _, _ in kept):
        kept = [item for item in kept if item[0] not in CLIP_ARGS]  # the module clips: manual_optimization.py
        ctx.change(original, "manual-optimization", "gradient_clip_val -> the module's clip_gradients")
    return kept


def _translated_keys(stars: list[cst.Arg]) -> frozenset[str]:
    """The keywords of a ``**legacy_trainer_kwargs(...)`` among a call's splats (an earlier run's translation)."""
    return frozenset(
        arg.keyword.value
        for star in stars
        if isinstance(star.value, cst.Call) and (dotted(star.value.func) or "").endswith("legacy_trainer_kwargs")
        for arg in star.value.args
        if arg.keyword is not None
    )


#: Settings that legacy_trainer_kwargs reads as 1.x's Trainer did whatever their value: beside splats that go into
#: the translation, one whose value this tool cannot read goes in with them (trainer_call).
BESIDE_SPLATS = ("progress_bar_refresh_rate", "weights_summary", *rules.FLAG_CALLBACKS)


def _translated_splats(ctx: UpgradeContext, original: cst.Call, updated: cst.Call) -> bool:
    """Whether :func:`_splats` hands the call's splats to legacy_trainer_kwargs (every unknown one is a ``**``)."""
    unknown = ctx.facts.unknown_splat_args.get(original, [])
    return bool(unknown) and all(i < len(updated.args) and updated.args[i].star == "**" for i in unknown)


def _splats(
    ctx: UpgradeContext,
    original: cst.Call,
    updated: cst.Call,
    trainer: TrainerArgs,
    stars: list[cst.Arg],
    beside: list[tuple[str, cst.BaseExpression, cst.Arg | None]],
) -> list[cst.Arg]:
    """The call's ``*``/``**`` arguments rewritten: a literal dict of settings as a dict, one this tool cannot read
    translated at run time (its callbacks joined by the call's own ``callbacks=``, taken out of ``trainer``, and the
    settings ``beside`` it with it)."""
    # Literal dicts splatted into the call: Trainer(**{"gpus": 2}).
    new_stars = []
    for star in stars:
        if star.star == "**" and is_dict_builder(star.value) and isinstance(star.value, cst.Dict):
            inner = rewrite_dict(ctx, star.value, original)
            if inner is not None:
                star = star.with_changes(value=inner)
        new_stars.append(star)
    # Settings splatted from where this tool cannot read them (a config file, a function's **kwargs): 1.x keys
    # in them are translated at run time (trainer-splat-translated). Two or more such splats are translated
    # together, legacy_trainer_kwargs(a, **b): a 1.x key in one and its 2.x key in the other still meet, and a key
    # in both is refused (ValueError) where the 1.x call refused it (TypeError).
    unknown = ctx.facts.unknown_splat_args.get(original, [])
    if _translated_splats(ctx, original, updated):
        target, *more = [updated.args[i] for i in sorted(unknown)]
        callbacks = trainer.get("callbacks")
        trainer.remove("callbacks")  # passed to the translation: a 1.x key's callback joins them there
        keywords = [(key, value) for key, value, _ in beside]
        merged = legacy_kwargs_call(ctx, target.value, callbacks, [star.value for star in more], keywords)
        new_stars = [
            star.with_changes(value=merged) if star is target else star
            for star in new_stars
            if not any(star is other for other in more)
        ]
        spelled = ", ".join([f"**{_code(star.value)}" for star in [target, *more]] + [key for key, _ in keywords])
        trainer.change("trainer-splat-translated", f"Trainer({spelled}) -> legacy_trainer_kwargs")
        ctx.add_import("lightning_mgpu.upgrade.trainer_args", "legacy_trainer_kwargs", None)
    elif unknown:
        trainer.todo("trainer-splat", value=_code(original.args[max(unknown)].value))  # the last one
    return new_stars


def moved_into_translation(
    ctx: UpgradeContext,
    items: list[tuple[str, cst.BaseExpression, cst.Arg | None]],
    originals: Any,
    also: tuple[str, ...] = (),
) -> tuple[Any, cst.BaseExpression]:
    """The Trainer settings of ``items`` that the values this tool cannot read decide with, moved into a
    ``legacy_trainer_kwargs(...)`` call (translated when the Trainer is built): the rewrite of the rest, with the
    change recorded, and that call, written in the style of ``originals`` (a call's arguments or a dict's
    elements), with the settings ``also`` names moved too. Shared by a Trainer call and a settings dict (rule
    trainer-args-translated)."""
    moved, rest = split(items, also)
    trainer = rewrite_trainer_args(trainer_args(ctx, rest))
    separator = next((_without_comment(e.comma) for e in originals[:-1] if isinstance(e.comma, cst.Comma)), None)
    if may_be_ddp_cpu(moved, trainer.resolve):
        trainer.note("ddp-cpu-gradient-mean")
    trainer.change(
        "trainer-args-translated",
        f"{', '.join(key for key, _, _ in moved)} -> **legacy_trainer_kwargs(...) (translated at run time)",
    )
    ctx.add_import("lightning_mgpu.upgrade.trainer_args", "legacy_trainer_kwargs", None)
    return trainer, translation(moved, ctx.namespace, separator)


def literal_conflict(ctx: UpgradeContext, items: list[tuple[str, cst.BaseExpression, cst.Arg | None]]) -> bool:
    """Whether the literal settings among ``items`` conflict on their own (accelerator="ddp" beside
    strategy="ddp_spawn"), or one means nothing (progress_bar_refresh_rate=-1): a person's choice, which a
    translation at run time would only turn into an error."""
    literal = [item for item in items if _literal(item[1]) is not ... or isinstance(item[1], cst.List)]
    todos = rewrite_trainer_args(trainer_args(ctx, literal)).todos
    return any(rules.rule_of(text) == "trainer-conflict" for text in todos) or meaningless(items)


def legacy_kwargs_call(
    ctx: UpgradeContext,
    settings: cst.BaseExpression,
    callbacks: cst.BaseExpression | None,
    more: list[cst.BaseExpression] | None = None,
    keywords: list[tuple[str, cst.BaseExpression]] | None = None,
) -> cst.Call:
    """``legacy_trainer_kwargs(settings[, **more...][, key=value...][, namespace=...][, callbacks=...])``: the other
    settings splatted beside ``settings`` and the call's settings ``keywords`` (translated with them), the file's
    Lightning tree (for the callbacks a translation adds) where it is not ``lightning.pytorch``, and the call's own
    ``callbacks=``."""
    args = [cst.Arg(settings)] + [cst.Arg(value, star="**") for value in more or []]
    args += [_kwarg(key, value) for key, value in keywords or []]
    if ctx.namespace != "lightning.pytorch":
        args.append(_kwarg("namespace", _quoted(ctx.namespace)))
    if callbacks is not None:
        args.append(_kwarg("callbacks", callbacks))
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    args = [arg.with_changes(comma=comma) for arg in args[:-1]] + args[-1:]
    return cst.Call(func=cst.Name("legacy_trainer_kwargs"), args=args)


def emit(ctx: UpgradeContext, node: cst.CSTNode, trainer: TrainerArgs) -> None:
    for rule, change in trainer.changes:
        ctx.change(node, rule, change)
    for todo in trainer.todos:
        ctx.todo(node, todo)
    for note in trainer.notes:
        ctx.note(node, note)
    for module, name in trainer.imports:
        ctx.add_import(module, name, None)
    if any(_string(v) in rules.BUNDLE_STRATEGY_NAMES for k, v, _ in trainer.items if k == "strategy"):
        ctx.needs_bundle_import = True
    for key, value, _ in trainer.items:
        if key == "strategy" and any(v in rules.BUNDLE_STRATEGY_NAMES for v in trainer.resolve(value) or ()):
            ctx.needs_bundle_import = True  # strategy=args.backend with "dp" among its values


def rewrite_dict(ctx: UpgradeContext, node: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression | None:
    """A dict literal or ``dict(...)`` of Trainer settings, rewritten (None: nothing to change). Its findings go to
    the statement being visited."""
    # is_dict_builder admitted plain elements with string keys, or keyword arguments only.
    items: list[tuple[str, cst.BaseExpression, cst.Arg | None]] = []
    translated: list[cst.BaseExpression] = []  # **legacy_trainer_kwargs(...) already in it
    if isinstance(node, cst.Dict):
        plain = [e for e in node.elements if isinstance(e, cst.DictElement)]
        items = [(_string(e.key) or "", e.value, None) for e in plain]
        translated = [e.value for e in node.elements if isinstance(e, cst.StarredDictElement)]
    elif isinstance(node, cst.Call):
        items = [(a.keyword.value, a.value, a) for a in node.args if a.keyword is not None]
        translated = [a.value for a in node.args if a.star == "**"]
    inner = rewrite_trainer_args(trainer_args(ctx, items))
    if (
        settles(inner.todos)
        and not translated
        and "plugins" not in {key for key, _, _ in items}
        and not literal_conflict(ctx, items)
    ):
        # Values this tool cannot read: the settings they decide with are translated at run time (as in a call).
        originals = node.elements if isinstance(node, cst.Dict) else node.args  # type: ignore[attr-defined]
        inner, expression = moved_into_translation(ctx, items, originals)
        translated = [expression]
    if any(k == "resume_from_checkpoint" for k, _, _ in inner.items):
        inner.todo("trainer-resume", value=_code(inner.get("resume_from_checkpoint")))  # type: ignore[arg-type]
    emit(ctx, at, inner)
    if not inner.changes and len(inner.items) == len(items):
        return None
    if isinstance(node, cst.Dict):
        elements: list[cst.BaseDictElement] = [cst.DictElement(key=_quoted(k), value=v) for k, v, _ in inner.items]
        elements += [cst.StarredDictElement(value=value) for value in translated]
        return node.with_changes(elements=_dict_commas(elements, node.elements))
    args = [_keyword_arg(k, v, like) for k, v, like in inner.items]
    args += [cst.Arg(star="**", value=value) for value in translated]
    return node.with_changes(args=_commas(args, node.args))  # type: ignore[attr-defined]
