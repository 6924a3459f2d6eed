"""The leftover scan's own reading of which attribute owners are Trainers (``t`` of ``t.root_gpu``, ``t.tune(...)``).

Part of the independent scan (:mod:`lightning_mgpu.upgrade.leftovers`): it walks the converted file with :mod:`ast`
by itself; the only thing it shares with the tool is :mod:`~lightning_mgpu.upgrade.trainer_names` (what counts as a
Trainer construction or annotation, and how a name's bindings resolve), so that both ask the same question. An owner
is a Trainer where it is a name or ``self.x`` bound from a Trainer in the scope Python would read it from, or is named
like a trainer (``trainer``, ``self.trainer``; not a config's ``cfg.trainer``). Anything else (an Optuna study's
``t.tune(...)``, a parameter with no annotation) is not: the scan reports 1.x spellings of Trainers only.
"""

from __future__ import annotations

import ast

from lightning_mgpu.upgrade.trainer_names import (
    HOLDS_NONE,
    HOLDS_OTHER,
    HOLDS_TRAINER,
    TrainerScopes,
    Verdict,
    annotates_trainer,
    ast_dotted,
    builds_trainer,
    is_lightning_module,
    is_trainer_class,
    owner_named_like_trainer,
)

_Function = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
#: The method a node is in, where it is one: (its class, its first parameter's name).
_Method = tuple[ast.ClassDef, str] | None
#: A node to walk, the scope it is read in, and its method.
_Item = tuple[ast.AST, ast.AST, _Method]


def _foreign_and_subclasses(tree: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
    """The local names imported from packages that are not Lightning's, and this file's Trainer subclasses."""
    lightning: set[str] = set()
    other: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.asname or alias.name.split(".", 1)[0]
                (lightning if is_lightning_module(alias.name) else other).add(name)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    (lightning if is_lightning_module(module) else other).add(alias.asname or alias.name)
    foreign = frozenset(other - lightning)
    subclasses: set[str] = set()
    classes = sorted((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)), key=lambda n: n.lineno)
    for cls in classes:
        if any(is_trainer_class(ast_dotted(b) or "", subclasses, foreign) for b in cls.bases):
            subclasses.add(cls.name)
    return foreign, frozenset(subclasses)


