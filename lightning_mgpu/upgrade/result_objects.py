"""Lightning 1.0's ``TrainResult`` / ``EvalResult`` (rule ``result-object-log``; the TODO ``result-object`` stays
where the object is used in a way this module does not follow).

1.0 (``pytorch_lightning/core/step_result.py``, 0.9.0 to 1.0.8) had a step build a result object, log through it and
return it::

    result = pl.TrainResult(minimize=loss)          # or TrainResult(loss); EvalResult(checkpoint_on=loss)
    result.log("train_loss", loss, prog_bar=True)
    return result

2.x logs with ``self.log`` and a training step returns its loss. The rewrite, per hook of a Lightning module:

- ``result.log(...)`` -> ``self.log(...)`` and ``result.log_dict(...)`` -> ``self.log_dict(...)``, with 1.0's
  ``on_step``/``on_epoch`` written out where they differ from 2.x's defaults for the hook (1.0's TrainResult.log
  logged on_step=True, on_epoch=False; TrainResult.log_dict and EvalResult.log/log_dict on_step=False,
  on_epoch=True; 2.x: on_step=True, on_epoch=False in training_step(_end), on_step=False, on_epoch=True in the
  evaluation steps and the epoch ends); the other defaults (prog_bar=False, logger=True, reduce_fx=mean) agree;
- ``result = TrainResult(minimize=loss)`` -> ``result = loss`` (the step returns the loss, as 2.x wants);
  ``EvalResult(...)``/``TrainResult()`` without minimize: the assignment goes and ``return result`` returns None (or
  goes, at the end of the method);
- ``checkpoint_on=x`` / ``early_stop_on=x`` -> ``self.log("checkpoint_on", x)`` / ``self.log("early_stop_on", x)``
  (epoch means, as 1.0 reduced them), with a NOTE (rule ``result-object-monitor``): 1.0's ModelCheckpoint monitored
  "checkpoint_on" by itself and its EarlyStopping "early_stop_on"; a 2.x callback must name it.

Where the object is used otherwise (passed on, an attribute read, ``hiddens=``, a step whose outputs a
``*_step_end``/``*_epoch_end`` reads, 1.0-only keywords such as ``sync_dist_op``), nothing is rewritten in that
method and the constructor keeps its ``result-object`` TODO (calls.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.hooks import ClassResult, as_block, class_methods, name_uses, replace_method
from lightning_mgpu.upgrade.scopes import dotted, literal
from lightning_mgpu.upgrade.traverse import FunctionBodyTransformer, FunctionBodyVisitor, read_only_visit

RESULT_CLASSES = frozenset({"TrainResult", "EvalResult"})
#: Each class's constructor parameters, in order.
_PARAMS = {
    "TrainResult": ("minimize", "early_stop_on", "checkpoint_on", "hiddens"),
    "EvalResult": ("early_stop_on", "checkpoint_on", "hiddens"),
}
#: The hooks a result object is converted in -> 2.x's (on_step, on_epoch) defaults for self.log there.
HOOK_DEFAULTS = {
    "training_step": (True, False),
    "training_step_end": (True, False),
    "validation_step": (False, True),
    "validation_step_end": (False, True),
    "test_step": (False, True),
    "test_step_end": (False, True),
    "training_epoch_end": (False, True),
    "validation_epoch_end": (False, True),
    "test_epoch_end": (False, True),
}
_EPOCH_ENDS = frozenset({"training_epoch_end", "validation_epoch_end", "test_epoch_end"})
#: A step -> the hooks that read what it returns (1.0 handed them the result objects).
_CONSUMERS = {
    "training_step": ("training_step_end", "training_epoch_end"),
    "validation_step": ("validation_step_end", "validation_epoch_end"),
    "test_step": ("test_step_end", "test_epoch_end"),
}
#: (class, method) -> 1.0's (on_step, on_epoch) defaults.
_OLD_DEFAULTS = {
    ("TrainResult", "log"): (True, False),
    ("TrainResult", "log_dict"): (False, True),
    ("EvalResult", "log"): (False, True),
    ("EvalResult", "log_dict"): (False, True),
}
#: The parameters 1.0's log / log_dict took in the places 2.x's take them (the first positional ones agree).
_LOG_POSITIONAL = {
    "log": ("name", "value", "prog_bar", "logger", "on_step", "on_epoch", "reduce_fx"),
    "log_dict": ("dictionary", "prog_bar", "logger", "on_step", "on_epoch", "reduce_fx"),
}
#: Keywords both take; 1.0's sync_dist_op, tbptt_reduce_fx and tbptt_pad_token 2.x does not.
_LOG_KEYWORDS = frozenset({"prog_bar", "logger", "on_step", "on_epoch", "reduce_fx", "enable_graph", "sync_dist"})
_LOG_KEYWORDS_ALL = _LOG_KEYWORDS | {"sync_dist_group", "name", "value", "dictionary"}


def result_class(call: cst.Call) -> str | None:
    """``TrainResult`` / ``EvalResult`` where ``call`` builds one (``pl.TrainResult(...)`` or the bare name)."""
    name = (dotted(call.func) or "").rsplit(".", 1)[-1]
    return name if name in RESULT_CLASSES else None


@dataclass
class _Built:
    """One constructor call: its class and its arguments by parameter name."""

    cls: str
    args: dict[str, cst.BaseExpression]


def _built(call: cst.Call) -> _Built | None:
    """The constructor's arguments by name; None where they are not ones this rule writes out (``*args``, hiddens=,
    ``checkpoint_on=True``, an unknown keyword)."""
    cls = result_class(call)
    if cls is None:
        return None
    params = _PARAMS[cls]
    args: dict[str, cst.BaseExpression] = {}
    for index, arg in enumerate(call.args):
        if arg.star:
            return None
        name = arg.keyword.value if arg.keyword is not None else (params[index] if index < len(params) else None)
        if name not in params or name in args:
            return None
        args[name] = arg.value
    # Decision: hiddens (truncated backprop) has no self.log counterpart; checkpoint_on=True asked 1.0 for something
    # else than a value: both keep the TODO. None/False mean "not given".
    if "hiddens" in args:
        return None
    for key in ("early_stop_on", "checkpoint_on", "minimize"):
        value = literal(args[key]) if key in args else None
        if key in args and value is None:
            del args[key]
        elif key in args and value is not ...:
            if key == "checkpoint_on" and value is False:
                del args[key]
            else:
                return None
    return _Built(cls, args)


def _log_call(call: cst.Call) -> dict[str, cst.BaseExpression] | None:
    """``result.log(...)`` / ``result.log_dict(...)``'s arguments by name; None where one is not 2.x's."""
    assert isinstance(call.func, cst.Attribute)
    params = _LOG_POSITIONAL[call.func.attr.value]
    named: dict[str, cst.BaseExpression] = {}
    for index, arg in enumerate(call.args):
        if arg.star:
            return None
        name = arg.keyword.value if arg.keyword is not None else (params[index] if index < len(params) else None)
        if name is None or name not in _LOG_KEYWORDS_ALL or name in named:
            return None
        named[name] = arg.value
    return named


@dataclass
class _MethodPlan:
    """What one method's rewrite touches: its constructor calls, the statements with them, the names bound."""

    calls: list[cst.Call] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # name -> its class (all its constructors of one class)
    minimized: set[str] = field(default_factory=set)  # names some constructor of which gives minimize=


