"""The pre-pass of ``lightning-mgpu upgrade``: what one file says about its names, read before anything is rewritten.

Real 1.x scripts seldom pass literals straight to ``Trainer(...)``. They build a dict of settings and splat it
(``Trainer(**kwargs)``), pick a backend in a variable (``backend = "ddp" if n > 1 else None``), or read a flag
(``accelerator=args.accelerator`` with ``parser.add_argument("--accelerator", default="ddp")``). This pass records,
per scope (the module and each function), the values assigned to each name, the argparse flags of the file, the dicts
that reach a Trainer, and the ``resume_from_checkpoint`` that can move to ``fit``; the transformer asks it what a value
may hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeGuard

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.trainer_names import annotates_trainer, named_like_trainer

#: Stands for "a list literal" among the values a name may hold (lists are not hashable).
LIST = ("<list>",)
#: Stands for "a dict literal".
DICT = ("<dict>",)


def dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def literal(node: cst.BaseExpression) -> Any:
    """A string, number, True/False/None literal's value; ``...`` for anything else."""
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.Float):
        return float(node.value)
    if (
        isinstance(node, cst.UnaryOperation)
        and isinstance(node.operator, cst.Minus)
        and isinstance(node.expression, cst.Integer)
    ):
        return -int(node.expression.value)
    return ...


def is_trainer_call(call: cst.Call) -> bool:
    """``Trainer(...)``, ``pl.Trainer(...)`` and ``Trainer.from_argparse_args(...)`` (before or after the rewrite)."""
    name = dotted(call.func) or ""
    if name == "from_argparse_args" and call.args and (dotted(call.args[0].value) or "").endswith("Trainer"):
        return True
    return name == "Trainer" or name.endswith(".Trainer") or name.endswith("Trainer.from_argparse_args")


def subclass_construction(
    call: cst.Call, function: cst.CSTNode, owner: cst.CSTNode, trainer_classes: set[str] | frozenset[str]
) -> bool:
    """Whether ``call``, in ``function`` (a method of the class ``owner``), builds a Lightning Trainer under another
    name: ``cls(...)`` in a classmethod of a Trainer subclass (``class Trainer(pl.Trainer)``, whose name is in
    ``trainer_classes``), or ``super().__init__(...)`` / ``super(Cls, self).__init__(...)`` in its ``__init__``."""
    if not isinstance(function, cst.FunctionDef) or not isinstance(owner, cst.ClassDef):
        return False
    if owner.name.value not in trainer_classes:
        return False
    params = function.params.params
    if isinstance(call.func, cst.Name):
        # cls(...): the classmethod's first parameter, whatever it is named.
        classmethod = any(dotted(d.decorator) == "classmethod" for d in function.decorators)
        return classmethod and bool(params) and call.func.value == params[0].name.value
    return (
        function.name.value == "__init__"
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "__init__"
        and isinstance(call.func.value, cst.Call)
        and dotted(call.func.value.func) == "super"
    )


def is_dict_builder(node: cst.BaseExpression) -> bool:
    """A dict literal with string keys, or ``dict(key=value, ...)`` (either may also splat
    ``**legacy_trainer_kwargs(...)``, settings translated at run time)."""
    if isinstance(node, cst.Dict):
        return all(
            (isinstance(e, cst.DictElement) and isinstance(literal(e.key), str))
            or (isinstance(e, cst.StarredDictElement) and is_translated(e.value))
            for e in node.elements
        )
    return (
        isinstance(node, cst.Call)
        and dotted(node.func) == "dict"
        and all(a.keyword is not None or (a.star == "**" and is_translated(a.value)) for a in node.args)
    )


def is_translated(node: cst.BaseExpression) -> bool:
    """``legacy_trainer_kwargs(...)``: settings translated at run time (a splat of it needs nothing more)."""
    return isinstance(node, cst.Call) and (dotted(node.func) or "").split(".")[-1] == "legacy_trainer_kwargs"


def translates_at_run_time(call: cst.Call) -> bool:
    """``from_argparse_args(Trainer, args, **kw)`` (and 1.x's ``Trainer.from_argparse_args``, which the tool turns
    into it): the bundle's function translates every 1.x key it is given, the splatted ones included."""
    return (dotted(call.func) or "").split(".")[-1] == "from_argparse_args"


