"""The libcst transformer behind ``lightning-mgpu upgrade``: one source file in, the 2.x source and a list of what
changed and what needs a hand out. Comments and formatting survive (a concrete syntax tree, not an AST).

The rules are in :mod:`lightning_mgpu.upgrade.rules`. Each rewrite is idempotent: its input spelling is gone from its
output, and a TODO comment is added only where the same comment is not there yet.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.checkpoint_prefix import last_name_statement, moved_prefix
from lightning_mgpu.upgrade.conflicts import drop_default, plugin_refines
from lightning_mgpu.upgrade.grad_norm import GradNormPlan, add_hook
from lightning_mgpu.upgrade.grad_norm import plan as grad_norm_plan
from lightning_mgpu.upgrade.hooks import (
    HookShape,
    convert_epoch_ends,
    convert_log_returns,
    convert_renamed_hooks,
    epoch_end_plan,
    with_comments,
    wrap_returns,
)
from lightning_mgpu.upgrade.leftover_spellings import (
    RESULT_CLASSES,
    drop_eval_optimizer_idx,
    is_accelerator_connector,
    legacy_keys,
    result_class,
)
from lightning_mgpu.upgrade.manual_optimization import CLIP_ARGS, ManualPlan
from lightning_mgpu.upgrade.manual_optimization import convert as manual_convert
from lightning_mgpu.upgrade.manual_optimization import convert_subclass as manual_convert_subclass
from lightning_mgpu.upgrade.manual_optimization import plan as manual_plan
from lightning_mgpu.upgrade.metrics import class_counts, with_inferred_task, with_task
from lightning_mgpu.upgrade.removed_names import epoch_output_annotation, test_tube_arguments, trainer_attribute
from lightning_mgpu.upgrade.scopes import LIST, FileFacts, Scope, is_dict_builder, translates_at_run_time
from lightning_mgpu.upgrade.scopes import dotted as _dotted
from lightning_mgpu.upgrade.scopes import is_trainer_call as _is_trainer_call
from lightning_mgpu.upgrade.scopes import literal as _literal
from lightning_mgpu.upgrade.translate_args import may_be_ddp_cpu, meaningless, settles, split, translation
from lightning_mgpu.upgrade.traverse import read_only_visit
from lightning_mgpu.upgrade.tuner import FLAGS as TUNER_FLAGS
from lightning_mgpu.upgrade.tuner import TunePlan, tune_plan, tune_statements, tuner_call, tuner_owner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Finding:
    """One change made, or one thing left for a person (``todo``), at a line of the original file."""

    line: int
    message: str
    todo: bool = False
    note: bool = False  # advice about code that keeps working (nothing to change)
    rule: str = ""  # the rule's id (a TODO's or a note's is read from its text when not given)
    cell: int | None = None  # in a notebook: the cell, counting every cell from 1

    def __post_init__(self) -> None:
        if not self.rule and (self.todo or self.note):
            object.__setattr__(self, "rule", rules.rule_of(self.message))


@dataclass
class FileResult:
    """The upgraded source of one file and what happened to it."""

    source: str
    findings: list[Finding] = field(default_factory=list)
    #: Names this file's imports renamed (``DDPPlugin`` -> ``DDPStrategy``): a notebook's later cells rename their uses.
    renamed: dict[str, tuple[str, str, dict[str, str]]] = field(default_factory=dict)

    @property
    def changes(self) -> list[Finding]:
        return [f for f in self.findings if not f.todo and not f.note]

    @property
    def todos(self) -> list[Finding]:
        return [f for f in self.findings if f.todo]

    @property
    def notes(self) -> list[Finding]:
        return [f for f in self.findings if f.note]


# ---------------------------------------------------------------------------------------------------------------
# Small helpers on nodes


def _string(node: cst.BaseExpression) -> str | None:
    """The value of a plain string literal, else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _node_kind(node: cst.CSTNode) -> str:
    """What a node is, for a TODO: ``Trainer(...)`` for a call, ``def name`` / ``class Name``, else its libcst type."""
    if isinstance(node, cst.Call):
        return f"{(_dotted(node.func) or 'a call').rsplit('.', 1)[-1]}(...)"
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return f"{'def' if isinstance(node, cst.FunctionDef) else 'class'} {node.name.value}"
    return type(node).__name__


def _quoted(value: str) -> cst.SimpleString:
    return cst.SimpleString(f'"{value}"')


def _alias_of(alias: cst.ImportAlias) -> str | None:
    """The ``as`` name of an import (always a plain name in an import; libcst's type also allows tuples)."""
    return alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None


#: torchmetrics <= 0.10 keywords that 0.11 removed -> the values that say nothing beside task="multiclass".
#: compute_on_step=False only made forward() return None instead of the batch's value: the metric is the same.
LEGACY_METRIC_ARGS: dict[str, tuple[Any, ...]] = {
    "multiclass": (True,),
    "is_multiclass": (True,),
    "mdmc_average": ("global",),
    "subset_accuracy": (False,),
    "compute_on_step": (True, False),
}


def _kwarg(name: str, value: cst.BaseExpression, like: cst.Arg | None = None) -> cst.Arg:
    """A keyword argument, spaced like ``like`` (``x=1`` or ``x = 1``)."""
    equal = (
        like.equal
        if like is not None and like.keyword is not None
        else cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    )
    return cst.Arg(keyword=cst.Name(name), value=value, equal=equal)


def _without_comment(comma: Any) -> Any:
    """``comma`` without a trailing comment (``x=1,  # why``), keeping its line break and indentation."""
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace) and after.first_line.comment is not None:
        return comma.with_changes(
            whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(newline=after.first_line.newline))
        )
    return comma


# ---------------------------------------------------------------------------------------------------------------
# Trainer arguments

#: What a value may hold, as far as the file tells: a set of literals, or None when it cannot be read.
Resolver = Callable[[cst.BaseExpression], "set[Any] | None"]


def _no_resolver(node: cst.BaseExpression) -> set[Any] | None:
    literal = _literal(node)
    return None if literal is ... else {literal}


