"""torchmetrics' ``task=`` where the number of classes can be read from the file (rule ``metrics-num-classes``).

Since torchmetrics 0.11 a classification metric needs ``task=`` (``Accuracy()`` raises); 1.x code wrote
``Accuracy()`` and let torchmetrics infer binary or multiclass from the inputs. Where the file says how many classes
there are, the metric becomes ``Accuracy(task="multiclass", num_classes=N)``, which computes what 1.x computed for a
multiclass model (the wrappers keep 1.x's ``average="micro"``). N is read, nearest first, from:

1. the call itself (a functional metric given ``num_classes=``);
2. the enclosing function: a parameter or a local named like a class count (``num_classes``, ``n_classes``, ...), the
   value another call in it is given as ``num_classes=`` (``resnet(num_classes=cfg.num_classes)``; also pytorchvideo's
   ``model_num_class=``), or such a value that a method of the class it calls reads off the
   parameter it passes (``self.get_model(cfg)``, whose ``get_model(self, cfg)`` builds a model with
   ``num_classes=cfg.train.num_classes``: ``cfg.train.num_classes``);
3. the enclosing class: ``self.num_classes = ...`` (or ``n_classes``, ...), ``self.hparams.num_classes`` read anywhere
   in it, or an integer another call in it is given as ``num_classes=``;
4. the module: a constant ``NUM_CLASSES = 10`` (or ``N_CLASSES``, ...), assigned above the call where the call runs
   at import.

A level that offers two different values decides nothing (the next one is not consulted). Probability curves (AUROC,
ROC, average precision) are often computed per label as binary metrics: they are left with the ``metrics-task`` TODO
unless the call gives ``num_classes=`` itself.
"""

from __future__ import annotations

import libcst as cst

from lightning_mgpu.upgrade.traverse import read_only_visit