def builds_trainer_at_run_time(call: cst.Call) -> bool:
    """``Trainer.from_argparse_args(args, **kw)`` (1.x's, which the tool rewrites) or ``from_argparse_args(Trainer,
    args, **kw)`` (the bundle's): a Trainer built from settings that are translated as 1.x read them, every one of its
    arguments included. Another class's from_argparse_args (a LightningDataModule's) is not one."""
    func = dotted(call.func) or ""
    if func.split(".")[-1] != "from_argparse_args":
        return False
    first = call.args[0] if call.args and call.args[0].keyword is None and not call.args[0].star else None
    owners = [func.rsplit(".", 1)[0] if "." in func else "", (dotted(first.value) or "") if first else ""]
    return any(owner.split(".")[-1] == "Trainer" for owner in owners)


def _is_namespace(node: cst.BaseExpression) -> TypeGuard[cst.Call]:
    """``Namespace(...)`` / ``argparse.Namespace(...)``."""
    return isinstance(node, cst.Call) and (dotted(node.func) or "").split(".")[-1] == "Namespace"


#: Functions that build a Trainer from the object they are handed (the bundle's from_argparse_args, hydra's
#: instantiate, argparse's Namespace, which from_argparse_args reads).
_HANDS_TO_TRAINER = frozenset({"from_argparse_args", "instantiate", "Namespace"})
#: Classes (a call's last name) that wrap settings into a mapping or an attribute-access config: their result holds the
#: settings (a holder H = Munch({...})), and is no trainer.
MAPPING_CLASSES = frozenset(
    {"dict", "OrderedDict", "Munch", "munchify", "EasyDict", "edict", "AttrDict", "DotMap", "Box", "ConfigDict"}
)


def base_path(node: cst.BaseExpression) -> str | None:
    """The dotted path an expression reads, a subscript counted as its base (``cfg["trainer"]`` -> ``cfg``)."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return dotted(node)


def paths_in(node: cst.CSTNode) -> set[str]:
    """Every dotted path read in an expression (a subscript counted as its base): ``vars(config.trainer)`` ->
    ``{"vars", "config.trainer"}``."""
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        path = base_path(current) if isinstance(current, (cst.Name, cst.Attribute, cst.Subscript)) else None
        if path is not None:
            found.add(path)
            if isinstance(current, cst.Subscript):
                stack.extend(current.slice)  # cfg[key]: key is read too
            continue
        stack.extend(current.children)
    return found


def overlaps(path: str, holder: str) -> bool:
    """Whether handing ``path`` hands (part of) ``holder``: the same, or one holds the other."""
    return path == holder or holder.startswith(path + ".") or path.startswith(holder + ".")


def attribute_overlaps(path: str, holder: str) -> bool:
    """:func:`overlaps`, where a ``self.``/``cls.`` holder is also reached through another name of the object
    (``Trainer(**runner.opts)`` for ``self.opts``): compared without the root, one attribute at least."""
    root, _, rest = holder.partition(".")
    if root not in ("self", "cls") or not rest:
        return overlaps(path, holder)
    other = path.partition(".")[2]
    return bool(other) and overlaps(other, rest)


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_2``, ``base_3``, ...: the first that is not in ``taken``."""
    name, index = base, 1
    while name in taken:
        index += 1
        name = f"{base}_{index}"
    return name


def strategy_literal(node: cst.BaseExpression) -> bool:
    """A 1.x strategy string or None, or a conditional whose branches all are."""
    if isinstance(node, cst.IfExp):
        return strategy_literal(node.body) and strategy_literal(node.orelse)
    value = literal(node)
    return value is None or (isinstance(value, str) and value in rules.STRATEGY_STRINGS)


@dataclass
class Scope:
    """The module or one function."""

    node: cst.CSTNode
    parent: Scope | None
    assigns: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    #: name -> each ``name = Trainer(...)`` in this scope: (the call, its resume_from_checkpoint value or None, whether
    #: the assignment is alone on its line)
    trainers: dict[str, list[tuple[cst.Call, cst.BaseExpression | None, bool]]] = field(default_factory=dict)
    fits: list[tuple[str, cst.Call]] = field(default_factory=list)

    def lookup(self, name: str) -> Scope | None:
        """The innermost scope that assigns ``name``, from this one outwards."""
        scope: Scope | None = self
        while scope is not None and name not in scope.assigns:
            scope = scope.parent
        return scope