@dataclass
class _TrainerArgs:
    """A Trainer call's keyword arguments as ``(name, value, original Arg)``, rewritten in place."""

    items: list[tuple[str, cst.BaseExpression, cst.Arg | None]]
    changes: list[tuple[str, str]] = field(default_factory=list)  # (rule, what changed)
    todos: list[str] = field(default_factory=list)  # comment texts, "TODO(lightning-mgpu:rule): ..."
    notes: list[str] = field(default_factory=list)  # comment texts, "NOTE(lightning-mgpu:rule): ..."
    resolve: Resolver = _no_resolver
    assigned: Callable[[cst.BaseExpression], list[cst.BaseExpression] | None] = lambda node: None
    strategy_var: Callable[[cst.BaseExpression], bool] = lambda node: False
    namespace: str = "pytorch_lightning"
    imports: list[tuple[str, str]] = field(default_factory=list)  # (module, name) the rewrite needs

    def get(self, name: str) -> cst.BaseExpression | None:
        return next((value for key, value, _ in self.items if key == name), None)

    def has(self, name: str) -> bool:
        return any(key == name for key, _, _ in self.items)

    def remove(self, name: str) -> None:
        self.items = [item for item in self.items if item[0] != name]

    def replace(self, name: str, new: list[tuple[str, cst.BaseExpression]]) -> None:
        """Put ``new`` where ``name`` was (or at the end), each new key once."""
        index = next((i for i, item in enumerate(self.items) if item[0] == name), len(self.items))
        like = self.items[index][2] if index < len(self.items) else None
        self.items = [item for item in self.items if item[0] != name]
        for offset, (key, value) in enumerate(new):
            self.items.insert(index + offset, (key, value, like))

    def set(self, name: str, value: cst.BaseExpression, replacing: str) -> bool:
        """Set ``name`` in ``replacing``'s place and drop ``replacing``. A different value already set is a TODO, and
        then nothing changes."""
        existing = self.get(name)
        if existing is not None and _code(existing) != _code(value):
            self.todo("trainer-conflict", old=replacing, value=_code(value), new=name)
            return False
        if existing is not None:
            self.remove(replacing)
        else:
            self.replace(replacing, [(name, value)])
        return True

    def change(self, rule: str, message: str) -> None:
        """A rewrite made, under ``rule`` (an id of :data:`rules.RULES`)."""
        self.changes.append((rule, message))

    def todo(self, rule: str, **values: Any) -> None:
        self.todos.append(rules.todo_text(rule, **values))

    def note(self, rule: str) -> None:
        self.notes.append(rules.note_text(rule))

    def add_callback(self, call: str, name: str, module: str, replacing: str, bundle: bool = False) -> bool:
        """Append ``call`` (a callback built from ``name``, imported from ``module`` below the namespace, or below
        the bundle's package for that namespace where ``bundle``) to ``callbacks=``, in ``replacing``'s place; False
        where ``callbacks=`` is something this tool cannot extend."""
        existing = self.get("callbacks")
        element = cst.Element(cst.parse_expression(call))
        if existing is None:
            self.replace(replacing, [("callbacks", cst.List([element]))])
        elif isinstance(existing, cst.List):
            elements = list(existing.elements)
            if elements and elements[-1].comma is cst.MaybeSentinel.DEFAULT:
                elements[-1] = elements[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            self.replace("callbacks", [("callbacks", existing.with_changes(elements=[*elements, element]))])
            self.remove(replacing)
        elif self.resolve(existing) is not None and all(v == LIST for v in self.resolve(existing) or ()):
            starred = cst.StarredElement(existing, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            self.replace("callbacks", [("callbacks", cst.List([starred, element]))])
            self.remove(replacing)
        else:
            return False
        root = rules.BUNDLE_FOR_NAMESPACE[self.namespace] if bundle else self.namespace
        self.imports.append((f"{root}.{module}", name))
        return True


def _is_strategy_object(node: cst.BaseExpression, assigned: list[cst.BaseExpression] | None) -> bool:
    """A call of a 1.x training-type plugin or a strategy class, or a name every assignment gave one."""
    calls = [node] if isinstance(node, cst.Call) else (assigned or [])
    if not calls or not all(isinstance(c, cst.Call) for c in calls):
        return False
    names = [(_dotted(c.func) or "").rsplit(".", 1)[-1] for c in calls]  # type: ignore[attr-defined]
    return all(
        n in rules.REMOVED_CLASSES or n in rules.LIGHTNING_PLUGINS or n.endswith("Strategy") or n.endswith("DDPPlugin")
        for n in names
    )


def _looks_like_a_pattern(node: cst.BaseExpression) -> bool:
    """``os.path.join(out, "{epoch}-{val_loss:.2f}")`` or an f-string with ``{epoch}``: a file pattern, not a folder."""
    code = _code(node)
    return "{epoch" in code or "{step" in code or "{val" in code or ".ckpt" in code


def _strategy_value(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``node`` with each 1.x strategy string mapped to its 2.x name and None to "auto", where every branch of it is a
    literal (a string, None, or a conditional of those); None where some branch is not."""
    if isinstance(node, cst.IfExp):
        body, orelse = _strategy_value(node.body), _strategy_value(node.orelse)
        if body is None or orelse is None:
            return None
        return body if _code(body) == _code(orelse) else node.with_changes(body=body, orelse=orelse)
    value = _literal(node)
    if value is None:
        return _quoted("auto")
    if isinstance(value, str) and value in rules.STRATEGY_STRINGS:
        return _quoted(rules.STRATEGY_STRINGS[value])
    return None


def _branches(node: cst.BaseExpression) -> set[Any]:
    """The literals a value or a conditional of values can be (``{...}`` where a branch is not a literal)."""
    if isinstance(node, cst.IfExp):
        return _branches(node.body) | _branches(node.orelse)
    return {_literal(node)}


def _strategy_candidates(values: set[Any] | None) -> bool:
    """Whether every value a setting may hold is a 1.x strategy name or None, and one of them is a name."""
    if not values:
        return False
    return all(v is None or v in rules.STRATEGY_STRINGS for v in values) and any(v is not None for v in values)


def _accelerator_for(
    node: cst.BaseExpression, cpu_devices: cst.BaseExpression | None = None
) -> tuple[cst.BaseExpression, cst.BaseExpression]:
    """``gpus=<non-literal>`` keeps its CPU path: ``accelerator="gpu" if X else "cpu"``, ``devices=X or 1``. A
    conditional with literal branches is rewritten branch by branch instead (and folded where both agree)."""
    if isinstance(node, cst.IfExp) and _literal(node.body) is not ... and _literal(node.orelse) is not ...:

        def branch(value: cst.BaseExpression) -> tuple[str, cst.BaseExpression]:
            on = _literal(value) not in (0, None, "0", "", False)
            return ("gpu" if on else "cpu"), (value if on else (cpu_devices or cst.Integer("1")))

        (acc_a, dev_a), (acc_b, dev_b) = branch(node.body), branch(node.orelse)
        accelerator = (
            _quoted(acc_a) if acc_a == acc_b else node.with_changes(body=_quoted(acc_a), orelse=_quoted(acc_b))
        )
        devices = dev_a if _code(dev_a) == _code(dev_b) else node.with_changes(body=dev_a, orelse=dev_b)
        return accelerator, devices
    inner = node.deep_clone()
    if isinstance(inner, (cst.IfExp, cst.BooleanOperation, cst.Comparison, cst.UnaryOperation)):
        inner = inner.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    accelerator = cst.IfExp(
        test=inner,
        body=_quoted("gpu"),
        orelse=_quoted("cpu"),
        whitespace_before_if=cst.SimpleWhitespace(" "),
        whitespace_after_if=cst.SimpleWhitespace(" "),
        whitespace_before_else=cst.SimpleWhitespace(" "),
        whitespace_after_else=cst.SimpleWhitespace(" "),
    )
    # 1.x ran num_processes CPU processes when gpus was 0 or None (one without it).
    devices = cst.BooleanOperation(left=inner.deep_clone(), operator=cst.Or(), right=cpu_devices or cst.Integer("1"))
    return accelerator, devices


def rewrite_trainer_args(args: _TrainerArgs) -> _TrainerArgs:
    """Rewrite 1.x Trainer keyword arguments to 2.x (see docs/upgrade.md for the table)."""
    found: list[tuple[cst.BaseExpression, str, str]] = []  # (2.x strategy value, 1.x key, what the user wrote)
    accelerator: str | None = None
    # accelerator="ddp" / distributed_backend="dp" / plugins="ddp_sharded": strategy names in 1.x.
    for key in ("accelerator", "distributed_backend", "plugins"):
        value = args.get(key)
        if value is None:
            continue
        name = _string(value)
        if isinstance(value, cst.List) and len(value.elements) == 1:
            name = _string(value.elements[0].value)
            value = value.elements[0].value if name is None else value
        if name is None and key == "plugins" and _is_strategy_object(value, args.assigned(value)):
            # plugins=[DDPShardedPlugin()] / plugins=DDPPlugin(...) / plugins=plugin: a training-type plugin is a
            # strategy in 2.x.
            found.append((value, key, _code(args.get(key))))  # type: ignore[arg-type]
            continue
        if name in rules.STRATEGY_STRINGS:
            found.append((_quoted(rules.STRATEGY_STRINGS[name]), key, _code(value)))
            if name == "ddp_cpu":
                accelerator = "cpu"
                args.note("ddp-cpu-gradient-mean")
            continue
        if name is not None or key == "plugins":
            if key == "distributed_backend" and name is not None:
                args.todo("trainer-distributed-backend", value=name)
            continue
        # Not a literal: a conditional ('ddp' if n > 1 else None), a variable, or a command-line flag.
        values = args.resolve(value)
        mapped = _strategy_value(value)
        if args.strategy_var(value):
            found.append((value, key, _code(value)))  # its assignments are rewritten where they are
        elif mapped is not None and _strategy_candidates(values):
            found.append((mapped, key, _code(value)))
        elif _strategy_candidates(values) or (key == "distributed_backend" and values is None):
            # distributed_backend only ever held strategy names; None meant "no strategy", which 2.x spells "auto".
            if values is not None and "ddp_cpu" in values:
                args.todo("trainer-accelerator-unknown", value=_code(value))
                continue
            if values is None or None in values:
                mapped = cst.BooleanOperation(left=value, operator=cst.Or(), right=_quoted("auto"))
            else:
                mapped = value
            found.append((mapped, key, _code(value)))
        elif key == "accelerator" and (values is None or any(v in rules.STRATEGY_STRINGS for v in values)):
            args.todo("trainer-accelerator-unknown", value=_code(value))
    # accelerator="ddp", plugins=[DDPShardedPlugin()]: in 1.x the plugin object refined the backend string, so it
    # is the strategy and the string goes.
    if found and found[-1][1] == "plugins" and plugin_refines(found[-1][0]):  # an object, or "ddp_sharded"
        for strategy, key, written in found[:-1]:
            if _branches(strategy) <= {"ddp", "ddp_spawn", "auto"}:
                args.remove(key)
                args.change("trainer-strategy", f"{key}={written} dropped: the plugin object is the strategy")
        found = [f for f in found if f[1] == "plugins" or not _branches(f[0]) <= {"ddp", "ddp_spawn", "auto"}]
    # Two 1.x keys that both name a strategy: the last one moves, the others are left for a person with the same
    # TODO that a second run would give them.
    for strategy, key, _ in found[:-1]:
        args.todo("trainer-conflict", old=key, value=_code(strategy), new="strategy")
    if found:
        strategy, key, written = found[-1]
        drop_default(
            args, name="strategy", beside=key
        )  # strategy=None/"auto" beside accelerator="ddp": trainer-conflict-resolved
        if args.set("strategy", strategy, replacing=key):
            args.change("trainer-strategy", f"{key}={written} -> strategy={_code(strategy)}")
    # gpus=N / num_processes=N -> accelerator + devices.
    accelerator_node: cst.BaseExpression | None = None
    gpus = args.get("gpus")
    if gpus is not None:
        literal = _literal(gpus)
        if literal in (0, None, "0", "") and literal is not False:
            accelerator = accelerator or "cpu"
            args.remove("gpus")
            args.change("trainer-devices", f'gpus={_code(gpus)} -> accelerator="cpu"')
        elif literal is not ... or isinstance(gpus, cst.List):
            accelerator = "gpu"
            if args.set("devices", gpus, replacing="gpus"):
                args.change("trainer-devices", f"gpus={_code(gpus)} -> devices={_code(gpus)}")
        elif _string(args.get("accelerator") or cst.Name("None")) in ("gpu", "cuda") and not args.has("devices"):
            # gpus=X beside accelerator="gpu" (1.5+): 1.x kept the GPU and took X devices, or all of them
            # ("auto") where X was 0 or None.
            left: cst.BaseExpression = gpus
            if isinstance(left, (cst.IfExp, cst.BooleanOperation, cst.Lambda, cst.NamedExpr)) and not left.lpar:
                left = left.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            all_gpus = cst.BooleanOperation(left=left, operator=cst.Or(), right=_quoted("auto"))
            args.replace("gpus", [("devices", all_gpus)])
            args.change("trainer-gpus-beside-accelerator", f"gpus={_code(gpus)} -> devices={_code(all_gpus)}")
        else:
            # A variable or a condition: 1.x ran on the CPU when it was 0 or None, and so must the rewrite.
            accelerator_node, devices = _accelerator_for(gpus, args.get("num_processes"))
            if args.set("devices", devices, replacing="gpus"):
                args.change("trainer-devices", f"gpus={_code(gpus)} -> devices={_code(devices)}")
            else:
                accelerator_node = None
        if args.has("num_processes"):
            args.remove("num_processes")  # 1.x ignored it when gpus was given (a variable gpus keeps it for CPU)
            args.change("trainer-devices", "num_processes dropped (1.x ignored it beside gpus)")
    processes = args.get("num_processes")
    if processes is not None:
        accelerator = accelerator or "cpu"
        if args.set("devices", processes, replacing="num_processes"):
            args.change("trainer-devices", f"num_processes={_code(processes)} -> devices={_code(processes)}")
    for flag, device in (("tpu_cores", "tpu"), ("ipus", "ipu")):
        count = args.get(flag)
        if count is not None and accelerator is None and args.set("devices", count, replacing=flag):
            accelerator = device
            args.change(rules.REMOVED_ARGS[flag], f"{flag}={_code(count)} -> devices={_code(count)}")
    if accelerator is not None or accelerator_node is not None:
        new_node = accelerator_node if accelerator_node is not None else _quoted(accelerator)  # type: ignore[arg-type]
        drop_default(args, name="accelerator", beside="the device arguments")  # accelerator=None beside gpus=N
        given = args.get("accelerator")
        current = _string(given) if given is not None else None
        if args.get("accelerator") is None or current in rules.STRATEGY_STRINGS:
            args.remove("accelerator")
            # Before devices, where a person would write it.
            position = next((i for i, item in enumerate(args.items) if item[0] == "devices"), len(args.items))
            args.items.insert(position, ("accelerator", new_node, None))
            args.change("trainer-devices", f"-> accelerator={_code(new_node)} (the device type the 1.x flags named)")
        elif current == "auto" or (accelerator_node is None and current == accelerator):
            args.change("trainer-devices", f"accelerator={_code(args.get('accelerator'))} kept")  # type: ignore[arg-type]
        else:
            args.todo("trainer-conflict", old="gpus", value=_code(new_node), new="accelerator")
    # precision=16 -> "16-mixed", "bf16" -> "bf16-mixed".
    precision = args.get("precision")
    sixteen = False
    if isinstance(precision, cst.IfExp):
        # precision=16 if gpus else 32: each branch as 2.x spells it.
        def branch(node: cst.BaseExpression) -> cst.BaseExpression:
            key = str(_literal(node))
            return _quoted(rules.PRECISION[key]) if key in rules.PRECISION else node

        both = precision.with_changes(body=branch(precision.body), orelse=branch(precision.orelse))
        if _code(both) != _code(precision):
            args.replace("precision", [("precision", both)])
            args.change("trainer-precision", f"precision={_code(precision)} -> precision={_code(both)}")
            sixteen = True
    elif precision is not None:
        literal = _literal(precision)
        spelled = str(literal) if isinstance(literal, (int, str)) and not isinstance(literal, bool) else None
        sixteen = spelled == "16"
        if spelled is not None and spelled in rules.PRECISION:
            args.replace("precision", [("precision", _quoted(rules.PRECISION[spelled]))])
            args.change("trainer-precision", f'precision={_code(precision)} -> precision="{rules.PRECISION[spelled]}"')
    backend = args.get("amp_backend")
    level = args.get("amp_level")
    if backend is not None:
        args.remove("amp_backend")
        if _string(backend) == "native":
            args.change("trainer-amp-backend", 'amp_backend="native" removed (native AMP is the only one in 2.x)')
        elif not sixteen:
            args.change(
                "trainer-amp-backend", f"amp_backend={_code(backend)} removed (without precision=16 it had no effect)"
            )
        elif _string(backend) == "apex":
            args.todo("trainer-apex")
        else:
            args.todo("trainer-amp-backend-variable", value=_code(backend))
    if level is not None:
        args.remove("amp_level")
        args.change("trainer-amp-backend", f"amp_level={_code(level)} removed (apex's; native AMP has no level)")
    for old, new in rules.RENAMED_ARGS.items():
        value = args.get(old)
        if value is not None:
            args.replace(old, [(new, value)])
            args.change("trainer-renamed-arg", f"{old} -> {new}")
    checkpoint = args.get("checkpoint_callback")
    if checkpoint is not None:
        if isinstance(_literal(checkpoint), bool):
            args.replace("checkpoint_callback", [("enable_checkpointing", checkpoint)])
            args.change(
                "trainer-checkpoint-callback",
                f"checkpoint_callback={_code(checkpoint)} -> enable_checkpointing={_code(checkpoint)}",
            )
        elif args.add_callback(_code(checkpoint), "ModelCheckpoint", "callbacks", "checkpoint_callback"):
            args.imports.pop()  # the ModelCheckpoint is built by the user's own code
            args.change(
                "trainer-checkpoint-callback",
                f"checkpoint_callback={_code(checkpoint)} -> callbacks=[..., {_code(checkpoint)}]",
            )
        else:
            args.todo("trainer-checkpoint-callback", value=_code(checkpoint))
    # 1.x flags that became one of the bundle's callbacks: True adds it, False (1.x's default) goes; anything else (a
    # variable, callbacks= the tool cannot extend) keeps the flag's TODO below.
    for flag, name in rules.FLAG_CALLBACKS.items():
        value = args.get(flag)
        literal = _literal(value) if value is not None else None
        rule = rules.REMOVED_ARGS[flag]
        if literal is False:
            args.remove(flag)
            args.change(rule, f"{flag}=False removed (1.x's default)")
        elif literal is True and args.add_callback(f"{name}()", name, "callbacks", flag, bundle=True):
            args.change(rule, f"{flag}=True -> callbacks=[{name}()]")
    early = args.get("early_stop_callback")
    if early is not None:
        literal = _literal(early)
        if literal is False or literal is None:
            args.remove("early_stop_callback")
            args.change(
                "trainer-early-stop-callback",
                f"early_stop_callback={_code(early)} removed (no early stopping, the 2.x default)",
            )
        elif literal is True and args.add_callback(
            'EarlyStopping(monitor="val_loss")', "EarlyStopping", "callbacks", "early_stop_callback"
        ):
            args.change(
                "trainer-early-stop-callback",
                'early_stop_callback=True -> callbacks=[EarlyStopping(monitor="val_loss")]',
            )
        elif literal is ... and args.add_callback(_code(early), "EarlyStopping", "callbacks", "early_stop_callback"):
            args.imports.pop()  # built by the user's own code
            args.change(
                "trainer-early-stop-callback", f"early_stop_callback={_code(early)} -> callbacks=[..., {_code(early)}]"
            )
    summary = args.get("weights_summary")
    if summary is not None:
        literal = _literal(summary)
        if literal is None:
            args.replace("weights_summary", [("enable_model_summary", cst.Name("False"))])
            args.change("trainer-weights-summary", "weights_summary=None -> enable_model_summary=False")
        elif literal == "top":
            args.remove("weights_summary")
            args.change("trainer-weights-summary", 'weights_summary="top" removed (the 2.x default)')
        elif literal == "full" and args.add_callback(
            "ModelSummary(max_depth=-1)", "ModelSummary", "callbacks", "weights_summary"
        ):
            args.change("trainer-weights-summary", 'weights_summary="full" -> callbacks=[ModelSummary(max_depth=-1)]')
        else:
            args.todo("trainer-weights-summary", value=_code(summary))
    rate = args.get("progress_bar_refresh_rate")
    if rate is not None:
        value = _literal(rate)
        if value == 0:
            args.replace("progress_bar_refresh_rate", [("enable_progress_bar", cst.Name("False"))])
            args.change("trainer-progress-bar", "progress_bar_refresh_rate=0 -> enable_progress_bar=False")
        # A negative rate had no meaning in 1.x: left for a person (the TODO below), not copied into the callback.
        elif (
            isinstance(value, int)
            and value > 0
            and args.add_callback(
                f"TQDMProgressBar(refresh_rate={_code(rate)})",
                "TQDMProgressBar",
                "callbacks",
                "progress_bar_refresh_rate",
            )
        ):
            args.change(
                "trainer-progress-bar", f"progress_bar_refresh_rate={_code(rate)} -> callbacks=[TQDMProgressBar(...)]"
            )
        else:
            args.todo("trainer-progress-bar", value=_code(rate))
    reload = args.get("reload_dataloaders_every_epoch")
    if reload is not None:
        literal = _literal(reload)
        if literal is False:
            args.remove("reload_dataloaders_every_epoch")
        else:
            value = cst.Integer("1") if literal is True else cst.parse_expression(f"int({_code(reload)})")
            args.replace("reload_dataloaders_every_epoch", [("reload_dataloaders_every_n_epochs", value)])
        args.change("trainer-reload-dataloaders", "reload_dataloaders_every_epoch -> reload_dataloaders_every_n_epochs")
    accumulate = args.get("accumulate_grad_batches")
    if isinstance(accumulate, cst.Dict):
        if args.add_callback(
            f"GradientAccumulationScheduler(scheduling={_code(accumulate)})",
            "GradientAccumulationScheduler",
            "callbacks",
            "accumulate_grad_batches",
        ):
            args.change(
                "trainer-accumulate-dict",
                "accumulate_grad_batches={...} -> callbacks=[GradientAccumulationScheduler(...)]",
            )
        else:
            args.todo("trainer-accumulate-dict", value=_code(accumulate))
    profiler = args.get("profiler")
    if profiler is not None and isinstance(_literal(profiler), bool):
        if _literal(profiler):
            args.replace("profiler", [("profiler", _quoted("simple"))])
        else:
            args.remove("profiler")
        new_profiler = 'profiler="simple"' if _literal(profiler) else "removed"
        args.change("trainer-profiler", f"profiler={_code(profiler)} -> {new_profiler}")
    steps = args.get("max_steps")
    if steps is not None and _literal(steps) is None:
        args.replace("max_steps", [("max_steps", cst.parse_expression("-1"))])
        args.change("trainer-max-steps", "max_steps=None -> max_steps=-1 (2.x's no limit)")
    for name, rule in rules.DROPPED_ARGS.items():
        if args.has(name):
            args.remove(name)
            args.note(rule)
            args.change(rule, f"{name} dropped")
    # Removed with no 2.x argument: left in the call they stop the Trainer from being built, so they leave it, and
    # the TODO keeps what was passed.
    for name, rule in rules.REMOVED_ARGS.items():
        value = args.get(name)
        if value is not None:
            args.remove(name)
            args.todo(rule)
            written = rules.one_line(_code(value))
            args.todos[-1] += f" (was {name}={written})" if len(written) <= 16 else ""
            args.change(rule, f"{name}={_code(value)} removed from the call (a TODO says the 2.x way)")
    return args


# ---------------------------------------------------------------------------------------------------------------
# Hooks


def _uses(node: cst.CSTNode, name: str, hook: str) -> int:
    """Uses of ``name`` in ``node``, not counting it passed on to ``super().<hook>(...)``."""

    class Counter(cst.CSTVisitor):
        count = 0

        def visit_Call(self, call: cst.Call) -> bool | None:
            if m.matches(call.func, m.Attribute(value=m.Call(func=m.Name("super")), attr=m.Name(hook))):
                for arg in call.args:
                    if not (isinstance(arg.value, cst.Name) and arg.value.value == name):
                        read_only_visit(arg.value, self)
                return False
            return True

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                self.count += 1

    counter = Counter()
    read_only_visit(node, counter)
    return counter.count


class _DropSuperArgs(cst.CSTTransformer):
    """Removes ``names`` from the arguments of ``super().<hook>(...)`` calls."""

    def __init__(self, hook: str, names: set[str]) -> None:
        super().__init__()
        self.hook, self.names = hook, names

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not m.matches(updated.func, m.Attribute(value=m.Call(func=m.Name("super")), attr=m.Name(self.hook))):
            return updated
        kept = [
            a
            for a in updated.args
            if not (
                (isinstance(a.value, cst.Name) and a.value.value in self.names and a.keyword is None)
                or (a.keyword is not None and a.keyword.value in self.names)
            )
        ]
        if kept and len(kept) < len(updated.args):
            kept[-1] = kept[-1].with_changes(comma=updated.args[-1].comma)
        return updated.with_changes(args=kept)


def _reduce_only(func: cst.FunctionDef) -> bool:
    """Whether a ``*_step_end(self, outputs)`` body only reduces what the replicas returned (a mean or a sum of the
    outputs, or of entries of them), which the bundle's dp/ddp2 already do exactly."""
    params = func.params.params
    if len(params) != 2:
        return False
    bound = {params[1].name.value}

    def reduced(expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Name):
            return expr.value in bound
        if isinstance(expr, cst.Subscript):
            return reduced(expr.value) and all(
                isinstance(e.slice, cst.Index) and isinstance(e.slice.value, (cst.SimpleString, cst.Integer))
                for e in expr.slice
            )
        if isinstance(expr, cst.Call) and not expr.args and isinstance(expr.func, cst.Attribute):
            return expr.func.attr.value in ("mean", "sum") and reduced(expr.func.value)
        if isinstance(expr, cst.Call) and _dotted(expr.func) in ("torch.mean", "torch.sum") and len(expr.args) == 1:
            return reduced(expr.args[0].value)
        if isinstance(expr, cst.Dict):
            return all(isinstance(e, cst.DictElement) and reduced(e.value) for e in expr.elements)
        return False

    body = func.body.body if isinstance(func.body, cst.IndentedBlock) else []
    for index, statement in enumerate(body):
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        for small in statement.body:
            if (
                index == 0
                and isinstance(small, cst.Expr)
                and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))
            ):
                continue  # the docstring
            if isinstance(small, cst.Pass):
                continue
            if isinstance(small, cst.Return):
                if small.value is None or not reduced(small.value):
                    return False
                continue
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and reduced(small.value):
                target = small.targets[0].target
                if isinstance(target, cst.Name):
                    bound.add(target.value)
                    continue
                if isinstance(target, cst.Subscript) and reduced(target):
                    continue
            return False
    return True


def _per_sample_steps(methods: dict[str, cst.FunctionDef]) -> set[str]:
    """The steps of a class that have a 1.x ``<step>_end`` and compute a loss with ``reduction="none"``: what they
    return is per sample, so a step end that means it does more than combine the replicas' scalars, and must keep
    running after each step."""

    class Finder(cst.CSTVisitor):
        found = False

        def visit_Arg(self, node: cst.Arg) -> None:
            if (
                node.keyword is not None
                and node.keyword.value == "reduction"
                and isinstance(node.value, cst.SimpleString)
                and node.value.evaluated_value == "none"
            ):
                self.found = True

    steps: set[str] = set()
    for name in ("training_step", "validation_step", "test_step"):
        if name in methods and f"{name}_end" in methods:
            finder = Finder()
            read_only_visit(methods[name].body, finder)
            if finder.found:
                steps.add(name)
    return steps


def _step_end_into_step(node: cst.ClassDef, steps: set[str]) -> cst.ClassDef:
    """Each step of ``steps`` whose ``<step>_end`` was kept as ``_<step>_end_1x`` returns what that gives, as 1.x
    called the step end on each step's output."""
    names = {s.name.value for s in node.body.body if isinstance(s, cst.FunctionDef)}
    body = []
    for statement in node.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value in steps:
            kept = f"_{statement.name.value}_end_1x"
            if kept in names:
                statement = wrap_returns(statement, kept)
        body.append(statement)
    return node.with_changes(body=node.body.with_changes(body=body))


# ---------------------------------------------------------------------------------------------------------------
# The transformer


_STATEMENTS = (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef, cst.If, cst.For, cst.While, cst.With, cst.Try)
#: Classes whose ``add_argparse_args``/``from_argparse_args`` 2.0 removed: the Trainer's and a DataModule's.
_ARGPARSE_METHODS = ("add_argparse_args", "from_argparse_args")
#: The namespaces' subpackages a script may import by name (``from pytorch_lightning import loggers``) and reach a
#: removed name through (``loggers.TestTubeLogger``).
_SUBPACKAGES = frozenset({"loggers", "callbacks", "plugins", "strategies", "profiler"})


class UpgradeTransformer(cst.CSTTransformer):
    """Rewrites one module; :func:`upgrade_source` runs it."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, facts: FileFacts, namespace: str, check_code: bool = False) -> None:
        super().__init__()
        self.facts = facts
        #: write out each rewritten statement as it is left, and keep the original of one libcst cannot write (the
        #: second pass over a file whose first pass built such a node: slower, so not the default)
        self.check_code = check_code
        self.namespace = namespace  # the Lightning tree the file imports: what added imports come from
        self.findings: list[Finding] = []
        self._pending: list[list[str]] = []  # comment texts for the statement being visited, innermost last
        self._first_statement: cst.CSTNode | None = None
        self._header_comments: set[str] = set()
        self._scopes: list[Scope] = []
        self._class_depth = 0
        self._class_has_optimizer_idx: list[bool] = []
        self._class_manual: list[str] = []  # what manual_optimization.py makes of the class (ManualPlan.kind)
        self._class_per_sample: list[set[str]] = []  # per enclosing class: its steps with per-sample outputs
        self._manual = ManualPlan(frozenset())
        self._epoch_ends: dict[str, dict[str, HookShape]] = {}
        #: local name -> (bundle module, new name, extra call kwargs) for the removed classes imported in this file.
        self.renamed: dict[str, tuple[str, str, dict[str, str]]] = {}
        #: aliases of the Lightning namespaces: {"pl": "pytorch_lightning", "L": "lightning.pytorch"}.
        self.namespace_aliases: dict[str, str] = {}
        #: local names of the namespaces' subpackages (``from pytorch_lightning import loggers as pl_loggers``,
        #: ``import pytorch_lightning.plugins as plugins``): {"pl_loggers": ("pytorch_lightning", "loggers")}.
        self.submodule_aliases: dict[str, tuple[str, str]] = {}
        self.imports_to_add: dict[tuple[str, str, str | None], None] = {}  # (module, name, asname), in order
        self.plain_imports: dict[str, None] = {}  # ``import X`` statements to add
        self.fairscale_checkpoint_line: int | None = None
        self.needs_bundle_import = False  # a bundle strategy name is passed as a string: it must be registered
        self.datamodules: set[str] = set()  # classes in this file that derive from a LightningDataModule
        self._torchmetrics_imports: list[tuple[str, str]] = []  # (module, name) of metrics imported by this file
        self._attribute_names: set[int] = set()  # ids of the Name nodes that are an attribute's attr
        self._lightning_class: list[bool] = []  # per enclosing class: whether it may be a Lightning class
        self._auto_move_data: set[str] = set()  # local names of the removed @auto_move_data decorator
        self._failed: set[int] = set()  # ids of the nodes whose rewrite raised (each gets one internal-error TODO)
        self._visit_failed: set[int] = set()  # ids of the nodes whose visit_* raised
        self._module_comments: list[str] | None = None  # TODOs with no statement to sit above: the file's header
        self._class_counts: dict[int, str] = {}  # id(call) -> the class count its context offers (metrics.py)
        self._grad_norm: GradNormPlan | None = None  # where track_grad_norm's hook goes (grad_norm.py)
        self._tune = TunePlan()  # where auto_lr_find/auto_scale_batch_size go (tuner.py)
        self._assigned_calls: dict[cst.Call, str] = {}  # name = Call(...) statements: the call -> the name
        self._last_checkpoint_names: dict[cst.Call, str] = {}  # ModelCheckpoint(prefix=P) -> "P-last" (1.x's)

    # -- bookkeeping ---------------------------------------------------------------------------------------------

    def _line(self, node: cst.CSTNode) -> int:
        try:
            return self.get_metadata(PositionProvider, node).start.line
        except KeyError:
            return 0

    def _change(self, node: cst.CSTNode, rule: str, message: str) -> None:
        """A rewrite made at ``node``, under ``rule`` (an id of :data:`rules.RULES`)."""
        self.findings.append(Finding(self._line(node), message, rule=rule))

    def _todo(self, node: cst.CSTNode, text: str) -> None:
        """A TODO comment (``text`` from :func:`rules.todo_text`) above the statement being visited."""
        text = rules.one_line(text)  # a comment holds no line break: libcst would refuse the whole file
        self.findings.append(Finding(self._line(node), text, todo=True))
        if self._pending:
            self._pending[-1].append(text)
        elif self._module_comments is not None:
            self._module_comments.append(text)

    def _note(self, node: cst.CSTNode, text: str) -> None:
        text = rules.one_line(text)
        self.findings.append(Finding(self._line(node), text, note=True))
        if self._pending:
            self._pending[-1].append(text)

    def _internal_error(self, node: cst.CSTNode, err: BaseException) -> None:
        """``node``'s rewrite raised: a TODO at it names the exception, and the rest of the file still converts."""
        if id(node) in self._failed:
            return
        self._failed.add(id(node))
        log.debug(
            "lightning-mgpu upgrade failed on a %s at line %s", type(node).__name__, self._line(node), exc_info=err
        )
        self._todo(node, rules.todo_text("internal-error", node=_node_kind(node), error=type(err).__name__))

    def _args(self, items: list[tuple[str, cst.BaseExpression, cst.Arg | None]]) -> _TrainerArgs:
        """Keyword arguments to rewrite, with what this file says about their values."""
        scope = self._scopes[-1]
        return _TrainerArgs(
            items,
            resolve=lambda node: self.facts.values(node, scope),
            assigned=lambda node: self.facts.assigned(node, scope),
            strategy_var=lambda node: isinstance(node, cst.Name) and self._is_strategy_var(node.value),
            namespace=self.namespace,
        )

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _STATEMENTS):
            self._pending.append([])
        if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1 and isinstance(node.body[0], cst.Assign):
            assign = node.body[0]
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
                if isinstance(assign.value, cst.Call):
                    self._assigned_calls[assign.value] = assign.targets[0].target.value
        if isinstance(node, cst.Module):
            # libcst keeps the comments above a file's first statement in Module.header, not in its leading_lines:
            # a TODO written there by an earlier run is found here, so a second run does not write it again.
            self._first_statement = node.body[0] if node.body else None
            self._header_comments = {line.comment.value for line in node.header if line.comment is not None}
            self._module_comments = []
            self._class_counts = class_counts(node)
            self._grad_norm = grad_norm_plan(node)
            self._manual = manual_plan(node)
            self._epoch_ends = epoch_end_plan(node)
            self._tune = tune_plan(node)
        if isinstance(node, (cst.Module, cst.FunctionDef)):
            # A function the pre-pass failed on has no scope of its own: it knows nothing about its names.
            self._scopes.append(self.facts.scopes.get(node) or Scope(node, self._scopes[-1] if self._scopes else None))
        if node in self.facts.failed:
            self._internal_error(node, self.facts.failed[node])
        # Whatever one construct raises stays with that construct: a TODO there, its children left as they are, and
        # the rest of the file converted (each visit_* records its state only once it cannot fail any more).
        try:
            return super().on_visit(node)
        except Exception as err:  # noqa: BLE001
            self._internal_error(node, err)
            self._visit_failed.add(id(node))
            return False

    def on_leave(self, original_node: cst.CSTNode, updated_node: Any) -> Any:
        if id(original_node) in self._visit_failed:
            result = updated_node  # its visit raised before recording anything: its leave is skipped too
        else:
            try:
                result = super().on_leave(original_node, updated_node)
            except Exception as err:  # noqa: BLE001
                self._internal_error(original_node, err)
                result = updated_node  # its children converted, its own rewrite left out
        if self.check_code and isinstance(original_node, _STATEMENTS) and result is not original_node:
            try:
                for written in result.nodes if isinstance(result, cst.FlattenSentinel) else [result]:
                    if isinstance(written, cst.CSTNode):
                        _code(written)
            except Exception as err:  # noqa: BLE001
                self._internal_error(original_node, err)
                result = original_node  # the statement as it was, with the TODO
        if isinstance(original_node, (cst.Module, cst.FunctionDef)):
            self._scopes.pop()
        if isinstance(original_node, cst.Module) and self._module_comments:
            header = [line.comment.value for line in result.header if line.comment is not None]
            new = [f"# {t}" for t in dict.fromkeys(self._module_comments) if f"# {t}" not in header]
            result = result.with_changes(header=[*result.header, *(cst.EmptyLine(comment=cst.Comment(c)) for c in new)])
        if isinstance(original_node, _STATEMENTS):
            comments = self._pending.pop()
            first = result.nodes[0] if isinstance(result, cst.FlattenSentinel) and result.nodes else result
            if comments and isinstance(first, _STATEMENTS):
                present = {line.comment.value for line in first.leading_lines if line.comment is not None}
                if original_node is self._first_statement:
                    present |= self._header_comments
                new_lines = [
                    cst.EmptyLine(indent=True, comment=cst.Comment(f"# {t}"))
                    for t in dict.fromkeys(comments)
                    if f"# {t}" not in present
                ]
                if new_lines:
                    first = first.with_changes(leading_lines=[*first.leading_lines, *new_lines])
                    if isinstance(result, cst.FlattenSentinel):
                        result = cst.FlattenSentinel([first, *result.nodes[1:]])
                    else:
                        result = first
        return result

    # -- imports -------------------------------------------------------------------------------------------------

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = _dotted(alias.name)
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
            if name in rules.BUNDLE_FOR_NAMESPACE:
                self.namespace_aliases[local or name] = name
            namespace = next((ns for ns in rules.BUNDLE_FOR_NAMESPACE if (name or "").startswith(ns + ".")), None)
            if namespace is not None and local is not None:  # import pytorch_lightning.loggers as pl_loggers
                self.submodule_aliases[local] = (namespace, name[len(namespace) + 1 :])  # type: ignore[index]

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import:
        # import pytorch_lightning.metrics -> import torchmetrics
        names = []
        for alias in updated.names:
            name = _dotted(alias.name) or ""
            namespace = next((ns for ns in rules.BUNDLE_FOR_NAMESPACE if name.startswith(ns + ".metrics")), None)
            if namespace is not None and alias.asname is not None:
                new = "torchmetrics" + name[len(namespace) + len(".metrics") :]
                alias = alias.with_changes(name=cst.parse_expression(new))
                self._change(original, "metrics-import", f"import {name} -> import {new}")
            names.append(alias)
        return updated.with_changes(names=names)

    def leave_ImportFrom(
        self, original: cst.ImportFrom, updated: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        module = _dotted(updated.module) if updated.module is not None else None
        if module is None:
            return updated
        namespace = next((ns for ns in rules.BUNDLE_FOR_NAMESPACE if module == ns or module.startswith(ns + ".")), None)
        below = module[len(namespace) + 1 :] if namespace is not None and module != namespace else ""
        if below == "metrics" or below.startswith("metrics."):
            # A removed package: every import from it, a star import too, would stop the script.
            return self._metrics_import(original, updated, "torchmetrics" + below[len("metrics") :])
        if isinstance(updated.names, cst.ImportStar):
            return updated
        if namespace is not None:  # from pytorch_lightning import TrainResult: leftover_spellings.py
            for alias in updated.names:
                if isinstance(alias.name, cst.Name) and alias.name.value in RESULT_CLASSES:
                    self._todo(original, rules.todo_text("result-object", name=alias.name.value))
        if (module == "torchmetrics" or module.startswith("torchmetrics.")) and any(
            isinstance(a.name, cst.Name) and rules.TORCHMETRICS_RENAMED.get(a.name.value, a.name.value) != a.name.value
            for a in updated.names
        ):
            # torchmetrics' own names of 0.6 and before (F1, IoU, ...), which it removed in 0.8: its new ones.
            return self._metrics_import(original, updated, module)
        if module == "lightning" and any(
            a.name.value == "pytorch" for a in updated.names if isinstance(a.name, cst.Name)
        ):
            for a in updated.names:
                if isinstance(a.name, cst.Name) and a.name.value == "pytorch":
                    self.namespace_aliases[_alias_of(a) or "pytorch"] = "lightning.pytorch"
        if module == "fairscale.nn" or module.startswith("fairscale.nn.checkpoint"):
            if any(isinstance(a.name, cst.Name) and a.name.value == "checkpoint_wrapper" for a in updated.names):
                self.fairscale_checkpoint_line = self._line(original)
        if namespace is None:
            return updated
        bundle = rules.BUNDLE_FOR_NAMESPACE[namespace]
        kept: list[cst.ImportAlias] = []
        for alias in updated.names:
            name = alias.name.value if isinstance(alias.name, cst.Name) else None
            local = _alias_of(alias) or name
            asname = _alias_of(alias)
            if name in rules.REMOVED_CLASSES and below in rules.REMOVED_CLASS_MODULES:
                # The bundle's class under its own name, and every use renamed; a user's own alias stays.
                new, extra = rules.REMOVED_CLASSES[name]
                keep_alias = asname if not extra and asname != new else None
                self._add_import(bundle, new, keep_alias)
                if keep_alias is None:
                    self.renamed[local] = (bundle, new, extra)  # type: ignore[index]
                self._change(
                    original,
                    "bundle-class",
                    f"from {module} import {name} -> from {bundle} import {new}"
                    + (f" as {keep_alias}" if keep_alias else ""),
                )
                continue
            if name in rules.LIGHTNING_PLUGINS and below in rules.LIGHTNING_PLUGIN_MODULES:
                new, extra = rules.LIGHTNING_PLUGINS[name]
                self._add_import(f"{namespace}.strategies", new, None)
                self.renamed[local] = (f"{namespace}.strategies", new, extra)  # type: ignore[index]
                self._change(
                    original, "plugin-class", f"from {module} import {name} -> from {namespace}.strategies import {new}"
                )
                if new == "FSDPStrategy":
                    self._todo(original, rules.todo_text("fsdp-plugin", value=name))
                continue
            moved = rules.MOVED_NAMES.get((below, name))  # type: ignore[arg-type]
            if moved is not None:
                submodule, new = moved
                target = f"{bundle}.{submodule}"
                if new == name:
                    self._add_import(target, new, asname)
                else:
                    self._add_import(target, new, None)
                    self.renamed[local] = (target, new, {})  # type: ignore[index]
                self._change(original, "bundle-name", f"from {module} import {name} -> from {target} import {new}")
                continue
            renamed = rules.RENAMED_NAMES.get((below, name))  # type: ignore[arg-type]
            if renamed is not None:
                submodule, new = renamed
                self._add_import(f"{namespace}.{submodule}", new, asname)
                if asname is None:
                    self.renamed[local] = (f"{namespace}.{submodule}", new, {})  # type: ignore[index]
                self._change(
                    original,
                    "renamed-name",
                    f"from {module} import {name} -> from {namespace}.{submodule} import {new}",
                )
                continue
            if below in rules.MOVED_MODULES:
                target = f"{namespace}.{rules.MOVED_MODULES[below]}".rstrip(".")
                self._add_import(target, name, asname)  # type: ignore[arg-type]
                self._change(original, "moved-module", f"from {module} import {name} -> from {target} import {name}")
                continue
            if below == "utilities.argparse" and name in _ARGPARSE_METHODS:
                self._add_import("lightning_mgpu.upgrade.trainer_args", name, asname)
                self._change(
                    original,
                    "trainer-argparse",
                    f"from {module} import {name} -> from lightning_mgpu.upgrade.trainer_args",
                )
                continue
            if name == "TestTubeLogger":
                self._todo(original, rules.todo_text("test-tube-logger"))
            if name == "auto_move_data":
                # The module is gone in 2.x: the import would stop the script; the decorator goes with it.
                self._auto_move_data.add(local or name)
                self._change(
                    original,
                    "auto-move-data",
                    f"from {module} import auto_move_data removed (2.x has no such decorator)",
                )
                continue
            kept.append(alias)
        if len(kept) == len(updated.names):
            return updated
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(names=kept)

    def _metrics_import(self, original: cst.ImportFrom, updated: cst.ImportFrom, target: str) -> cst.ImportFrom:
        """``from pytorch_lightning.metrics[.x] import A`` -> ``from torchmetrics[.x] import A`` (renamed where
        torchmetrics renamed it)."""
        names: list[cst.ImportAlias] = []
        for alias in () if isinstance(updated.names, cst.ImportStar) else updated.names:
            name = alias.name.value if isinstance(alias.name, cst.Name) else ""
            new = rules.TORCHMETRICS_RENAMED.get(name, name)
            if new != name:
                if alias.asname is None:
                    self.renamed[name] = (target, new, {})
                alias = alias.with_changes(name=cst.Name(new))
            names.append(alias)
        source = _dotted(updated.module)  # type: ignore[arg-type]
        self._change(
            original,
            "metrics-import",
            f"from {source} -> from {target} (torchmetrics)" if source != target else f"from {target}: renamed names",
        )
        return updated.with_changes(module=cst.parse_expression(target), names=names or updated.names)

    def _add_import(self, module: str, name: str, asname: str | None) -> None:
        self.imports_to_add[(module, name, asname)] = None

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        updated = self._import_bundle(original, updated)
        if not self.imports_to_add and not self.plain_imports:
            return updated
        existing = {
            (_dotted(s.module), a.name.value, _alias_of(a))
            for stmt in updated.body
            if isinstance(stmt, cst.SimpleStatementLine)
            for s in stmt.body
            if isinstance(s, cst.ImportFrom) and s.module is not None and not isinstance(s.names, cst.ImportStar)
            for a in s.names
            if isinstance(a.name, cst.Name)
        }
        plain = {
            _dotted(a.name)
            for stmt in updated.body
            if isinstance(stmt, cst.SimpleStatementLine)
            for s in stmt.body
            if isinstance(s, cst.Import)
            for a in s.names
        }
        new_statements = [
            cst.SimpleStatementLine(body=[cst.Import(names=[cst.ImportAlias(name=cst.parse_expression(m))])])  # type: ignore[arg-type]
            for m in self.plain_imports
            if m not in plain
        ]
        for module, name, asname in self.imports_to_add:
            if (module, name, asname) in existing:
                continue
            alias = cst.ImportAlias(name=cst.Name(name), asname=cst.AsName(name=cst.Name(asname)) if asname else None)
            new_statements.append(
                cst.SimpleStatementLine(body=[cst.ImportFrom(module=cst.parse_expression(module), names=[alias])])  # type: ignore[arg-type]
            )
        if not new_statements:
            return updated
        return self._insert_after_imports(updated, new_statements)

    def _import_bundle(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        """``import lightning_mgpu`` where a Trainer gets a bundle strategy by name and nothing imports the bundle: the
        names exist only once it is imported."""
        if not self.needs_bundle_import:
            return updated
        for statement in updated.body:
            for small in getattr(statement, "body", []) if isinstance(statement, cst.SimpleStatementLine) else []:
                if isinstance(small, cst.Import) and any(_dotted(a.name) == "lightning_mgpu" for a in small.names):
                    return updated
                if (
                    isinstance(small, cst.ImportFrom)
                    and small.module is not None
                    and (_dotted(small.module) or "").startswith("lightning_mgpu")
                ):
                    return updated  # importing any part of the package imports (and registers) the package
        if any(module.startswith("lightning_mgpu") for module, _, _ in self.imports_to_add):
            return updated
        self.findings.append(
            Finding(
                1,
                "import lightning_mgpu added: it registers the bundle's strategy names with Lightning",
                rule="bundle-import",
            )
        )
        line = cst.SimpleStatementLine(
            body=[cst.Import(names=[cst.ImportAlias(name=cst.Name("lightning_mgpu"))])],
            trailing_whitespace=cst.TrailingWhitespace(
                whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(rules.REGISTERS_COMMENT)
            ),
        )
        return self._insert_after_imports(updated, [line])

    @staticmethod
    def _insert_after_imports(module: cst.Module, statements: list[cst.SimpleStatementLine]) -> cst.Module:
        """Insert ``statements`` after the file's opening block of imports (after its docstring when it has none)."""
        body = list(module.body)
        last_import = -1
        for index, statement in enumerate(body):
            if isinstance(statement, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body
            ):
                last_import = index
            elif last_import >= 0 and not (
                isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.Expr)
            ):
                break
        if (
            last_import < 0
            and body
            and isinstance(body[0], cst.SimpleStatementLine)
            and isinstance(body[0].body[0], cst.Expr)
        ):
            last_import = 0  # the docstring
        body[last_import + 1 : last_import + 1] = statements
        return module.with_changes(body=body)

    # -- attribute chains: pl.loggers.NeptuneLogger, pl.strategies.DDPShardedStrategy, pl.metrics.Accuracy ----------

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        # trainer.root_gpu, trainer.training_type_plugin: removed_names.py.
        attribute = trainer_attribute(updated)
        if attribute is not None:
            self._change(original, attribute[1], f"{_code(original)} -> {_code(attribute[0])}")
            return attribute[0]
        text = rules.todo_text("trainer-accelerator-connector")
        if is_accelerator_connector(updated) and not (self._pending and text in self._pending[-1]):
            self._todo(original, text)
            return updated
        dotted = _dotted(updated)
        if dotted is None or "." not in dotted:
            return updated
        head, _, rest = dotted.partition(".")
        namespace = self.namespace_aliases.get(head)
        subpackage = ""  # reached through a subpackage's local name: loggers.TestTubeLogger
        if namespace is None and head in self.submodule_aliases:
            namespace, subpackage = self.submodule_aliases[head]
            rest = f"{subpackage}.{rest}"
        if namespace is None:
            return updated
        below, _, name = rest.rpartition(".")
        bundle = rules.BUNDLE_FOR_NAMESPACE[namespace]
        if name in rules.REMOVED_CLASSES and below in rules.REMOVED_CLASS_MODULES:
            new, extra = rules.REMOVED_CLASSES[name]
            self._add_import(bundle, new, None)
            if extra:
                self.renamed[f"{dotted}"] = (bundle, new, extra)
            self._change(original, "bundle-class", f"{dotted} -> {new} (from {bundle})")
            return cst.Name(new) if not extra else updated
        if name in rules.LIGHTNING_PLUGINS and below in rules.LIGHTNING_PLUGIN_MODULES:
            new, extra = rules.LIGHTNING_PLUGINS[name]
            if extra:
                self.renamed[dotted] = (f"{namespace}.strategies", new, extra)
                if subpackage:
                    self._add_import(f"{namespace}.strategies", new, None)  # the call site writes the bare name
                return updated  # the call site rewrites it, with its extra arguments
            spelled = self._below(head, subpackage, namespace, "strategies", new)
            self._change(original, "plugin-class", f"{dotted} -> {_code(spelled)}")
            return spelled
        moved = rules.MOVED_NAMES.get((below, name))
        if moved is not None:
            submodule, new = moved
            self._add_import(f"{bundle}.{submodule}", new, None)
            if new != name:
                self.renamed[dotted] = (f"{bundle}.{submodule}", new, {})
            self._change(original, "bundle-name", f"{dotted} -> {new} (from {bundle}.{submodule})")
            return cst.Name(new)
        renamed = rules.RENAMED_NAMES.get((below, name))
        if renamed is not None:
            spelled = self._below(head, subpackage, namespace, *renamed)
            self._change(original, "renamed-name", f"{dotted} -> {_code(spelled)}")
            return spelled
        if below in rules.MOVED_MODULES:
            spelled = self._below(head, subpackage, namespace, rules.MOVED_MODULES[below], name)
            self._change(original, "moved-module", f"{dotted} -> {_code(spelled)}")
            return spelled
        if below == "metrics" or below.startswith("metrics."):
            self.plain_imports["torchmetrics"] = None
            new = rules.TORCHMETRICS_RENAMED.get(name, name)
            target = "torchmetrics" + below[len("metrics") :]
            self._change(original, "metrics-import", f"{dotted} -> {target}.{new}")
            return cst.parse_expression(f"{target}.{new}")
        return updated

    def _below(self, head: str, subpackage: str, namespace: str, module: str, name: str) -> cst.BaseExpression:
        """``name`` of ``module`` (below the namespace) as this file reaches it: through the namespace's alias
        (``pl.loggers.X``), through a subpackage's local name that holds it (``loggers.X``), or imported by name."""
        if not subpackage:
            return cst.parse_expression(".".join(part for part in (head, module, name) if part))
        if module == subpackage or module.startswith(subpackage + "."):
            return cst.parse_expression(".".join([head, *module.split(".")[1:], name]))
        self._add_import(".".join(part for part in (namespace, module) if part), name, None)
        return cst.Name(name)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._attribute_names.add(id(node.attr))  # x.DDPPlugin is not the imported name DDPPlugin

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        # References to a renamed import (isinstance(cb, GPUStatsMonitor)); calls that add arguments go through
        # leave_Call.
        if id(original) in self._attribute_names:
            return updated
        entry = self.renamed.get(updated.value)
        return cst.Name(entry[1]) if entry is not None and not entry[2] else updated

    # -- calls -----------------------------------------------------------------------------------------------------

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = _dotted(original.func) or ""
        result = result_class(original)
        if result is not None:  # Lightning 1.0's TrainResult/EvalResult: leftover_spellings.py
            self._todo(original, rules.todo_text("result-object", name=result))
            return updated
        if func.rsplit(".", 1)[-1] == "TestTubeLogger":  # its arguments, as TensorBoardLogger takes them
            updated = self._test_tube_call(original, updated)
        owner_and_method = tuner_owner(original.func)
        if owner_and_method is not None:  # trainer.tuner.lr_find(...) -> Tuner(trainer).lr_find(...): tuner.py
            tuned = tuner_call(updated, *owner_and_method)
            if tuned is not None:
                self._add_import(f"{self.namespace}.tuner", "Tuner", None)
                self._change(original, "tuner", f"{func}(...) -> Tuner(...).{owner_and_method[1]}(...)")
                return tuned
        if func in self.renamed:
            return self._renamed_call(original, updated, func)
        if func == "isinstance":
            updated = self._isinstance_spawn(original, updated)
        if original in self.facts.moved_resume:
            value = self.facts.moved_resume[original]
            args = list(updated.args)
            if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(_kwarg("ckpt_path", value.deep_clone()))
            self._change(original, "trainer-resume", f"resume_from_checkpoint={_code(value)} -> {func}(ckpt_path=...)")
            updated = updated.with_changes(args=args)
        owner, _, method = func.rpartition(".")
        if method in _ARGPARSE_METHODS and self._argparse_owner(owner):
            return self._argparse_call(original, updated, owner, method)
        if method in rules.LOOP_KWARGS and owner and not owner.endswith("Trainer"):
            updated = self._loop_kwargs(original, updated, method)
        if method == "tune" and owner.endswith("trainer") and original not in self._tune.tunes:
            self._todo(original, rules.todo_text("trainer-tune"))
        if method == "set_defaults":
            updated = self._set_defaults(original, updated)
        if func.rsplit(".", 1)[-1] == "ModelCheckpoint":
            updated = self._model_checkpoint(original, updated)
        new_func = _dotted(updated.func) or ""
        if new_func.split(".")[-1] in rules.TORCHMETRICS_TASK and self._is_torchmetrics(new_func):
            return self._metric_call(original, updated)
        if _is_trainer_call(original):
            return self._trainer_call(original, updated)
        return updated

    def _test_tube_call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """``TestTubeLogger(...)`` -> ``TensorBoardLogger(...)``'s arguments (removed_names.py; the name itself is
        renamed through ``rules.RENAMED_NAMES``)."""
        converted = test_tube_arguments(updated)
        if converted is None:
            self._todo(original, rules.todo_text("test-tube-logger"))
            return updated
        dropped = f", dropped {', '.join(converted[1])}" if converted[1] else ""
        self._change(original, "test-tube-logger-args", f"TestTubeLogger(...) -> TensorBoardLogger(...){dropped}")
        return converted[0]

    def leave_Annotation(self, original: cst.Annotation, updated: cst.Annotation) -> cst.Annotation:
        """``outputs: EPOCH_OUTPUT`` -> ``outputs: list[STEP_OUTPUT]`` (removed_names.py)."""
        if m.matches(original.annotation, m.Name("EPOCH_OUTPUT")) and "EPOCH_OUTPUT" in self.renamed:
            step_output = self.renamed["EPOCH_OUTPUT"][1]
            self._change(original, "epoch-output-type", f"EPOCH_OUTPUT -> list[{step_output}]")
            return epoch_output_annotation(updated, step_output)
        return updated

    def _renamed_call(self, original: cst.Call, updated: cst.Call, func: str) -> cst.Call:
        _, new, extra = self.renamed[func]
        args = list(updated.args)
        if new == "GPUUtilizationMonitor" and args:
            self._todo(
                original, rules.todo_text("gpu-stats-monitor", value=", ".join(_code(a).rstrip(", ") for a in args))
            )
            args = []
        for key, value in extra.items():
            if not any(a.keyword is not None and a.keyword.value == key for a in args):
                if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
                    args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                args.append(_kwarg(key, cst.parse_expression(value)))
        new_func: cst.BaseExpression = cst.Name(new)
        head = func.split(".")[0]
        if "." in func and head in self.namespace_aliases:
            new_func = (
                cst.parse_expression(f"{head}.strategies.{new}") if "strategies" in self.renamed[func][0] else new_func
            )
        self._change(
            original,
            self._renamed_rule(func),
            f"{func}(...) -> {new}(...)"
            + (f" with {', '.join(f'{k}={v}' for k, v in extra.items())}" if extra else ""),
        )
        renamed = updated.with_changes(func=new_func, args=args)
        if new in rules.TORCHMETRICS_TASK and self.renamed[func][0].startswith("torchmetrics"):
            return self._metric_call(original, renamed)
        return renamed

    def _isinstance_spawn(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """``isinstance(s, (DDPStrategy, DDPSpawnStrategy))``: 2.x's DDPStrategy is both (``start_method="spawn"``),
        so the spawn class, which 2.x removed, goes from a tuple that holds the class it became."""
        if len(updated.args) != 2 or not isinstance(updated.args[1].value, cst.Tuple):
            return updated
        classes = updated.args[1].value
        names = [e.value.value for e in classes.elements if isinstance(e.value, cst.Name)]
        kept = [
            e
            for e in classes.elements
            if not (
                isinstance(e.value, cst.Name)
                and e.value.value in self.renamed
                and self.renamed[e.value.value][2]  # renamed with extra arguments: a spawn class
                and self.renamed[e.value.value][1] in names
            )
        ]
        if len(kept) == len(classes.elements):
            return updated
        dropped = [_code(e.value) for e in classes.elements if e not in kept]
        kept[-1] = kept[-1].with_changes(comma=cst.Comma() if len(kept) == 1 else cst.MaybeSentinel.DEFAULT)
        self._change(original, "ddp-spawn-isinstance", f"isinstance(..., {', '.join(dropped)}) dropped from the tuple")
        return updated.with_changes(
            args=[updated.args[0], updated.args[1].with_changes(value=classes.with_changes(elements=kept))]
        )

    def _renamed_rule(self, func: str) -> str:
        """The rule a call of a renamed class falls under, from where its new name comes from."""
        module, new, _ = self.renamed[func]
        if module.startswith("torchmetrics"):
            return "metrics-import"
        if module.startswith("lightning_mgpu"):
            return "bundle-class" if new in {n for n, _ in rules.REMOVED_CLASSES.values()} else "bundle-name"
        if any(new == n for n, _ in rules.LIGHTNING_PLUGINS.values()):
            return "plugin-class"
        return "renamed-name"

    def _argparse_owner(self, owner: str, depth: int = 0) -> bool:
        """A Trainer or a LightningDataModule class: by its name, a class of this file, or a local name that every
        assignment in its scope gives one (``dm_cls = MNISTDataModule`` in each branch of an ``if``)."""
        last = owner.rsplit(".", 1)[-1]
        if last == "Trainer" or last.endswith("DataModule") or last in self.datamodules:
            return True
        if "." in owner or depth > 4 or not self._scopes:
            return False
        scope = self._scopes[-1].lookup(owner)
        values = scope.assigns.get(owner) if scope is not None else None
        return bool(values) and all(
            (_dotted(value) or "") not in ("", owner) and self._argparse_owner(_dotted(value) or "", depth + 1)
            for value in values  # type: ignore[union-attr]
        )

    def _argparse_call(self, original: cst.Call, updated: cst.Call, owner: str, method: str) -> cst.Call:
        """``Trainer.add_argparse_args(parser)`` -> ``add_argparse_args(Trainer, parser)``, and the same for
        ``from_argparse_args``, whose keyword arguments are Trainer arguments to rewrite too."""
        self._add_import("lightning_mgpu.upgrade.trainer_args", method, None)
        owner_node = original.func.value  # type: ignore[attr-defined]
        args = [cst.Arg(owner_node, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), *updated.args]
        new = updated.with_changes(func=cst.Name(method), args=args)
        self._change(
            original,
            "trainer-argparse",
            f"{owner}.{method}(...) -> {method}({owner}, ...) (lightning_mgpu.upgrade.trainer_args)",
        )
        if method == "from_argparse_args" and owner.rsplit(".", 1)[-1] == "Trainer":
            return self._trainer_call(original, new)
        return new

    def _loop_kwargs(self, original: cst.Call, updated: cst.Call, method: str) -> cst.Call:
        renames = rules.LOOP_KWARGS[method]
        if not any(a.keyword is not None and a.keyword.value in renames for a in updated.args):
            return updated
        args = []
        for arg in updated.args:
            if arg.keyword is not None and arg.keyword.value in renames:
                self._change(
                    original,
                    "trainer-loop-kwargs",
                    f"{method}({arg.keyword.value}=...) -> {method}({renames[arg.keyword.value]}=...)",
                )
                arg = arg.with_changes(keyword=cst.Name(renames[arg.keyword.value]))
            args.append(arg)
        return updated.with_changes(args=args)

    def _set_defaults(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """``parser.set_defaults(replace_sampler_ddp=False)``: the renamed Trainer flags (the others stay 1.x flags,
        which :mod:`lightning_mgpu.upgrade.trainer_args` accepts and translates)."""
        args = []
        for arg in updated.args:
            if arg.keyword is not None and arg.keyword.value in rules.RENAMED_ARGS:
                new = rules.RENAMED_ARGS[arg.keyword.value]
                self._change(
                    original, "trainer-renamed-arg", f"set_defaults({arg.keyword.value}=...) -> set_defaults({new}=...)"
                )
                arg = arg.with_changes(keyword=cst.Name(new))
            args.append(arg)
        return updated.with_changes(args=args)

    def _model_checkpoint(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """``ModelCheckpoint(filepath=...)`` (split into ``dirpath`` and ``filename`` as 1.x did), ``period`` and
        ``every_n_val_epochs`` (``every_n_epochs``); ``prefix`` gets a TODO."""
        args: list[cst.Arg] = []
        for arg in updated.args:
            key = arg.keyword.value if arg.keyword is not None else None
            if key in rules.CHECKPOINT_RENAMED:
                args.append(arg.with_changes(keyword=cst.Name(rules.CHECKPOINT_RENAMED[key])))
                self._change(
                    original,
                    "checkpoint-every-n-epochs",
                    f"ModelCheckpoint({key}=...) -> ({rules.CHECKPOINT_RENAMED[key]}=...)",
                )
            elif key == "filepath":
                path = _string(arg.value)
                if path is None and not _looks_like_a_pattern(arg.value):
                    # 1.x took a folder or a file pattern here; which one this value is, only the run knows.
                    self._todo(original, rules.todo_text("checkpoint-filepath", value=_code(arg.value)))
                    args.append(arg)
                    continue
                if path is not None:
                    head, _, tail = path.rpartition("/")
                    parts: list[tuple[str, cst.BaseExpression]] = [("dirpath", _quoted(head))] if head else []
                    parts += [("filename", _quoted(tail.removesuffix(".ckpt")))] if tail else []
                else:
                    self.plain_imports["os"] = None
                    parts = [
                        ("dirpath", cst.parse_expression(f"os.path.dirname({_code(arg.value)})")),
                        ("filename", cst.parse_expression(f"os.path.basename({_code(arg.value)})")),
                    ]
                args += [_kwarg(k, v, arg).with_changes(comma=arg.comma) for k, v in parts]
                self._change(
                    original, "checkpoint-filepath", "ModelCheckpoint(filepath=...) -> (dirpath=..., filename=...)"
                )
            else:
                args.append(arg)
        if any(a.keyword is not None and a.keyword.value == "prefix" for a in args):
            # prefix="P": in front of filename= (checkpoint_prefix.py), and of the last checkpoint's name.
            moved = moved_prefix(args, original in self._assigned_calls)
            if moved is None:
                self._todo(original, rules.todo_text("checkpoint-prefix"))
            else:
                args, last = moved
                if last is not None:
                    self._last_checkpoint_names[original] = last
                self._change(original, "checkpoint-prefix-moved", "ModelCheckpoint(prefix=...) -> filename=...")
        return updated.with_changes(args=args)

    def _is_torchmetrics(self, func: str) -> bool:
        head = func.split(".")[0]
        if head == "torchmetrics":
            return True
        if "." in func:
            return False
        return any(module.startswith("torchmetrics") and name == func for module, name, _ in self._metric_names())

    def add_metric_names(self, names: Sequence[str]) -> None:
        """torchmetrics names imported elsewhere (a notebook's other cells), known as if this source imported them."""
        self._torchmetrics_imports += [("torchmetrics", rules.TORCHMETRICS_RENAMED.get(n, n)) for n in names]

    def _metric_names(self) -> list[tuple[str, str, None]]:
        return [
            (entry[0], entry[1], None) for entry in self.renamed.values() if entry[0].startswith("torchmetrics")
        ] + [(m, n, None) for m, n in self._torchmetrics_imports]

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = _dotted(node.module) if node.module is not None else ""
        if isinstance(node.names, cst.ImportStar) or module is None:
            return
        below = next((module[len(ns) + 1 :] for ns in rules.BUNDLE_FOR_NAMESPACE if module.startswith(ns + ".")), "")
        namespace = next((ns for ns in rules.BUNDLE_FOR_NAMESPACE if module == ns or module.startswith(ns + ".")), None)
        if namespace is not None:
            # from pytorch_lightning import loggers [as pl_loggers]: a subpackage, reached as an attribute later.
            for alias in node.names:
                name = _dotted(alias.name)
                if name and name in _SUBPACKAGES and "." not in name and not below:
                    self.submodule_aliases[_alias_of(alias) or name] = (namespace, name)
        if module.startswith("torchmetrics") or below == "metrics" or below.startswith("metrics."):
            for alias in node.names:
                if isinstance(alias.name, cst.Name):
                    name = alias.name.value
                    self._torchmetrics_imports.append(("torchmetrics", rules.TORCHMETRICS_RENAMED.get(name, name)))

    def _metric_call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """A torchmetrics classification metric without ``task=``: ``num_classes=N`` makes it multiclass, as 1.x read
        it; with neither, a TODO."""
        keywords = {a.keyword.value for a in updated.args if a.keyword is not None}
        if "task" in keywords or any(a.star for a in updated.args):
            return updated
        name = (_dotted(updated.func) or "").split(".")[-1]
        # torchmetrics <= 0.10's own keywords, which 0.11's metrics refuse: dropped where they say nothing beside
        # task="multiclass"; any other value decides the task (multiclass=False: binary) and leaves the TODO.
        legacy = [a for a in updated.args if a.keyword is not None and a.keyword.value in LEGACY_METRIC_ARGS]
        if any(_literal(a.value) not in LEGACY_METRIC_ARGS[a.keyword.value] for a in legacy if a.keyword is not None):
            self._todo(original, rules.todo_text("metrics-task", name=name))
            return updated
        if legacy and ("num_classes" in keywords or self._class_counts.get(id(original)) is not None):
            kept = [a for a in updated.args if a not in legacy]
            if kept:
                kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            updated = updated.with_changes(args=kept)
            self._change(original, "metrics-legacy-args", f"{name}: " + ", ".join(_code(a).strip(", ") for a in legacy))
        if "num_classes" in keywords and name[0].isupper():
            args = [
                _kwarg("task", _quoted("multiclass")).with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                ),
                *updated.args,
            ]
            self._change(
                original, "metrics-task", f'{name}(num_classes=...) -> {name}(task="multiclass", num_classes=...)'
            )
            return updated.with_changes(args=args)
        # The class count read from the call (a functional metric) or around it: metrics.py (metrics-num-classes).
        counted = with_task(updated, name, self._class_counts.get(id(original)))
        if counted is not None:
            self._change(original, "metrics-num-classes", f'{name}(...) -> {name}(task="multiclass", num_classes=...)')
            return counted
        # No count anywhere: a stand-in that reads the task off the inputs as torchmetrics <= 0.10 did (metrics.py).
        inferred = with_inferred_task(updated, name)
        if inferred is not None:
            self._add_import("lightning_mgpu.upgrade.legacy_metrics", inferred[1], None)
            self._change(
                original, "metrics-inferred-task", f"{name}(...) -> {inferred[1]}(...): the task read off the inputs"
            )
            return inferred[0]
        self._todo(original, rules.todo_text("metrics-task", name=name))
        return updated

    def _trainer_call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        positional = [a for a in updated.args if a.keyword is None and not a.star]
        keywords = [a for a in updated.args if a.keyword is not None]
        stars = [a for a in updated.args if a.star]
        items: list[tuple[str, cst.BaseExpression, cst.Arg | None]] = [
            (a.keyword.value, a.value, a) for a in keywords if a.keyword is not None
        ]
        kept = items
        if self._grad_norm is not None and any(key == "track_grad_norm" for key, _, _ in items):
            kept = [item for item in items if item[0] != "track_grad_norm"]  # the module logs it: grad_norm.py
            self._change(original, "track-grad-norm", "track_grad_norm -> the module's on_before_optimizer_step")
        tuner_flags = [
            (key, value)
            for key, value, _ in kept
            if key in TUNER_FLAGS and (original in self._tune.unused or _literal(value) in (False, None, 0, ""))
        ]
        if original in self._tune.moved or tuner_flags:
            # auto_lr_find/auto_scale_batch_size: only tune() read them (tuner.py). Moved to the tune() statement,
            # or dropped where nothing could run them.
            kept = [item for item in kept if item[0] not in TUNER_FLAGS]
            if original in self._tune.moved:
                self._change(original, "tuner-flags", "auto_lr_find/auto_scale_batch_size -> the Tuner calls of tune()")
            else:
                self._note(original, rules.note_text("tuner-flags-unused"))
                written = ", ".join(f"{key}={_code(value)}" for key, value in tuner_flags)
                self._change(original, "tuner-flags-unused", f"{written} dropped (nothing runs them)")
        if self._manual.clip is not None and any(key in CLIP_ARGS for key, _, _ in kept):
            kept = [item for item in kept if item[0] not in CLIP_ARGS]  # the module clips: manual_optimization.py
            self._change(original, "manual-optimization", "gradient_clip_val -> the module's clip_gradients")
        trainer = rewrite_trainer_args(self._args(kept))
        translated: cst.Arg | None = None
        if (
            settles(trainer.todos)
            and not stars
            and not translates_at_run_time(original)
            and "plugins" not in {key for key, _, _ in kept}
            and not self._literal_conflict(kept)
        ):
            # Values this tool cannot read (accelerator=args.accelerator beside gpus=args.gpus): the settings they
            # decide with move into legacy_trainer_kwargs(...), translated when the Trainer is built
            # (translate_args.py).
            trainer, expression = self._moved_into_translation(kept, updated.args)
            translated = cst.Arg(star="**", value=expression)
        if any(key == "resume_from_checkpoint" for key, _, _ in trainer.items):
            value = trainer.get("resume_from_checkpoint")
            trainer.remove("resume_from_checkpoint")
            if original not in self.facts.resolved_resume:
                trainer.todo("trainer-resume", value=_code(value))  # type: ignore[arg-type]
        # Literal dicts splatted into the call: Trainer(**{"gpus": 2}).
        new_stars = []
        for star in stars:
            if star.star == "**" and is_dict_builder(star.value) and isinstance(star.value, cst.Dict):
                inner = self._rewrite_dict(star.value, original)
                if inner is not None:
                    star = star.with_changes(value=inner)
            new_stars.append(star)
        # Settings splatted from where this tool cannot read them (a config file, a function's **kwargs): 1.x keys
        # in them are translated at run time (trainer-splat-translated). Two such splats keep the TODO: translated
        # apart, a 1.x key in one and its 2.x key in the other would no longer meet.
        unknown = self.facts.unknown_splat_args.get(original, [])
        if len(unknown) == 1 and unknown[0] < len(updated.args) and updated.args[unknown[0]].star == "**":
            target = updated.args[unknown[0]]
            callbacks = trainer.get("callbacks")
            trainer.remove("callbacks")  # passed to the translation: a 1.x key's callback joins them there
            new_stars = [
                star.with_changes(value=self._translated(star.value, callbacks)) if star is target else star
                for star in new_stars
            ]
            trainer.change("trainer-splat-translated", f"Trainer(**{_code(target.value)}) -> legacy_trainer_kwargs")
            self._add_import("lightning_mgpu.upgrade.trainer_args", "legacy_trainer_kwargs", None)
        elif unknown:
            trainer.todo("trainer-splat", value=_code(original.args[max(unknown)].value))  # the last one
        strategy = trainer.get("strategy")
        if strategy is not None and _string(strategy) in rules.BUNDLE_STRATEGY_NAMES:
            self.needs_bundle_import = True
        self._emit(original, trainer)
        if not trainer.changes and new_stars == stars and len(trainer.items) == len(items):
            return updated
        new_args = positional + [self._arg(key, value, like) for key, value, like in trainer.items] + new_stars
        if translated is not None:  # last, where the call's closing parenthesis was
            if new_args:
                translated = translated.with_changes(whitespace_after_arg=new_args[-1].whitespace_after_arg)
                new_args[-1] = new_args[-1].with_changes(whitespace_after_arg=cst.SimpleWhitespace(""))
            new_args.append(translated)
        return updated.with_changes(args=self._commas(new_args, updated.args))

    def _moved_into_translation(
        self, items: list[tuple[str, cst.BaseExpression, cst.Arg | None]], originals: Any
    ) -> tuple[Any, cst.BaseExpression]:
        """The Trainer settings of ``items`` that the values this tool cannot read decide with, moved into a
        ``legacy_trainer_kwargs(...)`` call (translated when the Trainer is built): the rewrite of the rest, with the
        change recorded, and that call, written in the style of ``originals`` (a call's arguments or a dict's
        elements). Shared by a Trainer call and a settings dict (rule trainer-args-translated)."""
        moved, rest = split(items)
        trainer = rewrite_trainer_args(self._args(rest))
        separator = next((_without_comment(e.comma) for e in originals[:-1] if isinstance(e.comma, cst.Comma)), None)
        if may_be_ddp_cpu(moved, trainer.resolve):
            trainer.note("ddp-cpu-gradient-mean")
        trainer.change(
            "trainer-args-translated",
            f"{', '.join(key for key, _, _ in moved)} -> **legacy_trainer_kwargs(...) (translated at run time)",
        )
        self._add_import("lightning_mgpu.upgrade.trainer_args", "legacy_trainer_kwargs", None)
        return trainer, translation(moved, self.namespace, separator)

    def _literal_conflict(self, items: list[tuple[str, cst.BaseExpression, cst.Arg | None]]) -> bool:
        """Whether the literal settings among ``items`` conflict on their own (accelerator="ddp" beside
        strategy="ddp_spawn"), or one means nothing (progress_bar_refresh_rate=-1): a person's choice, which a
        translation at run time would only turn into an error."""
        literal = [item for item in items if _literal(item[1]) is not ... or isinstance(item[1], cst.List)]
        todos = rewrite_trainer_args(self._args(literal)).todos
        return any(rules.rule_of(text) == "trainer-conflict" for text in todos) or meaningless(items)

    def _translated(self, settings: cst.BaseExpression, callbacks: cst.BaseExpression | None) -> cst.Call:
        """``legacy_trainer_kwargs(settings[, namespace=...][, callbacks=...])``: the file's Lightning tree (for the
        callbacks a translation adds) where it is not ``lightning.pytorch``, and the call's own ``callbacks=``."""
        args = [cst.Arg(settings)]
        if self.namespace != "lightning.pytorch":
            args.append(_kwarg("namespace", _quoted(self.namespace)))
        if callbacks is not None:
            args.append(_kwarg("callbacks", callbacks))
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        args = [arg.with_changes(comma=comma) for arg in args[:-1]] + args[-1:]
        return cst.Call(func=cst.Name("legacy_trainer_kwargs"), args=args)

    def _emit(self, node: cst.CSTNode, trainer: _TrainerArgs) -> None:
        for rule, change in trainer.changes:
            self._change(node, rule, change)
        for todo in trainer.todos:
            self._todo(node, todo)
        for note in trainer.notes:
            self._note(node, note)
        for module, name in trainer.imports:
            self._add_import(module, name, None)
        if any(_string(v) in rules.BUNDLE_STRATEGY_NAMES for k, v, _ in trainer.items if k == "strategy"):
            self.needs_bundle_import = True
        for key, value, _ in trainer.items:
            if key == "strategy" and any(v in rules.BUNDLE_STRATEGY_NAMES for v in trainer.resolve(value) or ()):
                self.needs_bundle_import = True  # strategy=args.backend with "dp" among its values

    # -- dicts of Trainer settings ---------------------------------------------------------------------------------

    def _rewrite_dict(self, node: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression | None:
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
        inner = rewrite_trainer_args(self._args(items))
        if (
            settles(inner.todos)
            and not translated
            and "plugins" not in {key for key, _, _ in items}
            and not self._literal_conflict(items)
        ):
            # Values this tool cannot read: the settings they decide with are translated at run time (as in a call).
            originals = node.elements if isinstance(node, cst.Dict) else node.args  # type: ignore[attr-defined]
            inner, expression = self._moved_into_translation(items, originals)
            translated = [expression]
        if any(k == "resume_from_checkpoint" for k, _, _ in inner.items):
            inner.todo("trainer-resume", value=_code(inner.get("resume_from_checkpoint")))  # type: ignore[arg-type]
        self._emit(at, inner)
        if not inner.changes and len(inner.items) == len(items):
            return None
        if isinstance(node, cst.Dict):
            elements: list[cst.BaseDictElement] = [cst.DictElement(key=_quoted(k), value=v) for k, v, _ in inner.items]
            elements += [cst.StarredDictElement(value=value) for value in translated]
            return node.with_changes(elements=self._dict_commas(elements, node.elements))
        args = [self._arg(k, v, like) for k, v, like in inner.items]
        args += [cst.Arg(star="**", value=value) for value in translated]
        return node.with_changes(args=self._commas(args, node.args))  # type: ignore[attr-defined]

    @staticmethod
    def _dict_commas(
        elements: list[cst.BaseDictElement], original: Sequence[cst.BaseDictElement]
    ) -> list[cst.BaseDictElement]:
        separator = next(
            (_without_comment(e.comma) for e in original[:-1] if isinstance(e.comma, cst.Comma)),
            cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
        )
        last = original[-1].comma if original else cst.MaybeSentinel.DEFAULT
        return [e.with_changes(comma=last if i == len(elements) - 1 else separator) for i, e in enumerate(elements)]

    def _is_trainer_dict(self, name: str) -> bool:
        owner = self._scopes[-1].lookup(name)
        return owner is not None and (owner.node, name) in self.facts.trainer_dicts

    def _is_strategy_var(self, name: str) -> bool:
        owner = self._scopes[-1].lookup(name)
        return owner is not None and (owner.node, name) in self.facts.strategy_vars

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        target = updated.targets[0].target if len(updated.targets) == 1 else None
        if isinstance(target, cst.Name) and self._is_strategy_var(target.value):
            # backend = "ddp" if n > 1 else "ddp_cpu": the variable only carries a strategy into a Trainer.
            mapped = _strategy_value(updated.value)
            if mapped is not None and _code(mapped) != _code(updated.value):
                self._change(
                    original,
                    "trainer-strategy",
                    f"{target.value} = {_code(updated.value)} -> {_code(mapped)} (a 2.x strategy)",
                )
                return updated.with_changes(value=mapped)
            return updated
        if isinstance(target, cst.Name) and is_dict_builder(updated.value) and self._is_trainer_dict(target.value):
            new = self._rewrite_dict(updated.value, original)
            return updated if new is None else updated.with_changes(value=new)
        return updated

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        result = self._leave_simple_statement(original, updated)
        # A 1.x Trainer key the rewrites left in settings they do not follow: a TODO, never silence.
        for written in result.nodes if isinstance(result, cst.FlattenSentinel) else [result]:
            for key in legacy_keys(written) if isinstance(written, cst.CSTNode) else []:
                self._todo(original, rules.todo_text("trainer-key-unfollowed", value=repr(key)))
        return result

    def _leave_simple_statement(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if len(updated.body) != 1:
            return updated
        small = updated.body[0]
        first = original.body[0]
        if isinstance(first, cst.Assign) and first.value in self._last_checkpoint_names:
            # ModelCheckpoint(prefix=P, save_last=True): 1.x named the last checkpoint "P-last" too.
            name = self._assigned_calls[first.value]  # type: ignore[index]
            last = last_name_statement(name, self._last_checkpoint_names[first.value])  # type: ignore[index]
            return cst.FlattenSentinel([updated, last])
        if (
            isinstance(first, cst.Expr)
            and isinstance(first.value, cst.Call)
            and first.value in self._tune.tunes
            and isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
        ):
            # trainer.tune(model, dm) -> the Tuner calls the Trainer's flags asked for (tuner.py).
            statements = tune_statements(small.value, self._tune.tunes[first.value], self._tune.guards.get(first.value))
            self._add_import(f"{self.namespace}.tuner", "Tuner", None)
            self._change(original, "tuner-flags", f"{_code(first.value)} -> Tuner(...) calls")
            statements[0] = statements[0].with_changes(leading_lines=updated.leading_lines)
            return cst.FlattenSentinel(statements)
        # self.hparams = hparams -> self.save_hyperparameters(hparams): hparams is read-only in 2.x.
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and _dotted(small.targets[0].target) == "self.hparams"
            and self._class_depth
            and self._lightning_class[-1]
        ):
            self._change(original, "hparams-assign", "self.hparams = ... -> self.save_hyperparameters(...)")
            call = cst.parse_statement(f"self.save_hyperparameters({_code(small.value)})")
            return call.with_changes(leading_lines=updated.leading_lines)
        # settings["gpus"] = 2 on a dict that reaches a Trainer: each 1.x key rewritten as if passed to the call.
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Subscript)
            and isinstance(small.targets[0].target.value, cst.Name)
            and self._is_trainer_dict(small.targets[0].target.value.value)
        ):
            return self._subscript_assign(original, updated, small)
        # settings.update(gpus=2) / settings.update({"gpus": 2})
        if (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and isinstance(small.value.func, cst.Attribute)
            and small.value.func.attr.value == "update"
            and isinstance(small.value.func.value, cst.Name)
            and self._is_trainer_dict(small.value.func.value.value)
        ):
            update = small.value
            if len(update.args) == 1 and update.args[0].keyword is None and is_dict_builder(update.args[0].value):
                new = self._rewrite_dict(update.args[0].value, original)
                if new is not None:
                    update = update.with_changes(args=[update.args[0].with_changes(value=new)])
            elif update.args and all(a.keyword is not None for a in update.args):
                new = self._rewrite_dict(cst.Call(func=cst.Name("dict"), args=update.args), original)
                if isinstance(new, cst.Call):  # dict(...) in, dict(...) out
                    update = update.with_changes(args=new.args)
            return updated.with_changes(body=[small.with_changes(value=update)])
        return updated

    def _subscript_assign(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine, small: cst.Assign
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        target = small.targets[0].target
        assert isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name)
        element = target.slice[0].slice if len(target.slice) == 1 else None
        key = _string(element.value) if isinstance(element, cst.Index) else None
        if key is None:
            return updated
        inner = rewrite_trainer_args(self._args([(key, small.value, None)]))
        self._emit(original, inner)
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

    @staticmethod
    def _arg(key: str, value: cst.BaseExpression, like: cst.Arg | None) -> cst.Arg:
        if like is not None and like.keyword is not None and like.keyword.value == key and like.value is value:
            return like
        return _kwarg(key, value, like).with_changes(
            comma=like.comma if like is not None else cst.MaybeSentinel.DEFAULT
        )

    @staticmethod
    def _commas(args: list[cst.Arg], original: Sequence[cst.Arg]) -> list[cst.Arg]:
        """Every argument but the last gets a comma spaced like the call's own (one per line stays one per line); the
        last keeps the call's trailing comma, or its absence. A comma carrying a comment is used once: an argument
        split in two keeps its comment on the first."""
        last_comma = original[-1].comma if original else cst.MaybeSentinel.DEFAULT
        separator = next(
            (_without_comment(a.comma) for a in original[:-1] if isinstance(a.comma, cst.Comma)),
            cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
        )
        used: set[int] = set()
        fixed = []
        for index, arg in enumerate(args):
            if index == len(args) - 1:
                comma = last_comma
            elif isinstance(arg.comma, cst.Comma) and arg.comma is not last_comma and id(arg.comma) not in used:
                comma = arg.comma
            else:
                comma = separator
            used.add(id(comma))
            fixed.append(arg.with_changes(comma=comma))
        return fixed

    # -- LightningModule and callback hooks ------------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        bases = {(_dotted(b.value) or "").rsplit(".", 1)[-1] for b in node.bases}
        methods = {s.name.value: s for s in node.body.body if isinstance(s, cst.FunctionDef)}
        step = methods.get("training_step")
        has_optimizer_idx = (
            step is not None
            and any(p.name.value == "optimizer_idx" for p in step.params.params)
            and _uses(step.body, "optimizer_idx", "training_step") > 0
        )
        per_sample = _per_sample_steps(methods)
        # Recorded only from here on, where nothing can raise: leave_ClassDef pops what this pushed.
        self._class_depth += 1
        # A plain nn.Module (or no base): its training_epoch_end is the user's own, called by their own loop.
        self._lightning_class.append(bool(bases - rules.NON_LIGHTNING_BASES))
        if bases & {"LightningDataModule"} or bases & self.datamodules:
            self.datamodules.add(node.name.value)
        self._class_has_optimizer_idx.append(has_optimizer_idx)
        self._class_manual.append(self._manual.kind(node.name.value))
        self._class_per_sample.append(per_sample)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self._class_depth -= 1
        if self._grad_norm is not None and original.name.value == self._grad_norm.module_class:  # grad_norm.py
            updated = add_hook(updated, self._grad_norm.norm)
            self._add_import(f"{self.namespace}.utilities", "grad_norm", None)
            self._change(
                original, "track-grad-norm", "on_before_optimizer_step logs grad_norm(self, ...): track_grad_norm"
            )
        has_optimizer_idx = self._class_has_optimizer_idx.pop()
        manual = self._class_manual.pop()
        per_sample = self._class_per_sample.pop()
        if not self._lightning_class.pop():
            return updated
        if per_sample:
            updated = _step_end_into_step(updated, per_sample)
        lines = {s.name.value: self._line(s) for s in original.body.body if isinstance(s, cst.FunctionDef)}
        comments: list[tuple[str, str]] = []
        for convert in (
            convert_log_returns,
            lambda c: convert_epoch_ends(c, has_optimizer_idx, self._epoch_ends.get(original.name.value)),
            convert_renamed_hooks,
        ):
            try:
                result = convert(updated)
            except Exception as err:  # noqa: BLE001  (one rewrite of the class failed: the others still run)
                self._internal_error(original, err)
                self._failed.discard(id(original))  # a second converter's failure gets its TODO too
                continue
            updated = result.node
            for method, rule, message in result.changes:
                self.findings.append(Finding(lines.get(method, self._line(original)), message, rule=rule))
            for method, text in result.todos:
                self.findings.append(Finding(lines.get(method, self._line(original)), text, todo=True))
                comments.append((method, text))
            for module, name in result.imports:
                self._add_import(f"{self.namespace}.{module}", name, None)
        if manual:  # several optimizers -> manual optimization, as 1.x ran them: manual_optimization.py
            try:
                converted = (
                    manual_convert(updated, self._manual.clip)
                    if manual == "base"
                    else manual_convert_subclass(updated, manual)
                )
            except Exception as err:  # noqa: BLE001  (the class stays as the other rewrites left it, with its TODO)
                self._internal_error(original, err)
                converted = None
            changed = False
            if converted is None:  # the other rewrites left a shape this rule does not take: today's TODO
                text = rules.todo_text("optimizer-idx", hook="training_step")
                self.findings.append(Finding(lines.get("training_step", self._line(original)), text, todo=True))
                comments.append(("training_step", text))
            else:
                changed, updated = converted is not updated, converted
            if changed and manual == "base":
                self._change(
                    original,
                    "manual-optimization",
                    "training_step(..., optimizer_idx) -> manual optimization, each optimizer as 1.x stepped it",
                )
            elif changed:
                self._change(original, "manual-optimization", f"a subclass of a manual-optimization class: {manual}")
        return with_comments(updated, comments) if comments else updated

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef | cst.RemovalSentinel:
        kept = [d for d in updated.decorators if _dotted(d.decorator) not in self._auto_move_data]
        if len(kept) != len(updated.decorators):
            self._todo(original, rules.todo_text("auto-move-data"))
            updated = updated.with_changes(decorators=kept)
        if self._class_depth == 0 or not self._lightning_class[-1]:
            return updated
        hook = updated.name.value
        if hook in rules.HOOK_DROPPED_PARAMS:
            return self._drop_params(original, updated, hook)
        if hook in rules.EVAL_STEP_HOOKS and any(p.name.value == "optimizer_idx" for p in updated.params.params):
            dropped = drop_eval_optimizer_idx(updated)
            if dropped is None:
                self._todo(original, rules.todo_text("eval-step-optimizer-idx", hook=hook))
                return updated
            self._change(
                original, "eval-step-optimizer-idx", f"{hook}: dropped optimizer_idx, its uses read its default"
            )
            return dropped
        if hook in rules.STEP_END_HOOKS:
            if _reduce_only(updated) and hook.removesuffix("_end") in self._class_per_sample[-1]:
                # The step's outputs are per sample (reduction="none"): the reduction is kept, after each step.
                self._change(
                    original,
                    "step-end",
                    f"{hook} -> _{hook}_1x, applied to what the step returns: its outputs are per sample",
                )
                return updated.with_changes(name=cst.Name(f"_{hook}_1x"))
            if _reduce_only(updated):
                self._change(
                    original,
                    "step-end",
                    f"{hook} removed: it only reduced the replicas' outputs, which lightning_mgpu's dp does exactly",
                )
                return cst.RemoveFromParent()
            self._todo(original, rules.todo_text("step-end", hook=hook))
        return updated

    def _drop_params(self, original: cst.FunctionDef, updated: cst.FunctionDef, hook: str) -> cst.FunctionDef:
        if hook == "training_step" and self._class_manual[-1] in ("base", "helper"):
            return updated  # the step becomes _training_step_1x, index and all, when the class is left
        names = {p.name.value for p in updated.params.params}
        dropped = set()
        for name in rules.HOOK_DROPPED_PARAMS[hook]:
            if name not in names:
                continue
            if _uses(updated.body, name, hook):
                if name == "optimizer_idx":
                    self._todo(original, rules.todo_text("optimizer-idx", hook=hook))
                continue
            dropped.add(name)
        if not dropped or (hook == "backward" and "optimizer_idx" not in names):
            return updated  # backward(self, loss, optimizer) without optimizer_idx may be a 2.x signature already
        params = [p for p in updated.params.params if p.name.value not in dropped]
        if params:
            params[-1] = params[-1].with_changes(comma=updated.params.params[-1].comma)
        body = updated.body.visit(_DropSuperArgs(hook, dropped))
        self._change(
            original, "hook-param", f"{hook}: dropped {', '.join(sorted(dropped))} (gone from the 2.x signature)"
        )
        return updated.with_changes(params=updated.params.with_changes(params=params), body=body)


def namespace_of(code: str) -> str:
    """The Lightning tree some code imports (``pytorch_lightning`` for 1.x code that names neither)."""
    if "pytorch_lightning" in code:
        return "pytorch_lightning"
    if "lightning.pytorch" in code or "from lightning import pytorch" in code:
        return "lightning.pytorch"
    return "pytorch_lightning"


def upgrade_source(
    source: str,
    namespace: str | None = None,
    aliases: dict[str, str] | None = None,
    metric_names: Sequence[str] = (),
    renamed: dict[str, tuple[str, str, dict[str, str]]] | None = None,
) -> FileResult:
    """Upgrade one file's source.

    Args:
        source: Python source of a Lightning 1.x script or module.
        namespace: the Lightning tree that added imports come from (default: the one ``source`` imports).
        aliases: names that stand for a Lightning tree without ``source`` importing them (a notebook's earlier
            cells: ``{"pl": "pytorch_lightning"}``).
        metric_names: torchmetrics names imported where ``source`` does not show it (a notebook's other cells:
            ``from torchmetrics import Accuracy``), so that ``Accuracy()`` converts as in one file.
        renamed: names renamed by imports ``source`` does not show (a notebook's earlier cells:
            ``from pytorch_lightning.plugins import DDPPlugin``), as :attr:`FileResult.renamed` gives them.

    Returns:
        The upgraded source (identical when there was nothing to do) and its findings, with original line numbers.

    Raises:
        libcst.ParserSyntaxError: the source does not parse.
        UpgradeError: the rewritten source does not compile where the source did (a bug of the tool: the caller leaves
            the file as it was). An exception in one construct's rewrite is not raised: the construct stays as it
            was, with an ``internal-error`` TODO, and the rest of the file converts.

    Example::

        result = upgrade_source('trainer = Trainer(gpus=2, accelerator="dp")\\n')
        result.source  # 'trainer = Trainer(accelerator="gpu", devices=2, strategy="dp")\\n'
    """
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)  # the module is this call's own: no copy needed
    facts = FileFacts()
    read_only_visit(wrapper.module, facts)
    transformer = UpgradeTransformer(facts, namespace or namespace_of(source))
    transformer.namespace_aliases.update(aliases or {})
    transformer.renamed.update(renamed or {})
    transformer.add_metric_names(metric_names)
    new = wrapper.visit(transformer)
    try:
        code = new.code
    except Exception:  # noqa: BLE001  (a rewrite built a node libcst cannot write out)
        log.debug("a rewrite cannot be written out; again, statement by statement", exc_info=True)
        transformer = UpgradeTransformer(facts, transformer.namespace, check_code=True)
        transformer.namespace_aliases.update(aliases or {})
        transformer.renamed.update(renamed or {})
        transformer.add_metric_names(metric_names)
        new = wrapper.visit(transformer)
        code = new.code
    findings = sorted(transformer.findings, key=lambda f: (f.line, f.todo))
    if transformer.fairscale_checkpoint_line is not None:
        findings.append(
            Finding(transformer.fairscale_checkpoint_line, rules.note_text("fairscale-checkpoint"), note=True)
        )
    if code != source:
        _check_compiles(source, code)
    return FileResult(code, findings, dict(transformer.renamed))


def syntax_error(source: str, err: Exception) -> str:
    """Where and why ``source`` does not parse, in Python's own words (libcst reports the token after the error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(source, "<upgrade>", "exec", dont_inherit=True)
        except SyntaxError as syntax:
            return f"line {syntax.lineno}: {syntax.msg}"
    return f"line {getattr(err, 'raw_line', '?')}: {getattr(err, 'message', err)}"


class UpgradeError(Exception):
    """The tool produced something it must not write (a bug of the tool, never of the file)."""


def _check_compiles(before: str, after: str) -> None:
    """Raise :class:`UpgradeError` where ``after`` does not compile but ``before`` did.

    Raises:
        UpgradeError: the rewrite broke a file that compiled.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes and the like: the user's, and the same in both
        try:
            compile(after, "<upgraded>", "exec", dont_inherit=True)
        except SyntaxError as err:
            try:
                compile(before, "<original>", "exec", dont_inherit=True)
            except SyntaxError:
                return  # it did not compile before either (a newer Python's syntax, or code libcst alone accepts)
            raise UpgradeError(f"the rewrite does not compile (line {err.lineno}: {err.msg})") from err
