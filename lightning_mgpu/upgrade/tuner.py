"""1.x's tuner entry points -> 2.x's ``Tuner`` (rule ``tuner``).

- ``trainer.tuner.lr_find(...)`` / ``trainer.lr_find(...)`` -> ``Tuner(trainer).lr_find(..., update_attr=False)``: 1.x
  left the model's learning rate alone unless asked (``update_attr=False``), 2.x sets it by default; where the result
  went (``lr_finder = ...``, ``model.hparams.lr = lr_finder.suggestion()``) stays as written.
- ``trainer.tuner.scale_batch_size(...)`` / ``trainer.scale_batch_size(...)`` ->
  ``Tuner(trainer).scale_batch_size(...)``.

``trainer.tune()`` and the ``auto_lr_find``/``auto_scale_batch_size`` flags keep their TODOs (``trainer-tune``, ...)
where :func:`tune_plan` finds no place for them; ``result = trainer.tune(...)`` read as ``result["lr_find"]`` becomes
the dict 1.x returned (:func:`tune_result`, rule ``tuner-tune-result``).

The Tuner comes from the file's own namespace (``pytorch_lightning.tuner`` or ``lightning.pytorch.tuner``). Calls with
more positional arguments than ``model, train_dataloaders, val_dataloaders`` are left as they are (2.x put
``dataloaders`` before ``datamodule``), as are flags whose value this file does not show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

from lightning_mgpu.upgrade.trainer_owners import BY_NAME, TrainerOwners
from lightning_mgpu.upgrade.traverse import read_only_visit

METHODS = ("lr_find", "scale_batch_size")
#: 1.x keyword names of the tuner methods that 2.x renamed.
RENAMED_KEYWORDS = {"train_dataloader": "train_dataloaders", "val_dataloader": "val_dataloaders"}


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _kwarg(name: str, value: str) -> cst.Arg:
    equal = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return cst.Arg(keyword=cst.Name(name), value=cst.parse_expression(value), equal=equal)


def _gives_a_bool(node: cst.BaseExpression) -> bool:
    """Whether an expression's value is a bool by its form: a comparison, ``not x``, or ``and``/``or`` of those."""
    if isinstance(node, cst.Comparison):
        return True
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        return True
    if isinstance(node, cst.BooleanOperation):
        return _gives_a_bool(node.left) and _gives_a_bool(node.right)
    return False