#: Names a class count goes by in real code.
CLASS_COUNT_NAMES = frozenset(
    {"num_classes", "n_classes", "nb_classes", "num_class", "n_class", "number_of_classes", "num_cls", "n_cls"}
)
#: Keywords other calls give a class count under: the libraries' own (torchvision's and timm's ``num_classes=``,
#: pytorchvideo's ``create_resnet(model_num_class=400)``). A user's own function's ``num_cls=`` may count something
#: else, or build a head that differs from ``self.num_cls``: it adds no value that could make a level undecided.
COUNT_KEYWORDS = frozenset({"num_classes", "model_num_class"})
#: Metrics whose 1.x use was often binary per label: no inferred count.
CURVE_METRICS = frozenset(
    {"AUROC", "ROC", "AveragePrecision", "PrecisionRecallCurve", "auroc", "roc", "average_precision",
     "precision_recall_curve"}
)  # fmt: skip


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _count_keyword(call: cst.Call, names: frozenset[str] = frozenset({"num_classes"})) -> str | None:
    """The value of a ``num_classes=`` keyword (or one of ``names``), where it is a name, an attribute chain or an
    integer."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in names:
            if isinstance(arg.value, (cst.Name, cst.Attribute, cst.Integer)):
                return _code(arg.value)
    return None


class _Level:
    """The class counts one function, class or module offers."""

    def __init__(self) -> None:
        self.values: dict[str, None] = {}

    def add(self, value: str) -> None:
        self.values[value] = None

    def answer(self) -> str | None | bool:
        """The one value, ``False`` where there are several (undecided), None where there is none."""
        if len(self.values) == 1:
            return next(iter(self.values))
        return False if self.values else None


class _CountVisitor(cst.CSTVisitor):
    """Collects each level's class counts, then answers for every call inside them."""

    def __init__(self) -> None:
        super().__init__()
        self.module = _Level()
        self.stack: list[tuple[str, _Level]] = []  # ("class" | "function", level), innermost last
        self.calls: dict[int, list[_Level]] = {}  # id(call) -> its levels, innermost first
        #: id(class level) -> its methods: name -> (parameters after self, counts read off one: (parameter, ".rest")).
        self.methods: dict[int, dict[str, tuple[list[str], list[tuple[str, str]]]]] = {}
        self.params: dict[int, list[str]] = {}  # id(level) of a method -> its parameters after self
        #: self.method(...) calls: (caller's level, class level, method, positional argument codes, keyword codes).
        self.self_calls: list[tuple[_Level, _Level, str, list[str], dict[str, str]]] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.stack.append(("class", _Level()))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        level = _Level()
        for param in [*node.params.params, *node.params.kwonly_params]:
            if param.name.value in CLASS_COUNT_NAMES:
                level.add(param.name.value)
        if self.stack and self.stack[-1][0] == "class":
            params = [param.name.value for param in [*node.params.params, *node.params.kwonly_params]][1:]
            self.params[id(level)] = params
            self.methods.setdefault(id(self.stack[-1][1]), {})[node.name.value] = (params, [])
        self.stack.append(("function", level))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.stack.pop()

    def _nearest(self, kind: str) -> _Level | None:
        return next((level for k, level in reversed(self.stack) if k == kind), None)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            name = target.target
            if isinstance(name, cst.Name) and not self.stack and name.value.lower() in CLASS_COUNT_NAMES:
                self.module.add(name.value)
            elif isinstance(name, cst.Name) and name.value in CLASS_COUNT_NAMES and self.stack:
                if self.stack[-1][0] == "function":
                    self.stack[-1][1].add(name.value)
            elif (
                isinstance(name, cst.Attribute)
                and isinstance(name.value, cst.Name)
                and name.value.value == "self"
                and name.attr.value in CLASS_COUNT_NAMES
            ):
                owner = self._nearest("class")
                if owner is not None:
                    owner.add(f"self.{name.attr.value}")

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if _code(node.value) == "self.hparams" and node.attr.value in CLASS_COUNT_NAMES:
            owner = self._nearest("class")
            if owner is not None:
                owner.add(_code(node))

    def visit_Call(self, node: cst.Call) -> None:
        value = _count_keyword(node, COUNT_KEYWORDS)
        if value is not None and self.stack:
            if self.stack[-1][0] == "function":
                self.stack[-1][1].add(value)
                self._rooted_at_parameter(value)
            owner = self._nearest("class")
            if owner is not None and (value.isdigit() or value.startswith("self.")):
                owner.add(value)
        self._self_call(node)
        function = self._nearest("function")
        levels = [function] if function is not None else []
        in_method = bool(self.stack) and self.stack[-1][0] == "function" and len(self.stack) >= 2
        owner = self._nearest("class")
        if owner is not None and (in_method or self.stack[-1][0] == "class"):
            levels.append(owner)
        if function is None and owner is None:
            # A module-level call runs before the constants assigned below it: only those above count.
            above = _Level()
            above.values = dict(self.module.values)
            self.calls[id(node)] = [above]
        else:
            self.calls[id(node)] = [*levels, self.module]

    def _rooted_at_parameter(self, value: str) -> None:
        """A method's count read off one of its parameters (``cfg.train.num_classes``, ``cfg`` a parameter): what a
        caller in the class that passes that parameter reads it as (:meth:`resolve_self_calls`)."""
        level = self.stack[-1][1]
        root, dot, rest = value.partition(".")
        owner = self._nearest("class")
        if dot and root in self.params.get(id(level), ()) and owner is not None:
            for params, rooted in self.methods.get(id(owner), {}).values():
                if params is self.params[id(level)]:
                    rooted.append((root, dot + rest))

    def _self_call(self, node: cst.Call) -> None:
        """Record ``self.method(a, b=c)`` made in a method, with its arguments where each is a name or an attribute
        chain (anything else could be a different object by the time the method reads it)."""
        owner = self._nearest("class")
        function = self._nearest("function")
        func = node.func
        if owner is None or function is None or not isinstance(func, cst.Attribute) or _code(func.value) != "self":
            return
        if any(a.star for a in node.args):
            return  # self.m(*args, cfg): which parameter cfg lands in is not written
        positional = [_code(a.value) for a in node.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: _code(a.value) for a in node.args if a.keyword is not None}
        self.self_calls.append((function, owner, func.attr.value, positional, keywords))

    def resolve_self_calls(self) -> None:
        """A method's count read off a parameter counts in each caller that passes that parameter a plain name or
        attribute chain: ``self.model = self.get_model(cfg)`` in ``__init__``, whose ``get_model(self, cfg)`` builds
        ``create_model(num_classes=cfg.train.num_classes)``, gives ``__init__`` the count ``cfg.train.num_classes``."""
        for level, owner, method, positional, keywords in self.self_calls:
            params, rooted = self.methods.get(id(owner), {}).get(method, ([], []))
            for param, rest in rooted:
                index = params.index(param)
                given = positional[index] if index < len(positional) else keywords.get(param)
                if given is not None and all(part.isidentifier() for part in given.split(".")):
                    level.add(given + rest)


