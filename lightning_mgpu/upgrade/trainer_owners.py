"""The tool's answer to "is this attribute's owner a Trainer?", read from the whole file before anything is rewritten.

Every rewrite and TODO of a 1.x Trainer attribute or method (``trainer.root_gpu``, ``trainer.lr_find(...)``,
``trainer.tune(...)``, ``trainer.accelerator_connector``, ...) asks :class:`TrainerOwners` whether the expression in
front of the attribute is a Trainer: a name or ``self.`` attribute bound from a Trainer construction or annotated as
one (:mod:`~lightning_mgpu.upgrade.trainer_names`, which the independent scan shares), or, as before, something named
like a trainer (``trainer``, ``self.trainer``, ``pl_trainer``).

Example::

    owners = trainer_owners(module)  # the module the transformer visits (its nodes are the ones asked about)
    owners(attribute.value)  # True for ``t`` in ``t.root_gpu`` after ``t = pl.Trainer(...)``
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from lightning_mgpu.upgrade.scopes import dotted
from lightning_mgpu.upgrade.trainer_names import (
    HOLDS_NONE,
    HOLDS_OTHER,
    HOLDS_TRAINER,
    TrainerScopes,
    Verdict,
    annotates_trainer,
    builds_trainer,
    is_lightning_module,
    is_trainer_class,
    owner_named_like_trainer,
)
from lightning_mgpu.upgrade.traverse import read_only_visit


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


@dataclass(frozen=True)
class TrainerOwners:
    """Which owners (the expression before ``.attr``) of one module are Trainers; call it with the owner."""

    #: ids of the Name / ``self.x`` nodes of the module that hold a Trainer by where it came from
    bound: frozenset[int] = frozenset()

    def __call__(self, owner: cst.BaseExpression) -> bool:
        """Whether ``owner`` (a node of the module read, or a copy the name test can read) is a Trainer.

        Args:
            owner: the expression in front of an attribute (``t`` of ``t.root_gpu``).

        Returns:
            True where it was bound from a Trainer (this module's node) or is named like a trainer.
        """
        if id(owner) in self.bound:
            return True
        last = (
            owner.attr.value if isinstance(owner, cst.Attribute) else owner.value if isinstance(owner, cst.Name) else ""
        )
        return owner_named_like_trainer(dotted(owner) or last)


#: The name test alone: for a rewrite asked about a node that no pre-pass read (and the tests of one rule).
BY_NAME = TrainerOwners()


class _Imports(cst.CSTVisitor):
    """The local names imported from packages that are not Lightning's, and this file's Trainer subclasses."""

    def __init__(self) -> None:
        super().__init__()
        self.lightning: set[str] = set()
        self.other: set[str] = set()
        self.subclasses: set[str] = set()

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            module = _code(alias.name)
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
            name = local or module.split(".", 1)[0]
            (self.lightning if is_lightning_module(module) else self.other).add(name)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = "." * len(node.relative) + (_code(node.module) if node.module is not None else "")
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            local = alias.asname.name if alias.asname else alias.name
            if isinstance(local, cst.Name):
                (self.lightning if is_lightning_module(module) else self.other).add(local.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        # class MyTrainer(pl.Trainer): built like one (a subclass of this file's counts too, in file order).
        if any(
            is_trainer_class(dotted(b.value) or "", self.subclasses, self.other - self.lightning) for b in node.bases
        ):
            self.subclasses.add(node.name.value)


class _Bindings(cst.CSTVisitor):
    """One walk: each scope's bindings into :class:`TrainerScopes`, and each owner of an attribute to resolve."""

    def __init__(self, subclasses: frozenset[str], foreign: frozenset[str]) -> None:
        super().__init__()
        self.subclasses, self.foreign = subclasses, foreign
        self.scopes = TrainerScopes()
        self._stack: list[cst.CSTNode] = []
        #: per function being visited: (its class, its first parameter) where it is a method, else None
        self._methods: list[tuple[cst.ClassDef, str] | None] = []
        self.names: list[tuple[cst.CSTNode, str, cst.Name]] = []  # (scope, name, the owner node)
        self.attributes: list[tuple[cst.ClassDef, str, cst.Attribute]] = []  # (class, attribute, the owner node)
        self._comprehension_targets: set[int] = set()

    # -- verdicts ----------------------------------------------------------------------------------------------

    def _verdict(self, value: cst.BaseExpression) -> Verdict:
        if isinstance(value, cst.Call):
            first = next((a.value for a in value.args if a.keyword is None and not a.star), None)
            first_name = dotted(first) if first is not None else None
            built = builds_trainer(dotted(value.func) or "", first_name, self.subclasses, self.foreign)
            return HOLDS_TRAINER if built else HOLDS_OTHER
        if isinstance(value, cst.Name):
            return HOLDS_NONE if value.value == "None" else (self._stack[-1], value.value)
        if isinstance(value, cst.IfExp):
            # Trainer(...) if resume else None: either branch
            both = {self._verdict(value.body), self._verdict(value.orelse)}
            return HOLDS_TRAINER if HOLDS_TRAINER in both and both <= {HOLDS_TRAINER, HOLDS_NONE} else HOLDS_OTHER
        return HOLDS_OTHER

    def _annotation(self, annotation: cst.Annotation | None) -> bool:
        return annotation is not None and annotates_trainer(_code(annotation.annotation), self.subclasses, self.foreign)

    def _self_attribute(self, node: cst.BaseExpression) -> tuple[cst.ClassDef, str] | None:
        """``self.x`` in a method (``self`` its first parameter): the method's class and ``x``."""
        method = self._methods[-1] if self._methods else None
        if method is None or not isinstance(node, cst.Attribute) or not isinstance(node.value, cst.Name):
            return None
        return (method[0], node.attr.value) if node.value.value == method[1] else None

    def _store(self, target: cst.BaseExpression, verdict: Verdict) -> None:
        if isinstance(target, cst.Name):
            self.scopes.bind(self._stack[-1], target.value, verdict)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:  # t, m = ...: each element holds something this walk does not follow
                self._store(element.value, HOLDS_OTHER)
        elif isinstance(target, cst.StarredElement):
            self._store(target.value, HOLDS_OTHER)
        else:
            attribute = self._self_attribute(target)
            if attribute is not None:
                self.scopes.bind_attribute(*attribute, verdict)

    # -- scopes ------------------------------------------------------------------------------------------------

    def visit_Module(self, node: cst.Module) -> None:
        self._stack.append(node)  # its scope is made before the walk (_walk), with what other cells bound

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.bind(self._stack[-1], node.name.value, HOLDS_OTHER)
        self.scopes.scope(node, self._stack[-1], "class")
        self._stack.append(node)
        self._methods.append(None)  # the class body is no method's

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._stack.pop()
        self._methods.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        outer = self._stack[-1]
        self.scopes.bind(outer, node.name.value, HOLDS_OTHER)
        self.scopes.scope(node, outer, "function")
        self._stack.append(node)
        params = [*node.params.posonly_params, *node.params.params]
        static = any(dotted(d.decorator) == "staticmethod" for d in node.decorators)
        if isinstance(outer, cst.ClassDef) and params and not static:
            self._methods.append((outer, params[0].name.value))
        else:
            self._methods.append(None)
        every = [*params, *node.params.kwonly_params]
        every += [p for p in (node.params.star_arg, node.params.star_kwarg) if isinstance(p, cst.Param)]
        for param in every:
            verdict = HOLDS_TRAINER if self._annotation(param.annotation) else HOLDS_OTHER
            self.scopes.bind(node, param.name.value, verdict)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._stack.pop()
        self._methods.pop()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.scopes.scope(node, self._stack[-1], "function")
        self._stack.append(node)
        self._methods.append(None)
        every = [*node.params.posonly_params, *node.params.params, *node.params.kwonly_params]
        every += [p for p in (node.params.star_arg, node.params.star_kwarg) if isinstance(p, cst.Param)]
        for param in every:
            self.scopes.bind(node, param.name.value, HOLDS_OTHER)

    def leave_Lambda(self, node: cst.Lambda) -> None:
        self._stack.pop()
        self._methods.pop()

    def visit_Global(self, node: cst.Global) -> None:
        for item in node.names:
            self.scopes.declare(self._stack[-1], item.name.value, "global")

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        for item in node.names:
            self.scopes.declare(self._stack[-1], item.name.value, "nonlocal")

    # -- bindings ----------------------------------------------------------------------------------------------

    def visit_Assign(self, node: cst.Assign) -> None:
        verdict = self._verdict(node.value)
        for target in node.targets:
            self._store(target.target, verdict)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        # t: pl.Trainer = build(cfg) (the annotation says what it holds); a bare ``t: Trainer`` declares it.
        if self._annotation(node.annotation):
            verdict: Verdict = HOLDS_TRAINER
        elif node.value is not None:
            verdict = self._verdict(node.value)
        else:
            return
        self._store(node.target, verdict)
        if isinstance(self._stack[-1], cst.ClassDef) and isinstance(node.target, cst.Name):
            # class Runner: trainer_: pl.Trainer (a dataclass field): read as self.trainer_ in its methods
            self.scopes.bind_attribute(self._stack[-1], node.target.value, verdict)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._store(node.target, HOLDS_OTHER)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._store(node.target, self._verdict(node.value))

    def visit_For(self, node: cst.For) -> None:
        self._store(node.target, HOLDS_OTHER)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._store(node.asname.name, HOLDS_OTHER)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self._store(node.name.name, HOLDS_OTHER)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            local = alias.asname.name if alias.asname else None
            name = local.value if isinstance(local, cst.Name) else _code(alias.name).split(".", 1)[0]
            self.scopes.bind(self._stack[-1], name, HOLDS_OTHER)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            local = alias.asname.name if alias.asname else alias.name
            if isinstance(local, cst.Name):
                self.scopes.bind(self._stack[-1], local.value, HOLDS_OTHER)

    # -- owners ------------------------------------------------------------------------------------------------

    def visit_Attribute(self, node: cst.Attribute) -> None:
        owner = node.value
        if isinstance(owner, cst.Name):
            self.names.append((self._stack[-1], owner.value, owner))
        else:
            attribute = self._self_attribute(owner)
            if attribute is not None and isinstance(owner, cst.Attribute):
                self.attributes.append((attribute[0], attribute[1], owner))


def _walk(module: cst.Module, module_trainers: frozenset[str] = frozenset()) -> _Bindings:
    imports = _Imports()
    read_only_visit(module, imports)
    foreign = frozenset(imports.other - imports.lightning)
    bindings = _Bindings(frozenset(imports.subclasses), foreign)
    bindings.scopes.scope(module, None, "module")
    for name in module_trainers:  # a notebook's other cells bound it to a Trainer
        bindings.scopes.bind(module, name, HOLDS_TRAINER)
    read_only_visit(module, bindings)
    return bindings


def trainer_owners(module: cst.Module, module_trainers: frozenset[str] = frozenset()) -> TrainerOwners:
    """Read ``module`` (the tree the transformer will visit: the answer is by node) for the owners of its attributes
    that are Trainers.

    Args:
        module: the parsed module.
        module_trainers: module-level names bound to a Trainer elsewhere (a notebook's other cells:
            :func:`notebook_trainers`), as if this module bound them first.

    Returns:
        The owners, with the name test for anything else.
    """
    bindings = _walk(module, module_trainers)
    scopes = bindings.scopes
    bound = {id(owner) for scope, name, owner in bindings.names if scopes.holds_trainer(scope, name)}
    bound |= {id(owner) for cls, name, owner in bindings.attributes if scopes.attribute_holds_trainer(cls, name)}
    return TrainerOwners(frozenset(bound))


def notebook_trainers(module: cst.Module) -> frozenset[str]:
    """The module-level names that hold a Trainer in a notebook (its code cells joined into ``module``): each cell is
    converted alone, and one cell's ``t = pl.Trainer(...)`` makes another cell's ``t.root_gpu`` a Trainer's (as the
    leftover scan, which reads the cells together, sees it).

    Args:
        module: every code cell of the notebook, in order, as one module.

    Returns:
        The names.
    """
    bindings = _walk(module)
    names = {name for _, name, _ in bindings.names}  # read as an owner anywhere (a function of another cell too)
    return frozenset(name for name in names if bindings.scopes.holds_trainer(module, name))