def analyse(func: cst.FunctionDef, hook: str) -> _MethodPlan | None:
    """The result objects ``func`` (hook ``hook``) builds, where every use of them is one this rule rewrites; None
    where one is not (then nothing in the method is rewritten); an empty plan where it builds none."""
    plan = _MethodPlan()
    every: list[cst.Call] = []
    failed = False
    counts: dict[str, int] = {}

    class AllCalls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if result_class(node) is not None:
                every.append(node)

    read_only_visit(func, AllCalls())
    if not every:
        return plan
    old_on_epoch_end = hook in _EPOCH_ENDS

    class Own(FunctionBodyVisitor):
        """The statements of ``func`` itself that build, log through and return a result object."""

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            nonlocal failed
            if len(node.body) != 1:
                return
            small = node.body[0]
            value = small.value if isinstance(small, (cst.Assign, cst.Return, cst.Expr)) else None
            if isinstance(small, cst.Assign) and isinstance(value, cst.Call) and result_class(value) is not None:
                built = _built(value)
                if built is None or len(small.targets) != 1 or not isinstance(small.targets[0].target, cst.Name):
                    failed = True
                    return
                name = small.targets[0].target.value
                if plan.names.setdefault(name, built.cls) != built.cls:
                    failed = True  # one name for both classes: which defaults a log call takes is not one
                plan.calls.append(value)
                counts[name] = counts.get(name, 0) + 1
                if "minimize" in built.args:
                    plan.minimized.add(name)
            elif isinstance(small, cst.Return) and isinstance(value, cst.Call) and result_class(value) is not None:
                if _built(value) is None:
                    failed = True
                    return
                plan.calls.append(value)
            elif isinstance(small, cst.Return) and isinstance(value, cst.Name):
                counts[value.value] = counts.get(value.value, 0) + 1
            elif (
                isinstance(small, cst.Expr)
                and isinstance(value, cst.Call)
                and m.matches(value.func, m.Attribute(value=m.Name(), attr=m.Name("log") | m.Name("log_dict")))
            ):
                assert isinstance(value.func, cst.Attribute) and isinstance(value.func.value, cst.Name)
                name = value.func.value.value
                named = _log_call(value)
                if named is None:
                    return  # a log call this rule does not write: its name stays uncounted, so not followed
                # 2.x raises on on_step=True in an epoch end (1.0 ignored it there)
                if old_on_epoch_end and literal(named.get("on_step", cst.Name("False"))) is not False:
                    return
                counts[name] = counts.get(name, 0) + 1

    read_only_visit(func, Own(func))
    if failed or len(plan.calls) != len(every):
        return None  # a constructor somewhere else (an argument, a nested function, a comprehension): not followed
    for name in plan.names:
        if name_uses(func.body, name) != counts.get(name, 0):
            return None  # the object passed on, read, assigned something else, logged through in a 1.0-only way
    return plan