def class_counts(module: cst.Module) -> dict[int, str]:
    """For every call in ``module`` (by ``id`` of its node), the class count its context offers, where it offers one.

    Args:
        module: the parsed file (the nodes a transformer will see: the ones it was visited with).

    Returns:
        ``id(call) -> code`` of the count (``"num_classes"``, ``"self.hparams.n_classes"``, ``"10"``).
    """
    visitor = _CountVisitor()
    read_only_visit(module, visitor)
    visitor.resolve_self_calls()
    answers: dict[int, str] = {}
    for call, levels in visitor.calls.items():
        for level in levels:
            answer = level.answer()
            if answer is None:
                continue
            if isinstance(answer, str):
                answers[call] = answer
            break
    return answers


def with_task(call: cst.Call, name: str, count: str | None) -> cst.Call | None:
    """``call`` (a torchmetrics classification metric without ``task=``) with ``task="multiclass"`` and
    ``num_classes=``; None where it cannot be written safely.

    Args:
        call: the metric's call (a class, ``Accuracy(...)``, or a function, ``accuracy(preds, target, ...)``).
        name: the metric's name (upper case first: a class).
        count: the class count the context offers (:func:`class_counts`), or None.

    Returns:
        The new call, or None: no count (neither in the call nor around it), an inferred count for a probability curve,
        a class given positional arguments, or a function given more than ``preds`` and ``target`` positionally.
    """
    given = any(a.keyword is not None and a.keyword.value == "num_classes" for a in call.args)
    if not given and (count is None or name in CURVE_METRICS):
        return None
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) > (0 if name[:1].isupper() else 2):
        return None
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    no_space = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    new = [cst.Arg(keyword=cst.Name("task"), value=cst.SimpleString('"multiclass"'), equal=no_space, comma=space)]
    if not given:
        new.append(
            cst.Arg(
                keyword=cst.Name("num_classes"), value=cst.parse_expression(count or ""), equal=no_space, comma=space
            )
        )
    rest = list(call.args[len(positional) :])
    head = list(positional)
    if head and head[-1].comma is cst.MaybeSentinel.DEFAULT:
        head[-1] = head[-1].with_changes(comma=space)
    if not rest:
        new[-1] = new[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=[*head, *new, *rest])


#: Metric -> (its stand-in in ``lightning_mgpu.upgrade.legacy_metrics``, the positional arguments it takes, the
#: keywords it takes): the calls whose task torchmetrics <= 0.10 inferred and that have an exact stand-in.
INFERRED = {
    "Accuracy": ("LegacyAccuracy", 0, frozenset({"threshold", "top_k", "dist_sync_on_step"})),
    "accuracy": ("legacy_accuracy", 2, frozenset({"threshold", "top_k"})),
    "auroc": ("legacy_auroc", 2, frozenset()),
    "Precision": ("LegacyPrecision", 0, frozenset({"threshold", "dist_sync_on_step"})),
    "Recall": ("LegacyRecall", 0, frozenset({"threshold", "dist_sync_on_step"})),
    "F1Score": ("LegacyF1Score", 0, frozenset({"threshold", "dist_sync_on_step"})),
    "precision": ("legacy_precision", 2, frozenset({"threshold"})),
    "recall": ("legacy_recall", 2, frozenset({"threshold"})),
    "f1_score": ("legacy_f1_score", 2, frozenset({"threshold"})),
}


def with_inferred_task(call: cst.Call, name: str) -> tuple[cst.Call, str] | None:
    """``call`` (a torchmetrics metric without ``task=`` and no class count in sight) with its stand-in that infers the
    task from the inputs as torchmetrics <= 0.10 did (rule ``metrics-inferred-task``), and the stand-in's name to
    import from ``lightning_mgpu.upgrade.legacy_metrics``; None where there is none or the call passes anything else.

    Args:
        call: the metric's call, ``Accuracy()`` or ``accuracy(preds, target)``.
        name: the metric's name as torchmetrics has it.
    """
    if name not in INFERRED:
        return None
    new, positional, keywords = INFERRED[name]
    if any(a.star for a in call.args):
        return None
    given = [a for a in call.args if a.keyword is None]
    if len(given) != positional or any(a.keyword.value not in keywords for a in call.args if a.keyword is not None):
        return None
    return call.with_changes(func=cst.Name(new)), new