def _with_args(args: Sequence[cst.Arg], extra: list[cst.Arg]) -> list[cst.Arg] | None:
    """``args`` with renamed 1.x keywords and ``extra`` appended; None where the positional arguments would shift."""
    if sum(1 for a in args if a.keyword is None and not a.star) > 3:
        return None
    given = {a.keyword.value for a in args if a.keyword is not None}
    out = [
        a.with_changes(keyword=cst.Name(RENAMED_KEYWORDS[a.keyword.value]))
        if a.keyword is not None and a.keyword.value in RENAMED_KEYWORDS
        else a
        for a in args
    ]
    extra = [e for e in extra if e.keyword is not None and e.keyword.value not in given]
    if extra and out and out[-1].comma is cst.MaybeSentinel.DEFAULT:
        out[-1] = out[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    for index, arg in enumerate(extra):
        last = index == len(extra) - 1
        out.append(arg if last else arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
    return out


def tuner_owner(func: cst.BaseExpression, is_trainer: TrainerOwners = BY_NAME) -> tuple[cst.BaseExpression, str] | None:
    """For ``trainer.tuner.lr_find`` / ``trainer.lr_find`` (and ``scale_batch_size``): the trainer's expression and
    the method; None for anything else. Only a Trainer counts (``is_trainer``: bound from one, or named like one)."""
    if not isinstance(func, cst.Attribute) or func.attr.value not in METHODS:
        return None
    owner = func.value
    if isinstance(owner, cst.Attribute) and owner.attr.value == "tuner":
        owner = owner.value
    if not is_trainer(owner):
        return None
    return owner, func.attr.value


def tuner_call(call: cst.Call, trainer: cst.BaseExpression, method: str) -> cst.Call | None:
    """``trainer.tuner.<method>(...)`` -> ``Tuner(trainer).<method>(...)`` (``update_attr=False`` for lr_find, as 1.x
    defaulted); None where the arguments cannot be carried over.

    Args:
        call: the 1.x call.
        trainer: the trainer's expression.
        method: ``lr_find`` or ``scale_batch_size``.
    """
    extra = [_kwarg("update_attr", "False")] if method == "lr_find" else []
    args = _with_args(call.args, extra)
    if args is None:
        return None
    tuner = cst.Call(func=cst.Name("Tuner"), args=[cst.Arg(trainer.deep_clone())])
    return call.with_changes(func=cst.Attribute(value=tuner, attr=cst.Name(method)), args=args)


# -- auto_lr_find= / auto_scale_batch_size= and trainer.tune() (rules tuner-flags and tuner-flags-unused) -------------
#: The Trainer flags 1.x's ``trainer.tune()`` read, and the Tuner method each ran (in this order).
FLAGS = {"auto_scale_batch_size": "scale_batch_size", "auto_lr_find": "lr_find"}
#: ``trainer.tune``'s positional parameters this rewrite carries over (1.x put datamodule 4th before 1.8, dataloaders
#: after: more than three positional arguments are left alone), and its keywords, renamed where 2.x renamed them.
TUNE_POSITIONAL = 3
TUNE_KEYWORDS = {
    "model": "model",
    "train_dataloaders": "train_dataloaders",
    "train_dataloader": "train_dataloaders",
    "val_dataloaders": "val_dataloaders",
    "val_dataloader": "val_dataloaders",
    "datamodule": "datamodule",
}
#: A trainer's methods that run a loop: a module-level trainer that calls one belongs to a script.
_RUNS = frozenset({"fit", "validate", "test", "predict"})
#: Attributes of a trainer that read or run the flags: a trainer reached through them keeps the flags' TODO.
_READS_FLAGS = frozenset({"tune", *FLAGS})


@dataclass
class TunePlan:
    """What the file does with each Trainer built with ``auto_lr_find=`` / ``auto_scale_batch_size=``.

    ``unused``: Trainer calls whose flags are dropped because nothing could run them (the trainer is a local name whose
    ``tune()`` is never called, and it never leaves its function); ``moved``: Trainer calls whose flags move to their
    ``tune()`` statements; ``tunes``: each such ``trainer.tune(...)`` call -> the flags' values (the Trainer's own
    expressions).
    """

    unused: set[cst.Call] = field(default_factory=set)
    moved: set[cst.Call] = field(default_factory=set)
    tunes: dict[cst.Call, dict[str, cst.BaseExpression]] = field(default_factory=dict)
    #: ``if X: trainer.tune(...)`` (the call alone in its if's body) -> X's code: a flag X needs no second if.
    guards: dict[cst.Call, str] = field(default_factory=dict)
    #: ``result = trainer.tune(...)`` whose trainer's flags this file does not show, and whose result is only read
    #: as ``result["lr_find"]`` / ``result["scale_batch_size"]`` -> the Tuner methods those keys name, in 1.x's order
    #: (rule tuner-tune-result: :func:`tune_result`).
    results: dict[cst.Call, list[str]] = field(default_factory=dict)
    #: ``trainer.tune(...)`` whose trainer name is only ever assigned ``Trainer.from_argparse_args(args, ...)`` (no
    #: flag written in it): the flags are the parsed ones, which the converted from_argparse_args keeps on the
    #: Trainer, and the call becomes ``legacy_tune(trainer, ...)`` (rule tuner-flags-read: :func:`read_flags_call`).
    read_flags: set[cst.Call] = field(default_factory=set)


def _is_trainer(call: cst.Call) -> bool:
    """``Trainer(...)`` / ``pl.Trainer(...)``, and ``Trainer.from_argparse_args(args, auto_lr_find=True, ...)``: only
    the flags written in the call count (:func:`_flag_values` reads its keywords); a flag the parsed arguments hold is
    left to the run-time translation, which refuses it loudly rather than dropping it."""
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    if name == "from_argparse_args" and isinstance(func, cst.Attribute):
        owner = func.value
        return (owner.attr.value if isinstance(owner, cst.Attribute) else getattr(owner, "value", "")) == "Trainer"
    return name == "Trainer"


def _flag_values(call: cst.Call) -> dict[str, cst.BaseExpression]:
    return {a.keyword.value: a.value for a in call.args if a.keyword is not None and a.keyword.value in FLAGS}


def _tune_args(call: cst.Call) -> list[cst.Arg] | None:
    """``trainer.tune(...)``'s arguments as a Tuner method takes them; None where they cannot be carried over (more
    than three positional, ``scale_batch_size_kwargs=``/``lr_find_kwargs=``/``method=``, a splat)."""
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) > TUNE_POSITIONAL or any(a.star for a in call.args):
        return None
    out = []
    for arg in call.args:
        if arg.keyword is None:
            out.append(arg)
        elif arg.keyword.value in TUNE_KEYWORDS:
            out.append(arg.with_changes(keyword=cst.Name(TUNE_KEYWORDS[arg.keyword.value])))
        else:
            return None
    return out


class _TuneFacts(cst.CSTVisitor):
    """One pass: per function (and the module), its Trainer assignments with tuner flags, its ``x.tune(...)``
    statements, and how each name is used."""

    def __init__(self, is_trainer: TrainerOwners = BY_NAME) -> None:
        super().__init__()
        self.is_trainer = is_trainer  # which x of x.tune(...) is a Trainer (trainer_owners.py)
        self._stack: list[cst.CSTNode] = []
        self.parents: dict[cst.CSTNode, cst.CSTNode | None] = {}
        self.assigns: dict[tuple[cst.CSTNode, str], list[cst.BaseExpression]] = {}
        self.trainers: list[tuple[cst.CSTNode, str, cst.Call]] = []
        self.tunes: dict[tuple[cst.CSTNode, str], list[cst.Call]] = {}
        self.statements: set[cst.Call] = set()  # calls that are a statement of their own
        self.guards: dict[cst.Call, str] = {}  # a call alone in an if's body -> the if's test
        self.attributes: dict[tuple[cst.CSTNode, str], list[str]] = {}  # name -> attributes read off it
        self.uses: dict[tuple[cst.CSTNode, str], int] = {}  # name -> loads and stores, attribute reads included
        #: name = x.tune(...) -> the tune() calls; name[...] -> each subscript's literal key (None: another key)
        self.tune_results: dict[tuple[cst.CSTNode, str], list[cst.Call]] = {}
        self.subscripts: dict[tuple[cst.CSTNode, str], list[str | None]] = {}
        self._not_a_use: set[int] = set()  # Name nodes that name an attribute, a keyword or a parameter

    def _push(self, node: cst.CSTNode) -> None:
        self.parents[node] = self._stack[-1] if self._stack else None
        self._stack.append(node)

    def visit_Module(self, node: cst.Module) -> None:
        self._push(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._not_a_use.add(id(node.name))
        for param in [*node.params.params, *node.params.kwonly_params, *node.params.posonly_params]:
            self._not_a_use.add(id(param.name))
            self.assigns.setdefault((node, param.name.value), []).append(cst.Name("__parameter__"))
        if isinstance(node.params.star_arg, cst.Param):
            self._not_a_use.add(id(node.params.star_arg.name))
        if node.params.star_kwarg is not None:
            self._not_a_use.add(id(node.params.star_kwarg.name))
        self._push(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._stack.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._not_a_use.add(id(node.name))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._not_a_use.add(id(node.keyword))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._not_a_use.add(id(node.attr))
        if isinstance(node.value, cst.Name):
            self.attributes.setdefault((self._stack[-1], node.value.value), []).append(node.attr.value)

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self._not_a_use:
            key = (self._stack[-1], node.value)
            self.uses[key] = self.uses.get(key, 0) + 1

    def visit_If(self, node: cst.If) -> None:
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
        if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1:
            only = body[0].body[0]
            if isinstance(only, cst.Expr) and isinstance(only.value, cst.Call):
                self.guards[only.value] = _code(node.test)

    def visit_Expr(self, node: cst.Expr) -> None:
        if isinstance(node.value, cst.Call):
            self.statements.add(node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self.assigns.setdefault((self._stack[-1], target.target.value), []).append(node.value)
                if isinstance(node.value, cst.Call) and _is_trainer(node.value) and _flag_values(node.value):
                    self.trainers.append((self._stack[-1], target.target.value, node.value))
                if (
                    isinstance(node.value, cst.Call)
                    and len(node.targets) == 1
                    and _tune_owner(node.value, self.is_trainer)
                ):
                    self.tune_results.setdefault((self._stack[-1], target.target.value), []).append(node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        # trainer: Trainer = Trainer.from_argparse_args(args): an assignment (a bare annotation binds nothing, but
        # its name is counted as a use, which keeps the name out of every plan).
        if isinstance(node.target, cst.Name) and node.value is not None:
            self.assigns.setdefault((self._stack[-1], node.target.value), []).append(node.value)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if isinstance(node.value, cst.Name):
            index = node.slice[0].slice if len(node.slice) == 1 else None
            key = _literal_value(index.value) if isinstance(index, cst.Index) else None
            written = key if isinstance(key, str) else None
            self.subscripts.setdefault((self._stack[-1], node.value.value), []).append(written)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "tune" and isinstance(func.value, cst.Name):
            self.tunes.setdefault((self._stack[-1], func.value.value), []).append(node)

    def nested_uses(self, scope: cst.CSTNode, name: str) -> bool:
        """Whether a function inside ``scope`` reads ``name`` without assigning it itself (a closure)."""
        for (inner, used), count in self.uses.items():
            if used != name or inner is scope or not count or (inner, name) in self.assigns:
                continue
            parent = self.parents.get(inner)
            while parent is not None and parent is not scope:
                parent = self.parents.get(parent)
            if parent is scope:
                return True
        return False


def _tune_owner(call: cst.Call, is_trainer: TrainerOwners) -> bool:
    """``trainer.tune(...)`` / ``self.trainer.tune(...)``: a Trainer's (as calls.py's TODO reads it)."""
    func = call.func
    return isinstance(func, cst.Attribute) and func.attr.value == "tune" and is_trainer(func.value)


def _result_keys(facts: _TuneFacts, plan: TunePlan) -> None:
    """``result = trainer.tune(...)`` read only as ``result["lr_find"]`` (and/or ``["scale_batch_size"]``): 1.x's
    tune() returned a dict with a key for each tuner it ran, so those keys say which ran (plan.results)."""
    for (scope, name), calls in facts.tune_results.items():
        keys = facts.subscripts.get((scope, name), [])
        if (
            len(calls) != 1
            or calls[0] in plan.tunes
            or len(facts.assigns.get((scope, name), [])) != 1
            or facts.nested_uses(scope, name)
            or _tune_args(calls[0]) is None
            or not keys
            or not all(key in FLAGS.values() for key in keys)
            # every use of the name but its assignment is one of those subscripts (not passed on, not iterated)
            or facts.uses.get((scope, name), 0) != 1 + len(keys)
        ):
            continue
        plan.results[calls[0]] = [method for method in FLAGS.values() if method in keys]


#: legacy_tune's keywords beside tune()'s loaders: 1.4-1.9's per-tuner arguments, passed on as they are.
_TUNER_KWARGS = frozenset({"scale_batch_size_kwargs", "lr_find_kwargs"})


def _read_flags_args(call: cst.Call) -> list[cst.Arg] | None:
    """``trainer.tune(...)``'s arguments as :func:`~lightning_mgpu.upgrade.tuning.legacy_tune` takes them after the
    trainer: the loaders as :func:`_tune_args` carries them, and ``scale_batch_size_kwargs=``/``lr_find_kwargs=``."""
    tuner_kwargs = [a for a in call.args if a.keyword is not None and a.keyword.value in _TUNER_KWARGS]
    rest = _tune_args(call.with_changes(args=[a for a in call.args if a not in tuner_kwargs]))
    return None if rest is None else [*rest, *tuner_kwargs]


def _from_parsed_flags(facts: _TuneFacts, plan: TunePlan) -> None:
    """``trainer.tune(...)`` whose trainer name, in the scope of the call, is only ever assigned
    ``Trainer.from_argparse_args(args, ...)`` without a tuner flag written in it, and only ever used as
    ``trainer.<attribute>``: every Trainer that call can reach holds the parsed flags (plan.read_flags)."""
    for (scope, name), calls in facts.tunes.items():
        assigned = facts.assigns.get((scope, name), [])
        attributes = facts.attributes.get((scope, name), [])
        if (
            not assigned
            or not all(
                isinstance(value, cst.Call)
                and _is_trainer(value)
                and _is_from_argparse(value)
                and not _flag_values(value)
                for value in assigned
            )  # fmt: skip
            or facts.uses.get((scope, name), 0) != len(assigned) + len(attributes)
            or facts.nested_uses(scope, name)
            or set(attributes) & (set(FLAGS) | {"tuner"})  # trainer.auto_lr_find = ...: the flags change
        ):
            continue
        for call in calls:
            if call not in plan.tunes and call not in plan.results and _read_flags_args(call) is not None:
                plan.read_flags.add(call)


def _is_from_argparse(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "from_argparse_args"


def read_flags_call(call: cst.Call) -> cst.Call:
    """``trainer.tune(model, dm)`` -> ``legacy_tune(trainer, model, dm)``: the tuners the parsed flags turned on, run
    by 2.x's Tuner as 1.x's tune() ran them, and 1.x's result (:func:`~lightning_mgpu.upgrade.tuning.legacy_tune`)."""
    trainer = call.func.value  # type: ignore[attr-defined]
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    args = _read_flags_args(call) or []
    first = cst.Arg(trainer.deep_clone(), comma=comma if args else cst.MaybeSentinel.DEFAULT)
    if args and args[-1].comma is not cst.MaybeSentinel.DEFAULT:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(func=cst.Name("legacy_tune"), args=[first, *args])


def tune_result(call: cst.Call, methods: list[str]) -> cst.Dict:
    """``trainer.tune(model, ...)`` -> ``{"lr_find": Tuner(trainer).lr_find(model, ...)}`` (one entry per method of
    ``methods``, in 1.x's order): the dict 1.x's tune() returned, built by the 2.x calls; ``update_attr`` left at
    2.x's default (True), as 1.x's tune() set the learning rate it found."""
    trainer = call.func.value  # type: ignore[attr-defined]
    args = _tune_args(call) or []
    elements = []
    for method in methods:
        tuned = cst.Call(
            func=cst.Attribute(
                value=cst.Call(func=cst.Name("Tuner"), args=[cst.Arg(trainer.deep_clone())]), attr=cst.Name(method)
            ),
            args=_with_args(args, []) or args,
        )
        elements.append(cst.DictElement(key=cst.SimpleString(f'"{method}"'), value=tuned))
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    elements = [e.with_changes(comma=comma) for e in elements[:-1]] + elements[-1:]
    return cst.Dict(elements=elements)


def tune_plan(
    module: cst.Module, notebook_unused: frozenset[str] = frozenset(), is_trainer: TrainerOwners = BY_NAME
) -> TunePlan:
    """Where a Trainer's ``auto_lr_find=`` / ``auto_scale_batch_size=`` can go, read from the whole file.

    A Trainer assigned once to a local name: where each ``name.tune(...)`` of its function is a statement of its own
    with arguments a Tuner method takes, the flags move there (``tunes``). A Trainer assigned to a local name (once,
    or in several plain assignments: one per branch of an if): where the function never calls ``name.tune()`` and the
    name is only ever assigned or used as ``name.<attribute>`` there (not returned, passed on or stored, not read by a
    nested function), nothing could run them and they are dropped (``unused``; at module level only in a script that
    runs the trainer there, since another module may import a trainer and tune it).

    Args:
        module: the parsed file (a notebook's cell).
        notebook_unused: in a notebook's cell, the module-level trainer names whose flags nothing in the whole
            notebook could run (:func:`notebook_unused_trainers`): their Trainer calls in this cell are ``unused``.
        is_trainer: which owners of ``x.tune(...)`` are Trainers (:mod:`~lightning_mgpu.upgrade.trainer_owners`).
    """
    plan = _plan(module, importable=True, is_trainer=is_trainer)
    if notebook_unused:
        facts = _TuneFacts()
        read_only_visit(module, facts)
        for scope, name, call in facts.trainers:
            if isinstance(scope, cst.Module) and name in notebook_unused and call not in plan.moved:
                plan.unused.add(call)
    return plan


def notebook_unused_trainers(module: cst.Module) -> frozenset[str]:
    """The module-level trainer names of a notebook (its code cells joined into ``module``) whose flags nothing in
    it could run: as for a function's local trainer (:func:`tune_plan`), over every cell. A notebook is not imported
    by another module, so a module-level trainer that no cell tunes or hands on is never tuned (a cell that builds the
    trainer and another that calls ``trainer.tuner.lr_find`` are read together).

    Args:
        module: every code cell of the notebook, in order, as one module.
    """
    facts = _TuneFacts()
    read_only_visit(module, facts)
    plan = _plan(module, importable=False)
    names = {name for scope, name, _ in facts.trainers if isinstance(scope, cst.Module)}
    return frozenset(
        name
        for name in names
        if all(call in plan.unused for scope, n, call in facts.trainers if n == name and isinstance(scope, cst.Module))
    )


def _plan(module: cst.Module, importable: bool, is_trainer: TrainerOwners = BY_NAME) -> TunePlan:
    """:func:`tune_plan`'s reading; ``importable``: another module may import the file's module-level trainers (a
    notebook's may not)."""
    facts = _TuneFacts(is_trainer)
    read_only_visit(module, facts)
    plan = TunePlan()
    for scope, name, call in facts.trainers:
        if facts.nested_uses(scope, name):
            continue
        assigned = facts.assigns.get((scope, name), [])
        # The name's stores: its plain assignments (a parameter of the same name is bound by no use of it).
        stores = sum(1 for value in assigned if not (isinstance(value, cst.Name) and value.value == "__parameter__"))
        attributes = facts.attributes.get((scope, name), [])
        tunes = facts.tunes.get((scope, name), [])
        # Every use of the name is one of its plain assignments or an attribute read off it (x.fit, x.logger): the
        # object never leaves the scope. Several assignments (trainer = Trainer(...) in each branch of an if) are
        # fine for dropping the flags: no binding of the name reaches a tune() or anything outside.
        only_attributes = facts.uses.get((scope, name), 0) == stores + len(attributes)
        if tunes:
            if (
                len(assigned) == 1
                and only_attributes
                and attributes.count("tune") == len(tunes)
                and not set(attributes) & (_READS_FLAGS - {"tune"})
                and ("tuner" not in attributes or "auto_scale_batch_size" not in _flag_values(call))
                and all(tune in facts.statements and _tune_args(tune) is not None for tune in tunes)
                and len(tunes) == 1  # 1.9's tune() turned the flags off once it had run them; 1.4's did not
            ):
                plan.moved.add(call)
                plan.tunes[tunes[0]] = _flag_values(call)
                if tunes[0] in facts.guards:
                    plan.guards[tunes[0]] = facts.guards[tunes[0]]
        elif (
            only_attributes
            # At module level another module may import the trainer and tune it, unless the file is a script that
            # runs it (trainer.fit/validate/test/predict at module level: importing the file would train).
            and (not importable or not isinstance(scope, cst.Module) or set(attributes) & _RUNS)
            and not set(attributes) & _READS_FLAGS
            # 1.4's trainer.tuner.lr_find() ran tune() with auto_lr_find on: auto_scale_batch_size ran there too.
            and ("tuner" not in attributes or "auto_scale_batch_size" not in _flag_values(call))
        ):
            plan.unused.add(call)
    _result_keys(facts, plan)
    _from_parsed_flags(facts, plan)
    return plan


def tune_statements(
    call: cst.Call, flags: dict[str, cst.BaseExpression], guard: str | None = None
) -> list[cst.BaseStatement]:
    """``trainer.tune(model, ...)`` (a statement) -> the Tuner calls 1.x's tune() made with these flags, in its order:
    ``Tuner(trainer).scale_batch_size(..., mode=...)`` then ``Tuner(trainer).lr_find(..., attr_name=...)``. A literal
    flag that is off runs nothing; a flag this tool cannot read runs under ``if flag:`` (unless ``guard``, the test of
    the if the tune() call sits alone in, is that flag already), its string value (a mode, an attribute name) passed
    on as 1.x did.

    Args:
        call: the ``trainer.tune(...)`` call (its arguments as :func:`_tune_args` takes them).
        flags: the Trainer's ``auto_scale_batch_size`` / ``auto_lr_find`` values.
        guard: the code of the test of the ``if`` whose body is the tune() call alone.
    """
    trainer = call.func.value  # type: ignore[attr-defined]
    args = _tune_args(call) or []
    out: list[cst.BaseStatement] = []
    for flag, method in FLAGS.items():
        value = flags.get(flag)
        if value is None:
            continue
        written = _code(value)
        option = "mode" if method == "scale_batch_size" else "attr_name"
        default = '"power"' if method == "scale_batch_size" else '""'
        known = _literal_value(value)
        extra: list[cst.Arg] = []
        if known is ... and _gives_a_bool(value):
            pass  # auto_lr_find=lr == 0: on or off, never an attribute's name: the default attribute or mode
        elif known is ...:
            extra = [_kwarg(option, f"{written} if isinstance({written}, str) else {default}")]
        elif isinstance(known, str):
            extra = [_kwarg(option, written)]
        elif not known:
            continue  # off: 1.x's tune() ran nothing for it
        tuned = cst.Call(
            func=cst.Attribute(
                value=cst.Call(func=cst.Name("Tuner"), args=[cst.Arg(trainer.deep_clone())]), attr=cst.Name(method)
            ),
            args=_with_args(args, extra) or args,
        )
        statement: cst.BaseStatement = cst.SimpleStatementLine([cst.Expr(tuned)])
        if known is ... and written != guard:
            statement = cst.If(test=value.deep_clone(), body=cst.IndentedBlock([statement]))
        out.append(statement)
    return out or [cst.SimpleStatementLine([cst.Pass()])]


def _literal_value(node: cst.BaseExpression) -> object:
    """True/False/None, a string or a number; ``...`` for anything else."""
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    if isinstance(node, (cst.Integer, cst.Float)):
        return node.evaluated_value
    return ...