def _arguments_read(func: cst.FunctionDef) -> bool:
    """Whether an epoch end / step end takes its outputs and reads them."""
    params = func.params.params
    if len(params) < 2:
        return False
    name = params[1].name.value
    found = False

    class Finder(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            nonlocal found
            found = found or node.value == name

    read_only_visit(func.body, Finder())
    return found


def class_plans(cls: cst.ClassDef) -> dict[str, _MethodPlan | None]:
    """Per hook of ``cls`` that builds result objects: its plan, or None where it keeps the TODO (also where the
    step's outputs go to a ``*_step_end``/``*_epoch_end`` that reads them: 1.0 handed those the objects)."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else []
    methods = {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}
    plans: dict[str, _MethodPlan | None] = {}
    for hook in HOOK_DEFAULTS:
        func = methods.get(hook)
        if func is None:
            continue
        plan = analyse(func, hook)
        if plan is not None and not plan.calls:
            continue
        consumers = [methods[c] for c in _CONSUMERS.get(hook, ()) if c in methods]
        if any(_arguments_read(c) for c in consumers):
            plan = None
        plans[hook] = plan
    return plans


@dataclass(frozen=True)
class ResultPlan:
    """For the whole file: the constructor calls (ids) the class rewrite takes, and whether it takes every mention
    of the two classes (then ``from pytorch_lightning import TrainResult`` goes too; also where nothing but the
    import names them)."""

    calls: frozenset[int] = frozenset()
    every_mention: bool = False
    #: (class name, hook) of the methods whose constructors calls.py leaves to the class rewrite
    methods: frozenset[tuple[str, str]] = frozenset()


def plan(module: cst.Module) -> ResultPlan:
    """The :class:`ResultPlan` of a parsed file (classes with a base only: a Lightning module derives from one)."""
    calls: set[int] = set()
    methods: set[tuple[str, str]] = set()
    mentions = 0

    class Finder(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            if node.bases:
                for hook, method_plan in class_plans(node).items():
                    if method_plan is not None:
                        calls.update(id(c) for c in method_plan.calls)
                        methods.add((node.name.value, hook))

        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

        def visit_Name(self, node: cst.Name) -> None:
            nonlocal mentions
            mentions += node.value in RESULT_CLASSES

    read_only_visit(module, Finder())
    # Decision: a file that only imports the classes (never names them again) loses the import too: nothing read it.
    return ResultPlan(frozenset(calls), mentions == len(calls), frozenset(methods))


# -- the rewrite -----------------------------------------------------------------------------------------------------


def _kw(name: str, value: str) -> cst.Arg:
    return cst.Arg(
        keyword=cst.Name(name),
        value=cst.parse_expression(value),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )


def _with_args(call: cst.Call, extra: list[cst.Arg]) -> cst.Call:
    """``call`` with the keywords ``extra`` added at its end."""
    args = list(call.args)
    if args and extra and args[-1].comma is cst.MaybeSentinel.DEFAULT:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    for i, arg in enumerate(extra[:-1]):
        extra[i] = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, *extra])


class _Rewrite(FunctionBodyTransformer):
    """The rewrite of one method whose :class:`_MethodPlan` is ``plan``."""

    def __init__(self, func: cst.FunctionDef, hook: str, plan: _MethodPlan, note: str) -> None:
        super().__init__()
        self.func, self.hook, self.plan, self.note = func, hook, plan, note
        self.monitored: list[str] = []

    def _monitor_lines(self, built: _Built) -> list[cst.BaseStatement]:
        """``self.log("checkpoint_on", x)`` / ``self.log("early_stop_on", x)``: the epoch's mean, as 1.0 took it."""
        code = cst.Module(body=[]).code_for_node
        lines: list[cst.BaseStatement] = []
        # 1.0 averaged a training step's checkpoint_on/early_stop_on over the epoch; 2.x logs a training step's value
        # per step unless told: on_epoch=True (an evaluation step and an epoch end average by default).
        extra = ", on_step=False, on_epoch=True" if HOOK_DEFAULTS[self.hook] == (True, False) else ""
        for key in ("checkpoint_on", "early_stop_on"):
            if key in built.args:
                line = cst.parse_statement(f'self.log("{key}", {code(built.args[key])}{extra})')
                if not lines:
                    line = line.with_changes(
                        leading_lines=[cst.EmptyLine(indent=True, comment=cst.Comment(f"# {self.note}"))]
                    )
                lines.append(line)
                self.monitored.append(key)
        return lines

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        if len(updated.body) != 1:
            return updated
        small = updated.body[0]
        value = small.value if isinstance(small, (cst.Assign, cst.Return, cst.Expr)) else None
        if not isinstance(value, cst.Call) and not (isinstance(small, cst.Return) and isinstance(value, cst.Name)):
            return updated
        lines: list[cst.BaseStatement] = []
        if isinstance(value, cst.Call) and result_class(value) is not None:
            built = _built(value)
            assert built is not None
            lines = self._monitor_lines(built)
            minimize = built.args.get("minimize")
            if isinstance(small, cst.Return):
                value = minimize or cst.Name("None")
                lines.append(updated.with_changes(body=[small.with_changes(value=value)], leading_lines=[]))
            elif minimize is not None or (
                isinstance(small, cst.Assign)
                and isinstance(small.targets[0].target, cst.Name)
                and small.targets[0].target.value in self.plan.minimized
            ):
                # the name now holds what the step returns: its loss (None where this constructor gave none)
                lines.append(
                    updated.with_changes(
                        body=[small.with_changes(value=minimize or cst.Name("None"))], leading_lines=[]
                    )
                )
        elif isinstance(small, cst.Return) and isinstance(value, cst.Name):
            if value.value not in self.plan.names or value.value in self.plan.minimized:
                return updated
            lines = [updated.with_changes(body=[small.with_changes(value=cst.Name("None"))], leading_lines=[])]
        elif isinstance(small, cst.Expr) and isinstance(value, cst.Call):
            func = value.func
            if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
                return updated
            owner = self.plan.names.get(func.value.value)
            if owner is None or func.attr.value not in ("log", "log_dict"):
                return updated
            named = _log_call(value)
            assert named is not None
            extra: list[cst.Arg] = []
            if self.hook not in _EPOCH_ENDS:
                old = _OLD_DEFAULTS[(owner, func.attr.value)]
                new = HOOK_DEFAULTS[self.hook]
                # 1.0's default written out where 2.x's differs for this hook, and the call did not say
                for key, was, now in (("on_step", old[0], new[0]), ("on_epoch", old[1], new[1])):
                    if was != now and key not in named:
                        extra.append(_kw(key, str(was)))
            call = _with_args(value.with_changes(func=func.with_changes(value=cst.Name("self"))), extra)
            return updated.with_changes(body=[small.with_changes(value=call)])
        else:
            return updated
        if not lines:
            return cst.RemoveFromParent()
        first = lines[0]
        assert isinstance(first, cst.SimpleStatementLine)
        lines[0] = first.with_changes(leading_lines=[*updated.leading_lines, *first.leading_lines])
        return cst.FlattenSentinel(lines)


def _strip_trailing_none(func: cst.FunctionDef) -> cst.FunctionDef:
    """A ``return None`` this rewrite left as the method's last statement goes (a hook that ends returns None); a
    method of nothing else gets ``pass``."""
    if not isinstance(func.body, cst.IndentedBlock) or not func.body.body:
        return func
    last = func.body.body[-1]
    if (
        isinstance(last, cst.SimpleStatementLine)
        and len(last.body) == 1
        and isinstance(last.body[0], cst.Return)
        and isinstance(last.body[0].value, cst.Name)
        and last.body[0].value.value == "None"
        and not any(line.comment for line in last.leading_lines)
    ):
        rest = list(func.body.body[:-1]) or [cst.SimpleStatementLine(body=[cst.Pass()])]
        return func.with_changes(body=func.body.with_changes(body=rest))
    return func


def _empty_blocks(func: cst.FunctionDef) -> bool:
    """Whether a rewrite emptied a block (a branch that only built the object): libcst would not write it."""
    found = False

    class Finder(cst.CSTVisitor):
        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
            nonlocal found
            found = found or not node.body

    read_only_visit(func, Finder())
    return found


def rewrite(func: cst.FunctionDef, hook: str, plan: _MethodPlan, note: str) -> tuple[cst.FunctionDef, list[str]] | None:
    """``func`` rewritten as its plan says, and the names it now logs for a callback to monitor; None where the
    rewrite would leave an empty block (the TODO stays)."""
    transformer = _Rewrite(func, hook, plan, note)
    new = func.visit(transformer)
    assert isinstance(new, cst.FunctionDef)
    new = _strip_trailing_none(new)
    if _empty_blocks(new):
        return None
    return new, transformer.monitored


def convert_result_objects(cls: cst.ClassDef, planned: frozenset[tuple[str, str]]) -> ClassResult:
    """The hooks of a Lightning module ``cls`` that build result objects, rewritten; ``planned``: the (class, hook)
    pairs whose constructors calls.py left without a TODO (one that does not convert now gets its TODO here)."""
    result = ClassResult(cls)
    note = rules.note_text("result-object-monitor")
    for hook, method_plan in class_plans(cls).items():
        method = class_methods(result.node)[hook]
        out = None if method_plan is None else rewrite(as_block(method), hook, method_plan, note)
        if out is None:
            if (cls.name.value, hook) in planned:
                result.todos.append((hook, rules.todo_text("result-object", name="TrainResult/EvalResult")))
            continue
        new, monitored = out
        result.node = replace_method(result.node, hook, [new])
        result.changes.append((hook, "result-object-log", f"{hook}: TrainResult/EvalResult -> self.log(...)"))
        if monitored:
            result.notes.append((hook, note))
    return result
