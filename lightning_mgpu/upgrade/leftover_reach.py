"""The leftover scan's own answer to "may these settings reach a Trainer whole?" (rule ``trainer-key-unfollowed``).

Part of the independent scan (:mod:`lightning_mgpu.upgrade.leftovers`): it reads the converted file with :mod:`ast`
only and decides by itself, without the transformer's ``scopes.FileFacts``, so that it can catch the tool exempting a
key it should not have. Its reading is simpler than the tool's and errs on flagging:

- a 1.x key (``{"gpus": ...}``, ``dict(gpus=...)``, ``H["gpus"] = ...``) is exempt only where the settings are held in
  a named holder: ``H = {...}`` / ``H = dict(...)`` / ``H = Munch({...})`` (a known mapping class around one dict) /
  ``H: T = {...}``, the dict also nested as a value of such a dict, or ``H[...]["gpus"] = v``; ``H`` a name or a
  dotted path (``config.trainer``). Anything else (a dict handed straight to a call, in a list, a class attribute, a
  subscript of a call's result) has no holder the scan can follow: flagged unless a TODO marks it.
- from the holder, everything the file does with it is followed by name, file-wide (a name in another function counts
  too): each occurrence of a path that is the holder, holds it (``config`` for ``config.trainer``) or lies inside it
  (``config.trainer.gpus``), and what it flows into (an alias, a container, a call's result, a function's parameter,
  a loop variable, a function's return value at the places that call it).
- the settings may reach a Trainer whole where any of those is splatted into any call (``f(**H)``, ``f(*H)``), given
  positionally to a call named ``...Trainer``, given in any way to ``from_argparse_args`` or ``instantiate``, returned
  from a function this file does not only call (its caller is elsewhere, or it is handed around as a value), used in a
  lambda, or is the result of a call assigned to a name with "trainer" in it, one annotated as a Trainer
  (``runner: pl.Trainer = build(H)``) or one whose ``fit`` is called (or whose ``fit`` is called at once). A use the
  scan does not know is counted as reaching one.
- settings that reach a Trainer only through this bundle's translation at run time (given to ``legacy_trainer_kwargs``
  or to ``from_argparse_args(Trainer, ...)``, splatted or not) need nothing for a key that translation takes as 1.x's
  Trainer read it (:data:`TRANSLATED`, the scan's own copy of what ``trainer_args.legacy_trainer_kwargs`` takes); a
  key or value it refuses is flagged unless a TODO marks it. ``Namespace(**H)`` holds the settings (its result is
  followed), as a mapping class does.
- a keyword argument of a ``...Trainer`` call (``gpus=config.trainer.gpus``) reads one field, which the scan checks as
  a Trainer keyword of its own; a comparison, a condition, an f-string, an index, a discarded call result, a write
  into the holder (``H["x"] = v``, ``H.x = v``) hand nothing on.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_mgpu.upgrade.trainer_names import annotates_trainer, named_like_trainer

#: Classes (the last name of the call) that wrap one dict into a mapping or an attribute-access config: a holder
#: ``H = Munch({...})`` holds the dict's keys as ``H = {...}`` would.
MAPPING_WRAPPERS = frozenset(
    {"dict", "OrderedDict", "Munch", "munchify", "EasyDict", "edict", "AttrDict", "DotMap", "Box", "ConfigDict"}
)
#: Calls that build a Trainer from the object they are handed, whichever argument it is.
BUILDERS = frozenset({"from_argparse_args", "instantiate"})
#: The 1.x settings keys that trainer_args.legacy_trainer_kwargs translates -> the constant values it takes (None:
#: any value); any other value it refuses with a ValueError. The scan's own copy (the tool's is rules.RUN_TIME_KEYS):
#: tests/unit/upgrade checks both against legacy_trainer_kwargs itself.
_BACKENDS = ("dp", "ddp", "ddp_spawn", "ddp2", "horovod", "ddp_cpu", "ddp_sharded", "ddp_sharded_spawn")
TRANSLATED: dict[str, tuple[object, ...] | None] = {
    **dict.fromkeys(
        (
            "gpus",
            "num_processes",
            "replace_sampler_ddp",
            "reload_dataloaders_every_epoch",
            "progress_bar_refresh_rate",
            "auto_select_gpus",
            "amp_level",
        )
    ),
    "distributed_backend": (None, "", *_BACKENDS),
    "checkpoint_callback": (None, True, False),
    "weights_summary": (None, "top", "full"),
    "amp_backend": (None, "native"),
    "resume_from_checkpoint": (None,),
}
#: Calls that build an argparse namespace from the settings: their result holds them, and is no trainer.
NAMESPACES = frozenset({"Namespace"})
#: Parents whose value is a new object that still holds what its part held (a container, a conditional, a
#: ``{**a, **b}`` merge, ``a | b``, ``await x``): the walk goes on from them.
_CARRIERS = (ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Starred, ast.IfExp, ast.BoolOp, ast.BinOp, ast.Await)
#: Parents that hand nothing on: a comparison, ``not``/``-``, a string, a test, ``assert``/``del``/``raise``, a
#: discarded value.
_STOPS = (
    ast.Compare,
    ast.UnaryOp,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.If,
    ast.While,
    ast.Assert,
    ast.Delete,
    ast.Raise,
    ast.Expr,
)


def _name(func: ast.expr) -> str:
    """The last name of a call's function: ``pl.Trainer`` -> ``Trainer``; "" for anything else."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _path(node: ast.expr) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, a subscript counted as its base (``cfg["x"].y`` -> ``cfg``)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Subscript):
            return _path(node.value)
        base = _path(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _translates(call: ast.Call) -> bool:
    """``legacy_trainer_kwargs(...)`` or ``from_argparse_args(Trainer, ...)`` (a Trainer's: the first argument, or
    the owner of the method, named ...Trainer): settings handed to it in any way are translated at run time."""
    name = _name(call.func)
    if name == "legacy_trainer_kwargs":
        return True
    if name != "from_argparse_args":
        return False
    owners = [call.func.value] if isinstance(call.func, ast.Attribute) else []
    owners += call.args[:1]
    return any(isinstance(o, (ast.Name, ast.Attribute)) and _name(o) == "Trainer" for o in owners)


def _literal(node: ast.expr | None) -> object:
    """A constant's value (a string, number, True/False/None); ``...`` for anything else, as the tool reads one."""
    return node.value if isinstance(node, ast.Constant) and node.value is not ... else ...


def _taken(key: str, value: object) -> bool:
    """Whether legacy_trainer_kwargs translates ``key`` holding ``value`` (``...``: no constant) without refusing it
    (True is not taken for 1: it checks checkpoint_callback's type)."""
    if key not in TRANSLATED:
        return False
    taken = TRANSLATED[key]
    return taken is None or (value is not ... and any(type(value) is type(t) and value == t for t in taken))


def _overlaps(path: str, holder: str) -> bool:
    """Whether ``path`` is ``holder``, holds it or lies inside it (``config`` / ``config.trainer.gpus`` for
    ``config.trainer``)."""
    a, b = path.split("."), holder.split(".")
    if b[0] in ("self", "cls") and len(b) > 1:
        # An attribute of self/cls is reached through other names too (pipeline.cfg for self.cfg): compared without
        # the root. The bare object (self) is not counted as holding it: every method call on self would then carry
        # the settings, and a Trainer built from a whole object (Trainer(**vars(self))) is not a shape of real code.
        if len(a) < 2:
            return False
        a, b = a[1:], b[1:]
    n = min(len(a), len(b))
    return a[:n] == b[:n]


class _Reach:
    """What one converted file does with its settings holders: built once per file, asked per holder."""

    def __init__(self, tree: ast.AST) -> None:
        self.parent: dict[int, ast.AST] = {}
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.chains: list[tuple[str, ast.expr]] = []  # (the path it reads, the outermost node of that chain)
        self.fitted: set[str] = set()  # last names X of every X.fit(...)
        self.calls: dict[str, list[ast.Call]] = {}  # function name -> calls of it (f(...), x.f(...))
        self.refs: set[str] = set()  # names read as a value, not called (a function handed around)
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[id(child)] = node
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.Call):
                self.calls.setdefault(_name(node.func), []).append(node)
                if isinstance(node.func, ast.Attribute) and node.func.attr == "fit":
                    self.fitted.add(_name(node.func.value))
        self._returning: set[str] = set()  # the functions whose callers are being followed (a recursive one)
        self._translated = False  # set by _flow where the settings reach the bundle's translation at run time
        for node in ast.walk(tree):
            if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and not self._is_chain_inner(node):
                path = self._read_path(node)
                if path is not None:
                    self.chains.append((path, node))
            if isinstance(node, (ast.Name, ast.Attribute)):
                up = self.parent.get(id(node))
                if not (isinstance(up, ast.Call) and up.func is node):
                    self.refs.add(_name(node))

    def _is_chain_inner(self, node: ast.expr) -> bool:
        up = self.parent.get(id(node))
        return isinstance(up, (ast.Attribute, ast.Subscript)) and up.value is node

    def _read_path(self, node: ast.expr) -> str | None:
        """The path the chain ending at ``node`` reads; a method called on it (``cfg.copy()``) counted as its owner,
        whose whole object the method may hand back."""
        up = self.parent.get(id(node))
        if isinstance(node, ast.Attribute) and isinstance(up, ast.Call) and up.func is node:
            return _path(node.value)
        return _path(node)

    def reaches(self, holder: str) -> tuple[bool, bool]:
        """Whether the settings held in ``holder`` (a dotted path) may reach a Trainer whole (module docstring), and
        whether they reach the bundle's translation at run time (read only where the first is False)."""
        seen, work = {holder}, [holder]
        self._returning = set()
        self._translated = False
        while work:
            current = work.pop()
            for path, node in self.chains:
                if not _overlaps(path, current):
                    continue
                found: set[str] = set()
                if self._flow(node, found, through_call=False):
                    return True, self._translated
                for new in found - seen:
                    seen.add(new)
                    work.append(new)
        return False, self._translated

    def _flow(self, node: ast.AST, found: set[str], through_call: bool) -> bool:
        """Follow the value of ``node`` up its parents: True where it may reach a Trainer whole; paths it is stored
        into go to ``found``. ``through_call``: the value is a call's result that was handed the settings."""
        up = self.parent.get(id(node))
        if up is None or isinstance(up, _STOPS):
            return False  # the module itself, or a use that hands nothing on
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
            return False  # a write into the holder (H["x"] = v, H.x = v) or a rebinding: nothing is handed on
        if isinstance(up, (ast.Attribute, ast.Subscript)):
            if isinstance(up, ast.Subscript) and up.slice is node:
                return False  # used as an index
            if isinstance(up, ast.Attribute) and up.attr == "fit" and through_call:
                return True  # build(settings).fit(model): the call's result is a trainer
            return self._flow(up, found, through_call)  # a field of it (or of a call's result)
        if isinstance(up, ast.Call):
            if up.func is node:
                return self._flow(up, found, through_call=True)  # a method of it: its result may hold the settings
            return self._argument(node, up, found)
        if isinstance(up, ast.keyword):
            call = self.parent[id(up)]
            if not isinstance(call, ast.Call):
                return True  # class C(Base, option=settings): not followed
            if up.arg is None and _translates(call):
                self._translated = True  # from_argparse_args(Trainer, args, **settings): translated at run time
                return False
            if up.arg is None and _name(call.func) in NAMESPACES:
                return self._flow(call, found, through_call=False)  # ns = Namespace(**settings): ns holds them
            if up.arg is None:
                return True  # f(**settings): handed whole to whatever f is
            return self._argument(up, call, found)
        if isinstance(up, _CARRIERS):
            if isinstance(up, ast.Starred) and isinstance(self.parent.get(id(up)), ast.Call):
                return True  # f(*settings)
            if isinstance(up, ast.Dict) and node in up.keys and node is not None:
                return False  # a key of a dict: its name, not its settings
            return self._flow(up, found, through_call)
        if isinstance(up, ast.NamedExpr):
            found.update(p for p in [_path(up.target)] if p)
            return self._flow(up, found, through_call)
        if isinstance(up, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = up.targets if isinstance(up, ast.Assign) else [up.target]
            for target in targets:
                for stored in _stored(target):
                    # trainer = build(settings): a call whose result is a trainer was handed them. Not a store into
                    # a subscript (trainer_args["callbacks"] = f(trainer_args[...]) writes into the dict it names).
                    last = stored.rsplit(".", 1)[-1]
                    # (runner: pl.Trainer = build(settings): annotated as one)
                    annotated = isinstance(up, ast.AnnAssign) and annotates_trainer(ast.unparse(up.annotation))
                    named = not isinstance(target, ast.Subscript) and (
                        named_like_trainer(last) or last in self.fitted or annotated
                    )
                    if through_call and named:
                        return True
                    found.add(stored)
            return False
        if isinstance(up, (ast.For, ast.AsyncFor, ast.comprehension)):
            if up.iter is not node:
                return False  # the loop variable itself is written, not read
            found.update(_stored(up.target))  # for x in settings: x holds a part of them
            return self._flow(self.parent[id(up)], found, through_call) if isinstance(up, ast.comprehension) else False
        if isinstance(up, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self._flow(up, found, through_call)  # the element of a comprehension: the new container holds it
        if isinstance(up, ast.withitem):
            found.update(_stored(up.optional_vars) if up.optional_vars is not None else ())
            return False
        if isinstance(up, (ast.Return, ast.Yield, ast.YieldFrom)):
            return self._returned(up, found)
        return True  # a use this scan does not follow (a lambda, a decorator, a default value, ...): it may reach one

    def _argument(self, arg: ast.AST, call: ast.Call, found: set[str]) -> bool:
        """``arg`` (an expression or a keyword) is handed to ``call``."""
        name = _name(call.func)
        keyword = arg.arg if isinstance(arg, ast.keyword) else None
        if _translates(call):
            # legacy_trainer_kwargs(settings), from_argparse_args(Trainer, settings): what reaches the Trainer is
            # the translation's 2.x keys; the 1.x keys are checked against what it takes (KeyReach).
            self._translated = True
            return False
        if name in BUILDERS:
            return True  # from_argparse_args / hydra's instantiate build a Trainer from what they are handed
        if keyword is not None and "trainer" in keyword.lower():
            return True  # LightningCLI(trainer_defaults=settings), a library's trainer_kwargs=: a Trainer's settings
        if name.endswith("Trainer"):
            # Trainer(settings, ...) hands them whole; Trainer(gpus=config.trainer.gpus) reads one field, which the
            # scan checks as a Trainer keyword of its own.
            return keyword is None
        # A function of this file: what it does with its parameter is followed (every def of that name; what it
        # returns comes back to its calls through _returned), and, as for any other call, its result (trainer =
        # build(settings) is a trainer built from them, whatever build does).
        for function in self.functions.get(name, []):
            found.update(_parameters(function, call, arg, keyword))
        # Anything else may hand back what it was given (dict(settings), copy(settings), Net(settings).hparams). A
        # mapping class (Munch({...}), dict(cfg)) builds a mapping, not a trainer: its result is the settings again.
        return self._flow(call, found, through_call=name not in MAPPING_WRAPPERS | NAMESPACES)

    def _returned(self, node: ast.Return | ast.Yield | ast.YieldFrom, found: set[str]) -> bool:
        """Returned from the function around ``node``: its callers receive the settings."""
        function = self._function(node)
        if function is None:
            return True  # a return in a lambda or at the top of a notebook: not followed
        calls = self.calls.get(function.name, [])
        if not calls or function.name in self.refs:
            return True  # its caller is elsewhere, or the function is handed around as a value
        if function.name in self._returning:
            return False  # a recursive function: its callers are being followed already
        self._returning.add(function.name)
        return any(self._flow(call, found, through_call=False) for call in calls)

    def _function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        up = self.parent.get(id(node))
        while up is not None and not isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            up = self.parent.get(id(up))
        return up if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _stored(target: ast.expr) -> Iterator[str]:
    """The paths an assignment target stores into (``a, b.c`` -> ``a``, ``b.c``; ``d["k"]`` -> ``d``)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _stored(element)
    elif isinstance(target, ast.Starred):
        yield from _stored(target.value)
    else:
        path = _path(target)
        if path is not None:
            yield path


def _parameters(
    function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, arg: ast.AST, keyword: str | None
) -> set[str]:
    """The parameter(s) of ``function`` that ``arg`` of ``call`` binds; every parameter where that is not clear."""
    args = function.args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    every = {*positional, *(a.arg for a in args.kwonlyargs)} | {
        a.arg for a in (args.vararg, args.kwarg) if a is not None
    }
    if keyword is not None:
        named = keyword if keyword in every else (args.kwarg.arg if args.kwarg is not None else None)
        return {named} if named else set()
    if any(isinstance(a, ast.Starred) for a in call.args):
        return every - {"self", "cls"}
    index = next(i for i, a in enumerate(call.args) if a is arg)
    if positional and positional[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
        index += 1  # obj.method(x): x is the parameter after self
    if index < len(positional):
        return {positional[index]}
    return {args.vararg.arg} if args.vararg is not None else set()


def holder(node: ast.AST, parents: dict[int, ast.AST]) -> str | None:
    """The named holder of the settings a 1.x key is written into (module docstring), or None where there is none the
    scan can follow. ``node``: the dict display, the ``dict(...)`` call, or the ``H[...]["key"]`` store target."""
    if isinstance(node, ast.Subscript):
        return _path(node.value) if isinstance(node.ctx, ast.Store) else None
    while True:
        up = parents.get(id(node))
        if isinstance(up, ast.Dict) and node in up.values:
            node = up  # {"trainer": {"gpus": 1}}: the outer dict holds it
        elif isinstance(up, ast.Call) and up.args == [node] and not up.keywords and _name(up.func) in MAPPING_WRAPPERS:
            node = up  # Munch({...}), OrderedDict({...})
        elif isinstance(up, ast.keyword) and up.arg is not None:
            call = parents.get(id(up))
            if not (isinstance(call, ast.Call) and not call.args and _name(call.func) in MAPPING_WRAPPERS):
                return None  # a keyword of some other call: handed to it
            node = call  # dict(trainer={"gpus": 1}): the outer dict holds it
        else:
            break
    if isinstance(up, ast.Assign) and len(up.targets) == 1 and up.value is node:
        target = up.targets[0]
    elif isinstance(up, ast.AnnAssign) and up.value is node:
        target = up.target
    else:
        return None  # handed to a call, in a list, returned, ...: no holder to follow
    if isinstance(parents.get(id(up)), ast.ClassDef):
        return None  # a class attribute: read as Class.H / self.H / obj.H, not followed
    return _path(target.value) if isinstance(target, ast.Subscript) else _path(target)


class KeyReach:
    """Per file: whether a 1.x key at a node is written into settings that may reach a Trainer whole."""

    def __init__(self, tree: ast.AST) -> None:
        self._tree = tree
        self._built: _Reach | None = None  # built at the first key: most files write none
        self._cache: dict[str, tuple[bool, bool]] = {}

    @property
    def _reach(self) -> _Reach:
        if self._built is None:
            self._built = _Reach(self._tree)
        return self._built

    def may_reach_trainer(self, node: ast.AST, key: str = "", value: ast.expr | None = None) -> bool:
        """``node``: a dict display, a ``dict(...)`` call or a subscript store target holding the 1.x key ``key``,
        given ``value`` (for a store target: found here). True (a leftover unless a TODO marks it) where it has no
        named holder, or its holder may reach a Trainer whole, or reaches one only through the bundle's translation
        at run time, which refuses this key or value (rules.translated_at_run_time)."""
        path = holder(node, self._reach.parent)
        if path is None:
            return True
        if path not in self._cache:
            self._cache[path] = self._reach.reaches(path)
        whole, translated = self._cache[path]
        if whole or not translated:
            return whole
        if isinstance(node, ast.Subscript) and value is None:
            store = self._reach.parent.get(id(node))
            value = store.value if isinstance(store, (ast.Assign, ast.AnnAssign)) else None
        return not _taken(key, _literal(value))