class _Bindings:
    """One recursive walk: each scope's bindings into :class:`TrainerScopes`, and each attribute owner to resolve."""

    def __init__(self, tree: ast.Module) -> None:
        self.foreign, self.subclasses = _foreign_and_subclasses(tree)
        self.scopes = TrainerScopes()
        self.names: list[tuple[ast.AST, str, ast.Name]] = []  # (scope, name, the owner node)
        self.attributes: list[tuple[ast.ClassDef, str, ast.Attribute]] = []  # (class, attribute, the owner node)
        self.scopes.scope(tree, None, "module")
        for statement in tree.body:
            self._walk(statement, tree, None)

    def _verdict(self, value: ast.expr, scope: ast.AST) -> Verdict:
        if isinstance(value, ast.Call):
            first = value.args[0] if value.args and not isinstance(value.args[0], ast.Starred) else None
            built = builds_trainer(ast_dotted(value.func) or "", ast_dotted(first), self.subclasses, self.foreign)
            return HOLDS_TRAINER if built else HOLDS_OTHER
        if isinstance(value, ast.Constant) and value.value is None:
            return HOLDS_NONE
        if isinstance(value, ast.Name):
            return (scope, value.id)
        if isinstance(value, ast.IfExp):
            both = {self._verdict(value.body, scope), self._verdict(value.orelse, scope)}
            return HOLDS_TRAINER if HOLDS_TRAINER in both and both <= {HOLDS_TRAINER, HOLDS_NONE} else HOLDS_OTHER
        return HOLDS_OTHER

    def _annotated(self, annotation: ast.expr | None) -> bool:
        return annotation is not None and annotates_trainer(ast.unparse(annotation), self.subclasses, self.foreign)

    @staticmethod
    def _self_attribute(node: ast.AST, method: _Method) -> tuple[ast.ClassDef, str] | None:
        if method is None or not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Name):
            return None
        return (method[0], node.attr) if node.value.id == method[1] else None

    def _store(self, target: ast.AST, verdict: Verdict, scope: ast.AST, method: _Method) -> None:
        if isinstance(target, ast.Name):
            self.scopes.bind(scope, target.id, verdict)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:  # t, m = ...: not followed
                self._store(element, HOLDS_OTHER, scope, method)
        elif isinstance(target, ast.Starred):
            self._store(target.value, HOLDS_OTHER, scope, method)
        else:
            attribute = self._self_attribute(target, method)
            if attribute is not None:
                self.scopes.bind_attribute(*attribute, verdict)

    def _function(self, node: _Function, scope: ast.AST, method: _Method) -> list[_Item]:
        """A function or lambda: its name in ``scope``, its parameters in its own; what to walk next (its
        decorators and defaults in ``scope``, its body in its own)."""
        items: list[_Item] = []
        if not isinstance(node, ast.Lambda):
            self.scopes.bind(scope, node.name, HOLDS_OTHER)
            parts = [*node.decorator_list, *node.args.defaults, *(d for d in node.args.kw_defaults if d)]
            items += [(part, scope, method) for part in parts]
        self.scopes.scope(node, scope, "function")
        arguments = node.args
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        for arg in every:
            verdict = HOLDS_TRAINER if self._annotated(arg.annotation) else HOLDS_OTHER
            self.scopes.bind(node, arg.arg, verdict)
        own: _Method = None
        positional = [*arguments.posonlyargs, *arguments.args]
        if not isinstance(node, ast.Lambda) and isinstance(scope, ast.ClassDef) and positional:
            # A method: self.x in it is the class's attribute (not in a staticmethod, whose first parameter is any).
            static = any(ast_dotted(d) == "staticmethod" for d in node.decorator_list)
            own = None if static else (scope, positional[0].arg)
        body = [node.body] if isinstance(node, ast.Lambda) else node.body
        return items + [(statement, node, own) for statement in body]

    def _walk(self, root: ast.AST, scope: ast.AST, method: _Method) -> None:
        """Walk ``root`` (read in ``scope``) in lexical order, with a stack (a deep expression needs no recursion)."""
        todo: list[_Item] = [(root, scope, method)]
        while todo:
            node, scope, method = todo.pop()
            todo.extend(reversed(self._visit(node, scope, method)))

    def _visit(self, node: ast.AST, scope: ast.AST, method: _Method) -> list[_Item]:
        """Record what ``node`` binds or reads; what to walk next, each in the scope it is read in."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return self._function(node, scope, method)
        if isinstance(node, ast.ClassDef):
            self.scopes.bind(scope, node.name, HOLDS_OTHER)
            items: list[_Item] = [(part, scope, method) for part in [*node.decorator_list, *node.bases, *node.keywords]]
            self.scopes.scope(node, scope, "class")
            return items + [(statement, node, None) for statement in node.body]
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                self.scopes.declare(scope, name, "global" if isinstance(node, ast.Global) else "nonlocal")
        elif isinstance(node, ast.Assign):
            verdict = self._verdict(node.value, scope)
            for target in node.targets:
                self._store(target, verdict, scope, method)
        elif isinstance(node, ast.AnnAssign):
            # t: pl.Trainer = build(cfg) (the annotation says what it holds); a bare ``t: Trainer`` declares it.
            declared: Verdict | None = HOLDS_TRAINER if self._annotated(node.annotation) else None
            if declared is None and node.value is not None:
                declared = self._verdict(node.value, scope)
            if declared is not None:
                self._store(node.target, declared, scope, method)
                if isinstance(scope, ast.ClassDef) and isinstance(node.target, ast.Name):
                    self.scopes.bind_attribute(scope, node.target.id, declared)  # a dataclass field, read as self.x
        elif isinstance(node, ast.AugAssign):
            self._store(node.target, HOLDS_OTHER, scope, method)
        elif isinstance(node, ast.NamedExpr):
            self._store(node.target, self._verdict(node.value, scope), scope, method)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._store(node.target, HOLDS_OTHER, scope, method)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            self._store(node.optional_vars, HOLDS_OTHER, scope, method)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.scopes.bind(scope, node.name, HOLDS_OTHER)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    local = alias.asname or (
                        alias.name if isinstance(node, ast.ImportFrom) else alias.name.split(".")[0]
                    )
                    self.scopes.bind(scope, local, HOLDS_OTHER)
        elif isinstance(node, ast.Attribute):
            # An owner to resolve once every binding is known: a name, or self.x in a method.
            if isinstance(node.value, ast.Name):
                self.names.append((scope, node.value.id, node.value))
            else:
                attribute = self._self_attribute(node.value, method)
                if attribute is not None and isinstance(node.value, ast.Attribute):
                    self.attributes.append((attribute[0], attribute[1], node.value))
        items = []
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.comprehension):
                # A comprehension's variable is its own (Python 3): its iterable and conditions are read here.
                items += [(part, scope, method) for part in [child.iter, *child.ifs]]
            else:
                items.append((child, scope, method))
        return items


class TrainerOwners:
    """Which attribute owners of one parsed module are Trainers; ask :meth:`is_trainer` with an owner node of it."""

    def __init__(self, tree: ast.Module) -> None:
        walk = _Bindings(tree)
        scopes = walk.scopes
        self._bound = {id(owner) for scope, name, owner in walk.names if scopes.holds_trainer(scope, name)}
        self._bound |= {id(owner) for cls, name, owner in walk.attributes if scopes.attribute_holds_trainer(cls, name)}

    def is_trainer(self, owner: ast.expr) -> bool:
        """Whether ``owner`` (the expression before ``.attr``, a node of the module read) is a Trainer.

        Args:
            owner: the owner node.

        Returns:
            True where it is bound from a Trainer, or named like a trainer (not a config's ``cfg.trainer``).
        """
        if id(owner) in self._bound:
            return True
        last = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else ""
        return owner_named_like_trainer(ast_dotted(owner) or last)