class FileFacts(cst.CSTVisitor):
    """Visit a module once; then ask :meth:`values` and read the recorded facts."""

    def __init__(self) -> None:
        super().__init__()
        self.scopes: dict[cst.CSTNode, Scope] = {}
        self._stack: list[Scope] = []
        #: argparse destinations -> (default node or None, choices node or None), from ``add_argument`` calls.
        self.flags: dict[str, tuple[cst.BaseExpression | None, cst.BaseExpression | None]] = {}
        #: (scope node, name) of the dicts splatted into a Trainer, in the scope that assigns them.
        self.trainer_dicts: set[tuple[cst.CSTNode, str]] = set()
        #: Trainer calls that splat something this pass cannot follow -> the positions (in ``call.args``) of those
        #: splats.
        self.unknown_splat_args: dict[cst.Call, list[int]] = {}
        self.moved_resume: dict[cst.Call, cst.BaseExpression] = {}  # fit call -> the value for ckpt_path
        self.resolved_resume: set[cst.Call] = set()  # Trainer calls whose value moved to a fit
        #: Trainer calls of a name built more than once in its scope, one of them with resume_from_checkpoint -> (the
        #: variable that carries each construction's checkpoint to the fits, this call's value or None): the
        #: statement gets ``variable = value`` beside it (rule trainer-resume).
        self.resume_vars: dict[cst.Call, tuple[str, cst.BaseExpression | None]] = {}
        #: (the constructions, the fits) of each such name, given their variable when the module ends (a fresh name
        #: must not clash with any name of the file, the ones after this scope included).
        self._resume_groups: list[tuple[list[tuple[cst.Call, cst.BaseExpression | None, bool]], list[cst.Call]]] = []
        self._names: set[str] = set()  # every name the file spells
        #: dotted paths (``config.trainer``, ``kwargs``; a subscript counts as its base) whose object may reach a
        #: Trainer whole, so that a 1.x key written into it would reach one too (rule trainer-key-unfollowed): see
        #: :meth:`may_reach_trainer`.
        self.reaching_paths: set[str] = set()
        #: the same for settings that reach a Trainer only through the bundle's translation at run time
        #: (:func:`builds_trainer_at_run_time`, a splat the Trainer call's rewrite translates): a 1.x key there needs a
        #: TODO only where that translation refuses it (rule trainer-key-refused): see :meth:`reaches_translation`.
        self.translated_paths: set[str] = set()
        #: Trainer(**x): (the call, the splat's position, the paths x reads), raw or translated once the module ends
        self._trainer_splats: list[tuple[cst.Call, int, cst.BaseExpression]] = []
        #: Namespace(**cfg) calls whose result is followed (assigned to a name, or handed to a translating
        #: from_argparse_args): their splat hands cfg to the Namespace, not to a Trainer
        self._followed_namespaces: set[cst.Call] = set()
        self._handed: list[tuple[str, set[str]]] = []  # name = f(..., x, ...): (name, the paths its arguments read)
        self._aliases: list[tuple[str, str]] = []  # name = path: (name, path)
        self._returns: list[tuple[str, set[str]]] = []  # return x in def f: (f, the paths x reads)
        self._called: set[str] = set()  # the last name of each function this file calls (f(...), self.f(...))
        self._flows: list[tuple[str, set[str]]] = []  # x = {**a, "k": b}, x[k] = v, for x in y: (x, the paths read)
        #: calls of a function by its last name -> (each argument's position or keyword, the paths it reads)
        self._call_args: list[tuple[str, bool, list[tuple[int | str | None, set[str]]]]] = []
        self._params: dict[str, list[tuple[list[str], set[str]]]] = {}  # def f -> (its positional, all) parameters
        #: statement lines directly in a class body (a class attribute H = {...} is read as self.H, Class.H: not a
        #: holder the reach follows)
        self.class_lines: set[cst.SimpleStatementLine] = set()
        self._line: cst.SimpleStatementLine | None = None  # the statement line being visited
        #: Trainer(**name), with the splat's position in the call: resolved when the module ends.
        self._splats: list[tuple[cst.Call, Scope, str, int]] = []
        #: (scope node, name) of variables that only carry a 1.x strategy name into a Trainer: their assignments
        #: are rewritten ("ddp_cpu" -> "ddp", None -> "auto") and the Trainer gets strategy=name.
        self.strategy_vars: set[tuple[cst.CSTNode, str]] = set()
        self._backend_names: list[tuple[Scope, str]] = []
        self._name_uses: dict[tuple[int, str], int] = {}
        #: nodes this pass raised on -> the exception: the transformer leaves an internal-error TODO at each, and
        #: what this pass knows about the rest of the file stays.
        self.failed: dict[cst.CSTNode, Exception] = {}
        self._visit_failed: set[int] = set()
        #: ``cls(...)`` in a classmethod and ``super().__init__(...)`` in ``__init__`` of a Trainer subclass: Trainer
        #: calls under another name (:func:`subclass_construction`).
        self.subclass_trainer_calls: set[cst.Call] = set()
        self._trainer_classes: set[str] = set()  # names of this file's Trainer subclasses (a base's own included)
        self._defs: list[cst.ClassDef | cst.FunctionDef] = []  # the classes and functions around the node

    def on_visit(self, node: cst.CSTNode) -> bool:
        try:
            return super().on_visit(node)
        except Exception as err:  # noqa: BLE001  (each visit_* records its state only once nothing can raise)
            self.failed[node] = err
            self._visit_failed.add(id(node))
            return False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if id(original_node) in self._visit_failed:
            return
        try:
            super().on_leave(original_node)
        except Exception as err:  # noqa: BLE001
            self.failed.setdefault(original_node, err)

    # -- scopes --------------------------------------------------------------------------------------------------

    def _push(self, node: cst.CSTNode) -> None:
        scope = Scope(node, self._stack[-1] if self._stack else None)
        self.scopes[node] = scope
        self._stack.append(scope)

    def visit_Module(self, node: cst.Module) -> None:
        self._push(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        names = [param.name.value for param in [*node.params.params, *node.params.kwonly_params]]
        positional = [param.name.value for param in [*node.params.posonly_params, *node.params.params]]
        every = {*positional, *names} | {
            p.name.value for p in (node.params.star_arg, node.params.star_kwarg) if isinstance(p, cst.Param)
        }
        self._params.setdefault(node.name.value, []).append((positional, every))
        self._push(node)
        self._defs.append(node)
        for name in names:
            self._stack[-1].assigns.setdefault(name, [])  # a parameter: its values are unknown

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._defs.pop()
        self._close(self._stack.pop())

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        # class MyTrainer(pl.Trainer) / (Mixin, Trainer) / (MyTrainer): a Trainer subclass (the name Trainer as
        # is_trainer_call reads it, or a subclass of this file's).
        bases = [dotted(base.value) or "" for base in node.bases]
        if any(b == "Trainer" or b.endswith(".Trainer") or b in self._trainer_classes for b in bases):
            self._trainer_classes.add(node.name.value)
        self._defs.append(node)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._defs.pop()

    def visit_Name(self, node: cst.Name) -> None:
        key = (id(self._stack[-1]), node.value)
        self._name_uses[key] = self._name_uses.get(key, 0) + 1
        self._names.add(node.value)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._line = node
        if self._defs and isinstance(self._defs[-1], cst.ClassDef):
            self.class_lines.add(node)

    def leave_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._line = None

    def leave_Module(self, node: cst.Module) -> None:
        self._close(self._stack.pop())
        self._resolve_module()
        # A call whose result is a trainer (a name with "trainer" in it, or one whose fit is called) may build it
        # from what it is handed (trainer = build_trainer(config)); an alias of a path that reaches one makes the
        # path it was read from reach one too (kw = config.trainer; Trainer(**kw)).
        fitted = {name for scope in self.scopes.values() for name, _ in scope.fits}
        for target, paths in self._handed:
            if named_like_trainer(target) or target in fitted:
                self.reaching_paths |= paths
        for call, index, value in self._trainer_splats:
            # Trainer(**settings) whose unknown splats the call's rewrite hands to legacy_trainer_kwargs (or an
            # earlier run's Trainer(**legacy_trainer_kwargs(settings))): translated at run time. Any other splat
            # (a dict this file builds, which the rewrite converts where it is built) reaches the Trainer as it is.
            translated = is_translated(value) or index in self.unknown_splat_args.get(call, [])
            (self.translated_paths if translated else self.reaching_paths).update(paths_in(value))
        self._propagate(self.reaching_paths)
        self._propagate(self.translated_paths)

    def _propagate(self, reaching: set[str]) -> None:
        """Grow ``reaching`` (paths whose object reaches a Trainer) by what flows into them, until nothing more does
        (the scan follows every step: leftover_reach.py)."""
        for _ in range(50):
            before = len(reaching)
            # What flows into a path that reaches a Trainer reaches it too: an alias's source, a call's function and
            # arguments (settings = make_settings(cfg)), and what a function returns where its result reaches one
            # (Trainer(**make_settings(cfg))) or where it is not called in this file (its caller is elsewhere).
            for target, source in self._aliases:
                if any(overlaps(path, target) for path in reaching):
                    reaching.add(source)
            for target, paths in self._handed:
                if any(overlaps(path, target) for path in reaching):
                    reaching |= paths
            for target, paths in self._flows:
                if any(overlaps(path, target) for path in reaching):
                    reaching |= paths
            for function, paths in self._returns:
                used = any(p == function or p.endswith("." + function) for p in reaching)
                if function not in self._called or used:
                    reaching |= paths
            # A parameter of a function of this file that reaches a Trainer (def build(o): return Trainer(**o))
            # makes what its calls hand it reach one (build(opts)): bound by position (after self for obj.build(x))
            # or keyword; a splat, or an argument that falls into *args/**kwargs, may bind any parameter.
            for function, via_attribute, arguments in self._call_args:
                for positional, every in self._params.get(function, []):
                    offset = 1 if via_attribute and positional and positional[0] in ("self", "cls") else 0
                    anyone = every - {"self", "cls"}
                    for slot, paths in arguments:
                        if isinstance(slot, int) and slot + offset < len(positional):
                            names = {positional[slot + offset]}
                        else:
                            names = {slot} if isinstance(slot, str) and slot in every else anyone
                        if any(overlaps(path, name) for name in names for path in reaching):
                            reaching |= paths
            if len(reaching) == before:
                break

    def _resolve_module(self) -> None:
        """What the module's end decides besides the reach: the resume variables, the strategy variables, and which
        splats of the Trainer calls are unknown (the reach's seeds read them)."""
        for built, fits in self._resume_groups:
            variable = fresh_name("resume_ckpt_path", self._names)
            self._names.add(variable)
            for call, value, _ in built:
                self.resume_vars[call] = (variable, value)
                if value is not None:
                    self.resolved_resume.add(call)
            for fit in fits:
                self.moved_resume[fit] = cst.Name(variable)
        for scope, name in self._backend_names:
            values = scope.assigns.get(name) or []
            used_once = self._name_uses.get((id(scope), name), 0) == len(values) + 1
            if values and used_once and all(strategy_literal(v) for v in values):
                if any(literal(v) is not None for v in values):
                    self.strategy_vars.add((scope.node, name))
        # A splat whose dict this file builds: the dict's own scope is rewritten; any other splat is unknown.
        for call, scope, name, index in self._splats:
            owner = scope.lookup(name)
            values = owner.assigns[name] if owner is not None else []
            if values and all(is_dict_builder(v) for v in values):
                self.trainer_dicts.add((owner.node, name))  # type: ignore[union-attr]
            elif values and all(is_translated(v) for v in values):
                continue  # kwargs = legacy_trainer_kwargs(...): translated at run time already
            else:
                self._unknown_splat(call, index)

    def _unknown_splat(self, call: cst.Call, index: int) -> None:
        if translates_at_run_time(call):
            return  # from_argparse_args translates what it is given: its splats need neither a rewrite nor a TODO
        self.unknown_splat_args.setdefault(call, []).append(index)

    # -- what is assigned, called and declared -------------------------------------------------------------------

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and _is_namespace(node.value):
            self._followed_namespaces.add(node.value)  # visited before its value
        for target in node.targets:
            value = node.value
            # a, b = f(cfg): each of a and b may hold what f was handed.
            if isinstance(target.target, (cst.Tuple, cst.List)):
                for element in target.target.elements:
                    self._written(dotted(element.value), value)
            else:
                self._written(dotted(target.target), value)
            if isinstance(target.target, cst.Subscript):
                holder = base_path(target.target)  # d[k] = v: d holds v (not a trainer built from it)
                if holder is not None:
                    self._flows.append((holder, paths_in(value)))
            if isinstance(target.target, cst.Name):
                self._stack[-1].assigns.setdefault(target.target.value, []).append(node.value)
                if isinstance(node.value, cst.Call) and is_trainer_call(node.value):
                    resume = next(
                        (a.value for a in node.value.args if a.keyword and a.keyword.value == "resume_from_checkpoint"),
                        None,
                    )
                    alone = len(node.targets) == 1 and self._line is not None and list(self._line.body) == [node]
                    self._stack[-1].trainers.setdefault(target.target.value, []).append((node.value, resume, alone))
            elif isinstance(target.target, (cst.Tuple, cst.List)):
                for element in target.target.elements:
                    if isinstance(element.value, cst.Name):
                        self._stack[-1].assigns.setdefault(element.value.value, []).append(cst.Name("__unknown__"))

    def _written(self, written: str | None, value: cst.BaseExpression) -> None:
        """``written = value`` (a name or a dotted path): what reaches a Trainer through it (rule
        trainer-key-unfollowed), followed when the module ends."""
        if written is None:
            return
        if isinstance(value, cst.Call) and builds_trainer_at_run_time(value):
            return  # trainer = Trainer.from_argparse_args(args): what it is handed is translated (visit_Call)
        if isinstance(value, cst.Call) and not is_trainer_call(value):
            handed = {p for a in value.args for p in paths_in(a.value)}
            if isinstance(value.func, cst.Attribute):
                handed |= paths_in(value.func.value)  # x = cfg.copy(): a method may hand back its object
            if (dotted(value.func) or "").split(".")[-1] in MAPPING_CLASSES or _is_namespace(value):
                # Munch({...}), Namespace(**cfg) hold the settings: not a trainer (trainer_opt = Namespace(**cfg))
                self._flows.append((written, handed))
            else:
                self._handed.append((written, handed))
        elif isinstance(value, (cst.Name, cst.Attribute, cst.Subscript)):
            source = base_path(value)
            if source is not None:
                self._aliases.append((written, source))
        elif not (isinstance(value, cst.Call) and is_trainer_call(value)):
            self._flows.append((written, paths_in(value)))  # x = {**a, **cfg}, x = cfg or {}, ...

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name) and node.value is not None:
            self._stack[-1].assigns.setdefault(node.target.value, []).append(node.value)
        code = cst.Module(body=[]).code_for_node(node.annotation.annotation)
        if node.value is not None and annotates_trainer(code) and isinstance(node.value, cst.Call):
            # runner: pl.Trainer = build(cfg): the call's result is a trainer, built from what it was handed.
            self.reaching_paths |= {p for a in node.value.args for p in paths_in(a.value)}

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        written = base_path(node.target)
        if written is not None:
            self._flows.append((written, paths_in(node.value)))  # d |= cfg, d.update is a call

    def visit_For(self, node: cst.For) -> None:
        # for key, value in cfg.items(): each of key and value holds a part of cfg.
        for path in paths_in(node.target):
            self._flows.append((path, paths_in(node.iter)))
        if isinstance(node.target, cst.Name):
            self._stack[-1].assigns.setdefault(node.target.value, []).append(cst.Name("__unknown__"))

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self._returned(node.value)

    def visit_Yield(self, node: cst.Yield) -> None:
        if isinstance(node.value, cst.BaseExpression):
            self._returned(node.value)

    def _returned(self, value: cst.BaseExpression) -> None:
        # The caller may splat what a function returns, 1.x keys and all: unless the function is called in this
        # file (its result's path is then followed here), decided when the module ends.
        function = next((d.name.value for d in reversed(self._defs) if isinstance(d, cst.FunctionDef)), "")
        self._returns.append((function, paths_in(value)))

    def visit_Call(self, node: cst.Call) -> None:
        func = dotted(node.func) or ""
        if isinstance(node.func, (cst.Name, cst.Attribute)):
            self._called.add(node.func.value if isinstance(node.func, cst.Name) else node.func.attr.value)
        # What a call may hand a Trainer whole: any splat (Trainer(**cfg), Namespace(**vars(cfg)), f(**cfg)), and
        # the positional arguments of a Trainer call, from_argparse_args and hydra's instantiate. A keyword
        # argument of a Trainer call (gpus=config.trainer.gpus) reads one field, which the call's rewrite converts.
        last = func.split(".")[-1]
        translating = builds_trainer_at_run_time(node)
        for index, arg in enumerate(node.args):
            if translating:
                # Trainer.from_argparse_args(args, **kw): every setting it is handed is translated at run time
                # (trainer_args.from_argparse_args); Namespace(**cfg) handed to it is followed into it.
                self.translated_paths |= paths_in(arg.value)
                if _is_namespace(arg.value):
                    self._followed_namespaces.add(arg.value)
            elif arg.star and last == "Namespace" and node in self._followed_namespaces:
                continue  # ns = Namespace(**cfg): cfg reaches what ns reaches (followed by the assignment)
            elif arg.star == "**" and is_trainer_call(node):
                self._trainer_splats.append((node, index, arg.value))  # raw or translated: when the module ends
            elif arg.star:
                self.reaching_paths |= paths_in(arg.value)
            elif arg.keyword is None and (
                is_trainer_call(node) or last in _HANDS_TO_TRAINER or last.endswith("Trainer")
            ):
                # (a class of the script's own named ...Trainer, HydraTrainer(cfg), may build one from it too)
                self.reaching_paths |= paths_in(arg.value)
            elif last in ("from_argparse_args", "instantiate"):
                self.reaching_paths |= paths_in(arg.value)  # from_argparse_args(Trainer, args=cfg) hands it whole
            elif arg.keyword is not None and "trainer" in arg.keyword.value.lower():
                # LightningCLI(trainer_defaults=cfg), a library's trainer_kwargs=cfg: a Trainer's settings.
                self.reaching_paths |= paths_in(arg.value)
        if (
            isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "fit"
            and isinstance(node.func.value, cst.Call)
            and not is_trainer_call(node.func.value)
            and not builds_trainer_at_run_time(node.func.value)
        ):
            # build(cfg).fit(model): the call's result is a trainer, built from what it was handed (a Trainer call's
            # own arguments are read above and in _trainer_splats).
            self.reaching_paths |= {p for a in node.func.value.args for p in paths_in(a.value)}
        if isinstance(node.func, (cst.Name, cst.Attribute)):
            slots: list[tuple[int | str | None, set[str]]] = []
            for index, arg in enumerate(node.args):
                slot = None if arg.star else arg.keyword.value if arg.keyword is not None else index
                slots.append((slot, paths_in(arg.value)))
            self._call_args.append((last, isinstance(node.func, cst.Attribute), slots))
        if (
            isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "fit"
            and isinstance(node.func.value, cst.Name)
        ):
            self._stack[-1].fits.append((node.func.value.value, node))
        if func.endswith("add_argument"):
            self._flag(node)
        if len(self._defs) > 1 and subclass_construction(node, self._defs[-1], self._defs[-2], self._trainer_classes):
            # Built like a Trainer(...) and converted like one; its splats (the subclass forwarding its own
            # **kwargs, whose keys its callers choose) are left as they are: not recorded below.
            self.subclass_trainer_calls.add(node)
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value in ("accelerator", "distributed_backend"):
                    if isinstance(arg.value, cst.Name):
                        self._backend_names.append((self._stack[-1], arg.value.value))
        if is_trainer_call(node):
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value in ("accelerator", "distributed_backend"):
                    if isinstance(arg.value, cst.Name):
                        self._backend_names.append((self._stack[-1], arg.value.value))
            for index, arg in enumerate(node.args):
                if arg.star != "**":
                    continue
                if isinstance(arg.value, cst.Name):
                    self._splats.append((node, self._stack[-1], arg.value.value, index))
                elif not is_dict_builder(arg.value) and not is_translated(arg.value):
                    self._unknown_splat(node, index)

    def _flag(self, call: cst.Call) -> None:
        """``parser.add_argument("--gpus", type=int, default=0, choices=...)``: its destination, default and choices."""
        names = [literal(a.value) for a in call.args if a.keyword is None]
        dest_arg = next((a.value for a in call.args if a.keyword and a.keyword.value == "dest"), None)
        longs = [n for n in names if isinstance(n, str) and n.startswith("--")]
        if dest_arg is not None and isinstance(literal(dest_arg), str):
            dest = literal(dest_arg)
        elif longs:
            dest = longs[0][2:].replace("-", "_")
        elif names and isinstance(names[0], str) and not names[0].startswith("-"):
            dest = names[0]
        else:
            return
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        action = literal(keywords["action"]) if "action" in keywords else None
        default = keywords.get("default")
        if default is None and action in ("store_true", "store_false"):
            default = cst.Name("False" if action == "store_true" else "True")
        self.flags[dest] = (default, keywords.get("choices"))

    def _close(self, scope: Scope) -> None:
        for name, built in scope.trainers.items():
            resumed = [(call, value) for call, value, _ in built if value is not None]
            fits = [call for target, call in scope.fits if target == name]
            if not resumed or not fits:
                continue  # nothing to move, or no fit here to move it to: the construction keeps its TODO
            if any(any(a.keyword and a.keyword.value == "ckpt_path" for a in call.args) for call in fits):
                continue  # a fit that already names its checkpoint: a person's choice
            if len(scope.assigns.get(name, ())) != len(built):
                # The name is also given something that is not a Trainer (trainer = t0 before it): which one each fit
                # runs on, the tool cannot tell; the construction keeps its TODO.
                continue
            if len(built) == 1:
                # The one construction of the name: its value moves to each fit of the name in this scope.
                for call in fits:
                    self.moved_resume[call] = resumed[0][1]
                self.resolved_resume.add(resumed[0][0])
            elif all(alone for _, _, alone in built):
                # trainer = Trainer(..., resume_from_checkpoint=path) in one branch, trainer = Trainer(...) in others:
                # moving path to every fit would resume runs that never resumed (and path may be unbound there).
                # Each construction gets a variable beside it, set to its checkpoint or None (1.x's "do not
                # resume"), and the fits pass that variable: each fit resumes as the Trainer it runs on would have.
                # Only where each construction is alone on its line (the variable's statement goes after it);
                # otherwise the TODOs stay.
                self._resume_groups.append((built, fits))

    # -- questions -----------------------------------------------------------------------------------------------

    def may_reach_trainer(self, holder: str) -> bool:
        """Whether settings written into ``holder`` (a dotted path) may reach a Trainer whole: ``holder``, a path
        that holds it (``config`` for ``config.trainer``) or one inside it is splatted, handed to a Trainer call,
        ``from_argparse_args`` or ``instantiate``, returned, or handed to a call whose result is a trainer; for
        ``self.opts``, ``other.opts`` too (:func:`attribute_overlaps`)."""
        return any(attribute_overlaps(path, holder) for path in self.reaching_paths)

    def reaches_translation(self, holder: str) -> bool:
        """Whether settings written into ``holder`` may reach a Trainer through the bundle's translation at run
        time (``Trainer.from_argparse_args``, a splat the call's rewrite translates), as :meth:`may_reach_trainer`
        reads a path; settings for which that is the only way need a TODO only for a key the translation refuses
        (rules.translated_at_run_time)."""
        return any(attribute_overlaps(path, holder) for path in self.translated_paths)

    def spells(self, name: str) -> bool:
        """Whether the file spells ``name`` anywhere: a variable, an attribute (``trainer.name``), a keyword."""
        return name in self._names

    def assigned(self, node: cst.BaseExpression, scope: Scope) -> list[cst.BaseExpression] | None:
        """What each assignment in its scope gave a name (None for anything else, or a name it cannot follow)."""
        if not isinstance(node, cst.Name):
            return None
        owner = scope.lookup(node.value)
        return list(owner.assigns[node.value]) or None if owner is not None else None

    def values(self, node: cst.BaseExpression, scope: Scope, depth: int = 0) -> set[Any] | None:
        """The literal values ``node`` may hold, read from this file; None where some cannot be read.

        A conditional holds either branch; a name holds what each assignment in its scope gave it; ``args.NAME``
        holds its argparse flag's default and choices (a flag without a default holds None). Lists and dicts count
        as :data:`LIST` and :data:`DICT`.
        """
        if depth > 8:
            return None
        value = literal(node)
        if value is not ...:
            return {value}
        if isinstance(node, cst.List):
            return {LIST}
        if isinstance(node, cst.Dict):
            return {DICT}
        if isinstance(node, cst.IfExp):
            body, orelse = self.values(node.body, scope, depth + 1), self.values(node.orelse, scope, depth + 1)
            return None if body is None or orelse is None else body | orelse
        if isinstance(node, cst.Name):
            owner = scope.lookup(node.value)
            if owner is None or not owner.assigns[node.value]:
                return None
            out: set[Any] = set()
            for assigned in owner.assigns[node.value]:
                found = self.values(assigned, owner, depth + 1)
                if found is None:
                    return None
                out |= found
            return out
        if isinstance(node, cst.Attribute) and node.attr.value in self.flags:
            default, choices = self.flags[node.attr.value]
            flag: set[Any] | None = {None} if default is None else self.values(default, scope, depth + 1)
            if flag is None:
                return None
            if choices is not None:
                if not isinstance(choices, (cst.List, cst.Tuple, cst.Set)):
                    return None
                for element in choices.elements:
                    found = self.values(element.value, scope, depth + 1)
                    if found is None:
                        return None
                    flag |= found
            return flag
        return None
