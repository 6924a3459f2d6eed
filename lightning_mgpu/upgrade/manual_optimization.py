"""``training_step(self, batch, batch_idx, optimizer_idx)`` over several optimizers -> Lightning 2's manual
optimization, doing what 1.x's automatic loop did (rule ``manual-optimization``).

Lightning 2.0 removed automatic optimization with several optimizers. The class keeps the user's step as
``_training_step_1x(self, batch, batch_idx, optimizer_index)`` (its code unchanged but for the parameter's name: 2.x
readers flag any ``optimizer_idx`` parameter as a 1.x leftover) and gets ``automatic_optimization = False`` and a new
``training_step(self, batch, batch_idx)`` that does, per batch, what Lightning 1.9's ``OptimizerLoop`` did
(loops/optimization/optimizer_loop.py, loops/utilities.py ``_get_active_optimizers``):

- the active optimizers, in order: all of them, or with ``"frequency"`` keys only one, taking turns over consecutive
  batches of the epoch (``batch_idx % sum(frequencies)`` placed in the cumulative frequencies);
- for each: ``toggle_optimizer`` (1.x toggled when there were several), ``zero_grad``, the user's step with that
  index, its loss (``out["loss"]`` from a dict), ``manual_backward``, the Trainer's gradient clipping (moved from
  the Trainer, which 2.x refuses with manual optimization), ``step``, ``untoggle_optimizer``; a step that returns
  None skips the backward and the step, as 1.x's AMP path did and as its fp32 path did in effect (zero_grad left
  no gradients for the optimizer to apply);
- then the schedulers, as 1.9's ``TrainingEpochLoop.update_lr_schedulers`` (2.x steps none under manual
  optimization): interval ``"step"`` every ``frequency`` batches of the epoch, ``"epoch"`` after the epoch's last
  batch every ``frequency`` epochs, only those of the optimizers active at the batch (with optimizer frequencies 1.x
  asked that of the batch's index across epochs).

Subclasses in the same file follow their base: a 1.x step of their own becomes their ``_training_step_1x``
(``super().training_step`` -> ``super()._training_step_1x``), a step of one optimizer gets
``automatic_optimization = True`` back, a ``configure_optimizers`` of their own that repeats the base's frequencies
loses the keys; a subclass in any other shape keeps the whole family as it was. A base's ``@abstractmethod`` step
(the subclasses' steps are the real ones) is taken, as are parameters after the index that have defaults (1.x never
passed them, see :func:`_step_of_1x`). Subclasses in
other files cannot be seen: a one-optimizer subclass elsewhere inherits ``automatic_optimization = False``.

Frequencies the method does not spell out (a config's value, dicts updated in a loop) are read when the fit begins:
the user's method is kept as ``_configure_optimizers_1x`` and a new ``configure_optimizers`` passes its result through
:func:`lightning_mgpu.upgrade.legacy_optimizers.legacy_optimizer_frequencies` (:func:`reads_frequencies_at_run_time`).

Converted only where the file shows all of it; otherwise the ``optimizer-idx`` TODO stays, followed by the reason
(:func:`refusal`): the class defines ``configure_optimizers`` (without ``ReduceLROnPlateau`` or ``"monitor"``: 2.x
drops the monitor under manual optimization) and does not call it itself where its frequencies are read at run time,
no hook that 2.x skips under manual optimization
(``optimizer_step``, ``optimizer_zero_grad``, ``lr_scheduler_step``) or that took the step's output per optimizer
(``training_step_end``) is overridden, truncated backprop is not used, and the file's Trainers do not accumulate
gradients (2.x refuses ``accumulate_grad_batches`` with manual optimization) nor clip them in a way the file does
not show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.scopes import dotted, is_trainer_call, literal
from lightning_mgpu.upgrade.traverse import FunctionBodyVisitor, read_only_visit

RULE = "manual-optimization"
HELPER = "_training_step_1x"
INDEX = "optimizer_index"
#: The user's configure_optimizers where its frequencies are read at run time (:func:`reads_frequencies_at_run_time`).
CONFIGURE_HELPER = "_configure_optimizers_1x"
#: The run-time reader of those frequencies (lightning_mgpu.upgrade.legacy_optimizers), imported by converted code.
FREQUENCY_READER = "legacy_optimizer_frequencies"
#: Hooks 2.x does not call under manual optimization, or that 1.x called once per optimizer: their class stays.
REFUSED_HOOKS = frozenset(
    {
        "optimizer_step",
        "optimizer_zero_grad",
        "lr_scheduler_step",
        "training_step_end",
        "tbptt_split_batch",
        HELPER,
        CONFIGURE_HELPER,
    }
)
CLIP_ARGS = ("gradient_clip_val", "gradient_clip_algorithm")


@dataclass(frozen=True)
class Clip:
    """The Trainer's gradient clipping, as code: the module clips by hand under manual optimization."""

    value: str
    algorithm: str | None


@dataclass(frozen=True)
class ManualPlan:
    """The classes this file converts, and the clipping moved from its Trainers into them.

    ``subclasses``: the file's subclasses of a converted class, by name: ``"helper"`` (its own 1.x step becomes its
    ``_training_step_1x``, which the inherited step calls), ``"automatic"`` (a step of one optimizer, without
    ``optimizer_idx``: it sets ``automatic_optimization = True`` again) or ``"inherit"`` (nothing to change).
    """

    classes: frozenset[str]
    clip: Clip | None = None
    subclasses: tuple[tuple[str, str], ...] = ()
    #: class name -> why its 1.x step was not converted, in words for the optimizer-idx TODO (:func:`refusal`)
    refused: tuple[tuple[str, str], ...] = ()

    def why(self, name: str) -> str:
        """Why the class ``name`` keeps the optimizer-idx TODO, or ``""``."""
        return dict(self.refused).get(name, "")

    def kind(self, name: str) -> str:
        """``"base"``, a subclass's kind, or ``""`` for a class this rule leaves alone."""
        if name in self.classes:
            return "base"
        return dict(self.subclasses).get(name, "")


#: The generated helper's turn-taking over ``frequencies`` (1.x's: consecutive batches per optimizer, in order).
_TAKE_TURNS = (
    "        place = batch_idx % sum(frequencies)\n"
    "        for index, frequency in enumerate(frequencies):\n"
    "            if place < frequency:\n"
    "                return [index]\n"
    "            place -= frequency\n"
    "        return []\n"
)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    return {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}


def _is_lightning_class(cls: cst.ClassDef) -> bool:
    bases = {(dotted(b.value) or "").rsplit(".", 1)[-1] for b in cls.bases}
    return bool(bases - rules.NON_LIGHTNING_BASES)


class _Names(cst.CSTVisitor):
    """The identifiers an expression reads (not attribute names, not keyword names) and whether it calls."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.calls = False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        read_only_visit(node.value, self)  # the attribute's own name is not a read
        return False

    def visit_Call(self, node: cst.Call) -> None:
        self.calls = True


def _self_rooted(node: cst.BaseExpression) -> bool:
    """A literal, or an expression that reads only ``self`` and calls nothing (``self.hparams.n_critic``): it can be
    read again in another method with the same value."""
    if isinstance(node, (cst.Integer, cst.SimpleString)):
        return True
    names = _Names()
    read_only_visit(node, names)
    return not names.calls and names.names <= {"self"}


def _dict_key(element: cst.BaseDictElement) -> object:
    return literal(element.key) if isinstance(element, cst.DictElement) else ...


def frequencies(configure: cst.FunctionDef) -> list[str] | bool:
    """The optimizers' 1.x ``"frequency"`` values as code, in order; ``[]`` where none is given; False where the
    method does not show them in a form that can be read again (the class is not converted).

    The one shape taken: ``return [{"optimizer": ..., "frequency": f}, ...]`` (a list or a tuple of dict literals),
    each ``f`` a literal or read from ``self``. A scheduler's ``"frequency"`` (in a dict with ``"scheduler"``) is
    not an optimizer's: 2.x keeps it in the scheduler's config, where the new step reads it.
    """
    code = _code(configure)
    if "frequency" not in code:
        return []
    dicts: list[cst.Dict] = []
    returns: list[cst.Return] = []

    class _Find(FunctionBodyVisitor):  # a nested function's dicts and returns are not the method's
        def visit_Dict(self, node: cst.Dict) -> None:
            dicts.append(node)

        def visit_Return(self, node: cst.Return) -> None:
            returns.append(node)

    read_only_visit(configure, _Find(configure))
    keyed = [d for d in dicts if any(_dict_key(e) == "frequency" for e in d.elements)]
    # Every "frequency" of the method is a key of one of its dict literals (not dict(frequency=...), not a variable).
    if code.count("frequency") != sum(1 for d in keyed for e in d.elements if _dict_key(e) == "frequency"):
        return False
    optimizer_dicts = [d for d in keyed if not any(_dict_key(e) == "scheduler" for e in d.elements)]
    if not optimizer_dicts:
        return []
    for ret in returns:
        if not isinstance(ret.value, (cst.List, cst.Tuple)):
            continue
        values = [e.value for e in ret.value.elements if isinstance(e, cst.Element)]
        if not any(v in optimizer_dicts for v in values):
            continue
        # The one return with frequencies: all its entries are optimizer dicts with one each, readable again.
        if len(values) != len(ret.value.elements) or set(map(id, values)) != set(map(id, optimizer_dicts)):
            return False
        found = []
        for value in values:
            assert isinstance(value, cst.Dict)
            entries = [e for e in value.elements if isinstance(e, cst.DictElement) and _dict_key(e) == "frequency"]
            if len(entries) != 1 or not _self_rooted(entries[0].value):
                return False
            found.append(_code(entries[0].value))
        return found
    return False


class _DropFrequency(cst.CSTTransformer):
    """Removes the ``"frequency"`` entries from the dicts ``configure_optimizers`` returns (2.x warns about the key;
    the new training_step reads the values)."""

    def leave_Dict(self, original: cst.Dict, updated: cst.Dict) -> cst.Dict:
        if any(_dict_key(e) == "scheduler" for e in updated.elements):
            return updated  # a scheduler's frequency: 2.x keeps it
        kept = [e for e in updated.elements if _dict_key(e) != "frequency"]
        if len(kept) == len(updated.elements) or not kept:
            return updated
        kept[-1] = kept[-1].with_changes(comma=updated.elements[-1].comma)
        return updated.with_changes(elements=kept)


#: The decorators a 1.x step may have: ``@abstractmethod`` on a base's step (a LightningModule is no ABC: it marks
#: the step its subclasses override, and stays on the helper they override in turn).
_STEP_DECORATORS = frozenset({"abstractmethod", "abc.abstractmethod"})


def _step_of_1x(step: cst.FunctionDef) -> bool:
    """``def training_step(self, batch, batch_idx, optimizer_idx)`` (a default on the index is kept: the new step
    passes it), undecorated but for ``@abstractmethod``, its body free of the name its index is renamed to. Further
    parameters must have defaults and not be truncated backprop's ``hiddens``: 1.x passed the batch, its index and
    the optimizer's, and hiddens only under truncated backprop (which the class and its file do not show, see
    :func:`_safe_class`), so each kept its default, as it does when the new step calls the helper."""
    params = step.params
    if (
        any(dotted(d.decorator) not in _STEP_DECORATORS for d in step.decorators)
        or params.star_arg is not cst.MaybeSentinel.DEFAULT
        or params.kwonly_params
        or params.star_kwarg is not None
        or params.posonly_params
        or any(p.default is not None for p in params.params[:3])
        or any(p.default is None or p.name.value == "hiddens" for p in params.params[4:])
    ):
        return False
    names = [p.name.value for p in params.params]
    return len(names) >= 4 and names[0] == "self" and names[3] == "optimizer_idx" and INDEX not in _code(step)


def _safe_class(cls: cst.ClassDef) -> bool:
    """Nothing in ``cls`` that manual optimization would skip or change (see the module's docstring)."""
    methods = _methods(cls)
    if REFUSED_HOOKS & set(methods):
        return False
    code = _code(cls)
    if "automatic_optimization" in code or "truncated_bptt_steps" in code:
        return False  # manual optimization already, or truncated backprop through time
    configure = methods.get("configure_optimizers")
    if configure is not None and any(word in _code(configure) for word in ("ReduceLROnPlateau", "monitor")):
        return False  # 2.x drops the monitor under manual optimization: stepping it by hand is the user's call
    # Hooks 2.x no longer passes optimizer_idx to (on_before_optimizer_step, backward, ...) must not read it.
    for name, method in methods.items():
        if name in rules.HOOK_DROPPED_PARAMS and name != "training_step":
            if "optimizer_idx" in {p.name.value for p in method.params.params}:
                if "optimizer_idx" in _code(method.body):
                    return False
    return True


def convertible(cls: cst.ClassDef) -> bool:
    """Whether ``cls`` is a LightningModule whose ``training_step`` takes ``optimizer_idx`` in a shape this rule
    converts faithfully (see the module's docstring)."""
    if not _is_lightning_class(cls):
        return False
    methods = _methods(cls)
    step, configure = methods.get("training_step"), methods.get("configure_optimizers")
    if step is None or configure is None or not _step_of_1x(step) or not _safe_class(cls):
        return False
    # Decision: frequencies the file does not spell out (frequencies() is False) are read when the fit begins
    # (reads_frequencies_at_run_time), unless the class calls configure_optimizers itself: it would get the
    # reader's result, not the 1.x one.
    return frequencies(configure) is not False or _code(cls).count("configure_optimizers") == 1


def reads_frequencies_at_run_time(cls: cst.ClassDef) -> bool:
    """Whether :func:`convert` keeps ``cls``'s ``configure_optimizers`` as ``_configure_optimizers_1x`` and reads its
    ``"frequency"`` keys at run time (``legacy_optimizer_frequencies``): the method mentions them in a shape
    :func:`frequencies` cannot read again (a value from a config, a dict updated in a loop)."""
    configure = _methods(cls).get("configure_optimizers")
    return configure is not None and frequencies(configure) is False


def refusal(cls: cst.ClassDef) -> str:
    """Why :func:`convertible` refuses ``cls`` (a class whose step takes ``optimizer_idx``), in words that tell the
    person what the tool could not see or do; ``""`` where it does not refuse it, or the class is no 1.x module."""
    methods = _methods(cls)
    step, configure = methods.get("training_step"), methods.get("configure_optimizers")
    if step is None or "optimizer_idx" not in {p.name.value for p in step.params.params}:
        return ""  # a step of one optimizer: nothing to refuse
    if not _is_lightning_class(cls) or convertible(cls):
        return ""
    if configure is None:
        return (
            "configure_optimizers is not in this class: how many optimizers 1.x stepped, and any 'frequency' turns,"
            " are not shown"
        )
    if not _step_of_1x(step):
        return "its signature is not (self, batch, batch_idx, optimizer_idx), later parameters with defaults"
    hooks = sorted(REFUSED_HOOKS & set(methods))
    if hooks:
        return f"{', '.join(hooks)} overridden: 2.x does not call it under manual optimization"
    code = _code(cls)
    if "automatic_optimization" in code:
        return "the class sets automatic_optimization itself"
    if "truncated_bptt_steps" in code:
        return "truncated backprop: 1.x passed the step hiddens"
    if any(word in _code(configure) for word in ("ReduceLROnPlateau", "monitor")):
        return (
            "ReduceLROnPlateau or a monitor: 2.x steps no scheduler under manual optimization; step it in"
            " on_train_epoch_end with self.trainer.callback_metrics[its monitor], where 1.x stepped it (after the"
            " epoch's validation)"
        )
    if frequencies(configure) is False:
        return (
            "the optimizers' 'frequency' values are read at run time, and the class calls configure_optimizers itself"
        )
    return "a hook reads optimizer_idx, which 2.x no longer passes to it"


def _subclass_kind(cls: cst.ClassDef, base_frequencies: list[str]) -> str | None:
    """What a subclass of a converted class needs (see :class:`ManualPlan`), or None where it cannot be made
    faithful (the whole family then keeps the TODO)."""
    if not _safe_class(cls):
        return None
    methods = _methods(cls)
    configure = methods.get("configure_optimizers")
    if configure is not None:
        own = frequencies(configure)
        if own is False or (own and own != base_frequencies):
            return None  # its own frequencies: the inherited step turns by the base's
    step = methods.get("training_step")
    if step is None:
        return "inherit"
    if "optimizer_idx" not in {p.name.value for p in step.params.params}:
        return "automatic"
    return "helper" if _step_of_1x(step) else None


class _TrainerArgs(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, set[str]] = {"gradient_clip_val": set(), "gradient_clip_algorithm": set()}
        self.seen = {"gradient_clip_val": 0, "gradient_clip_algorithm": 0, "accumulate_grad_batches": 0}
        self.unreadable = False
        self.trainers = 0

    def visit_Call(self, node: cst.Call) -> None:
        if not is_trainer_call(node):
            return
        self.trainers += 1
        for arg in node.args:
            key = arg.keyword.value if arg.keyword is not None else None
            if key not in self.seen:
                continue
            self.seen[key] += 1
            value = literal(arg.value)
            if key == "accumulate_grad_batches":
                self.unreadable |= value != 1
            elif key == "gradient_clip_val" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.values[key].add(_code(arg.value))
            elif key == "gradient_clip_algorithm" and isinstance(value, str):
                self.values[key].add(_code(arg.value))
            else:
                self.unreadable = True


def plan(module: cst.Module) -> ManualPlan:
    """The classes of this file that become manual optimization, and the clipping their Trainer moves into them.

    Args:
        module: the parsed file.
    """
    classes: list[cst.ClassDef] = []

    class _Classes(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            classes.append(node)

    read_only_visit(module, _Classes())
    reasons = {c.name.value: refusal(c) for c in classes}
    refused = {name: why for name, why in reasons.items() if why}
    candidates = [c for c in classes if convertible(c)]
    names = [c.name.value for c in classes]
    candidates = [c for c in candidates if names.count(c.name.value) == 1]  # two classes of one name: which?
    # A subclass in the file inherits automatic_optimization = False and the new step: each must fit, or its base
    # is not converted (until nothing changes: a subclass of a subclass too).
    subclasses: dict[str, str] = {}
    while candidates:
        base_frequencies = {}
        for c in candidates:
            found = frequencies(_methods(c)["configure_optimizers"])
            base_frequencies[c.name.value] = found if isinstance(found, list) else []
        family = {c.name.value: c.name.value for c in candidates}  # class -> its converted ancestor
        subclasses, refused_roots = {}, set()
        changed = True
        while changed:
            changed = False
            for c in classes:
                if c.name.value in family:
                    continue
                bases = {(dotted(b.value) or "").rsplit(".", 1)[-1] for b in c.bases} & set(family)
                if not bases:
                    continue
                root = family[next(iter(bases))]
                kind = _subclass_kind(c, base_frequencies[root])
                if kind is None or len(bases) > 1 or names.count(c.name.value) != 1:
                    refused_roots.add(root)
                family[c.name.value] = root
                subclasses[c.name.value] = kind or ""
                changed = True
        if not refused_roots:
            break
        for root in refused_roots:
            refused[root] = "a subclass in this file does not fit: its own step, frequencies or hooks differ"
        candidates = [c for c in candidates if c.name.value not in refused_roots]
    if not candidates:
        return ManualPlan(frozenset(), refused=tuple(sorted(refused.items())))
    names_left = [c.name.value for c in candidates]

    def none(why: str) -> ManualPlan:
        # Decision: a setting of the file's Trainers that refuses every candidate says so in each one's TODO.
        return ManualPlan(frozenset(), refused=tuple(sorted({**refused, **dict.fromkeys(names_left, why)}.items())))

    args = _TrainerArgs()
    read_only_visit(module, args)
    code = module.code
    # Each spelling of these settings must be one the visitor read (a dict or a config file handing them over is not).
    if args.unreadable or any(code.count(key) != count for key, count in args.seen.items()):
        return none(
            "the file's Trainers accumulate gradients (2.x refuses it under manual optimization) or set clipping in"
            " a way the tool cannot read"
        )
    if "truncated_bptt_steps" in code:
        return none("truncated backprop: 1.x passed the step hiddens")  # a Trainer's setting before 1.7
    clip_values, algorithms = args.values["gradient_clip_val"], args.values["gradient_clip_algorithm"]
    clip = None
    if clip_values:
        # The Trainer's clipping moves into the module: only where the file's one LightningModule with a
        # training_step is the converted one, and every Trainer clips alike.
        steps = [c for c in classes if _is_lightning_class(c) and "training_step" in _methods(c)]
        clipping = "the Trainer's gradient clipping (2.x refuses it under manual optimization: clip in the step)"
        if len(steps) != 1 or len(candidates) != 1 or len(clip_values) != 1 or len(algorithms) > 1:
            return none(clipping + ", with more than one module or clipping in the file")
        if args.seen["gradient_clip_val"] != args.trainers:
            return none(clipping + ", set on some Trainers only")  # a Trainer that does not clip, beside one that does
        clip = Clip(next(iter(clip_values)), next(iter(algorithms)) if algorithms else None)
    elif algorithms:
        return none("gradient_clip_algorithm without gradient_clip_val")
    kept = {k: v for k, v in refused.items() if k not in names_left}
    return ManualPlan(
        frozenset(names_left), clip, tuple(sorted(subclasses.items())), refused=tuple(sorted(kept.items()))
    )


class _Rename(cst.CSTTransformer):
    """Renames a local name throughout a function: parameters and reads, not attribute or keyword names."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__()
        self.old, self.new = old, new

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.new) if updated.value == self.old else updated

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)  # self.optimizer_idx stays

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)  # f(optimizer_idx=...) keeps its keyword


class _SuperStep(cst.CSTTransformer):
    """``super().training_step(...)`` in a subclass's 1.x step -> ``super()._training_step_1x(...)``: the base's 1.x
    step is its helper now (its training_step is the new one, without the index)."""

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        if (
            updated.attr.value == "training_step"
            and isinstance(updated.value, cst.Call)
            and dotted(updated.value.func) == "super"
        ):
            return updated.with_changes(attr=cst.Name(HELPER))
        return updated


def _training_step(freqs: list[str] | None, clip: Clip | None) -> str:
    """The new methods as a class's source. ``freqs``: the frequencies as code, ``[]`` for none, None: read at run
    time (:func:`reads_frequencies_at_run_time`)."""
    turns = (
        "        # 1.x's optimizer frequencies, from configure_optimizers' \"frequency\" keys (read as the fit\n"
        "        # began): the optimizers take turns over consecutive batches of the epoch\n"
        '        frequencies = getattr(self, "_optimizer_frequencies_1x", [])\n'
        "        if not frequencies:\n"
        "            return list(range(count))  # none given: 1.x ran every optimizer at every batch\n" + _TAKE_TURNS
        if freqs is None
        else "        # 1.x's optimizer frequencies: the optimizers take turns over consecutive batches of the epoch\n"
        f"        frequencies = [{', '.join(freqs)}]\n" + _TAKE_TURNS
        if freqs
        else "        # 1.x ran every optimizer at every batch, in the order configure_optimizers gave them\n"
        "        return list(range(count))\n"
    )
    clipping = ""
    if clip is not None:
        algorithm = f", gradient_clip_algorithm={clip.algorithm}" if clip.algorithm is not None else ""
        clipping = (
            "                # the Trainer's gradient_clip_val, which 2.x refuses under manual optimization\n"
            f"                self.clip_gradients(optimizer, gradient_clip_val={clip.value}{algorithm})\n"
        )
    owner = (
        "            owner = next(i for i, o in enumerate(optimizers) if o is config.scheduler.optimizer)\n"
        "            if owner not in active:\n"
        "                continue\n"
        if freqs is None or freqs
        else ""
    )
    active = (
        "        optimizers = self.trainer.optimizers\n"
        "        # with frequencies, 1.x asked which optimizers were active at the batch's index across epochs\n"
        "        total_batch_idx = self.trainer.fit_loop.epoch_loop.total_batch_idx\n"
        "        active = self._active_optimizers_1x(total_batch_idx, len(optimizers))\n"
        if freqs is None or freqs
        else ""
    )
    return (
        "class _:\n"
        "    # Lightning 1.x stepped several optimizers itself; 2.x does that only under manual optimization\n"
        "    automatic_optimization = False\n"
        "\n"
        "    def training_step(self, batch, batch_idx):\n"
        '        """What Lightning 1.x\'s automatic optimization did with several optimizers (lightning-mgpu upgrade,\n'
        '        rule manual-optimization): the step in _training_step_1x runs once per active optimizer."""\n'
        "        optimizers = self.optimizers()\n"
        "        if not isinstance(optimizers, (list, tuple)):\n"
        "            optimizers = [optimizers]\n"
        "        for optimizer_index in self._active_optimizers_1x(batch_idx, len(optimizers)):\n"
        "            optimizer = optimizers[optimizer_index]\n"
        "            # as 1.x: only this optimizer's parameters take gradients, from zero\n"
        "            self.toggle_optimizer(optimizer)\n"
        "            optimizer.zero_grad()\n"
        f"            output = self.{HELPER}(batch, batch_idx, optimizer_index)\n"
        '            loss = output["loss"] if isinstance(output, dict) else output\n'
        "            if loss is not None:  # 1.x skipped the optimizer where the step returned None\n"
        "                self.manual_backward(loss)\n"
        f"{clipping}"
        "                optimizer.step()\n"
        "            self.untoggle_optimizer(optimizer)\n"
        "        self._step_lr_schedulers_1x(batch_idx)\n"
        "\n"
        "    def _active_optimizers_1x(self, batch_idx, count):\n"
        f"{turns}"
        "\n"
        "    def _step_lr_schedulers_1x(self, batch_idx):\n"
        '        # 1.x stepped the schedulers after each batch: interval "step" every `frequency` batches,\n'
        '        # "epoch" after the epoch\'s last batch every `frequency` epochs (2.x steps none under manual\n'
        "        # optimization)\n"
        "        schedulers = self.lr_schedulers()\n"
        "        if schedulers is None:\n"
        "            return\n"
        "        if not isinstance(schedulers, list):\n"
        "            schedulers = [schedulers]\n"
        f"{active}"
        "        last = self.trainer.is_last_batch or batch_idx + 1 == self.trainer.num_training_batches\n"
        "        for config, scheduler in zip(self.trainer.lr_scheduler_configs, schedulers):\n"
        f"{owner}"
        '            if config.interval == "step" and (batch_idx + 1) % config.frequency == 0:\n'
        "                scheduler.step()\n"
        '            elif config.interval == "epoch" and last and (self.current_epoch + 1) % config.frequency == 0:\n'
        "                scheduler.step()\n"
    )


def convert(cls: cst.ClassDef, clip: Clip | None) -> cst.ClassDef | None:
    """``cls`` under manual optimization, or None where it is not (or no longer) in a shape this rule converts.

    Args:
        cls: the LightningModule, as the other rules left it.
        clip: the Trainer's gradient clipping, which moves into the step.
    """
    if not convertible(cls) or not isinstance(cls.body, cst.IndentedBlock):
        return None
    methods = _methods(cls)
    found = frequencies(methods["configure_optimizers"])
    freqs = None if found is False else found  # None: read at run time
    assert freqs is None or isinstance(freqs, list)
    template = cst.parse_statement(_training_step(freqs, clip))
    assert isinstance(template, cst.ClassDef) and isinstance(template.body, cst.IndentedBlock)
    flag, new_step, active, schedulers = template.body.body
    step = methods["training_step"]
    # The user's step, unchanged but for its name and its index's name, right after the new one.
    helper = step.with_changes(name=cst.Name(HELPER), leading_lines=[cst.EmptyLine(indent=False)]).visit(
        _Rename("optimizer_idx", INDEX)
    )
    new_step = new_step.with_changes(leading_lines=step.leading_lines)
    assert isinstance(helper, cst.FunctionDef) and isinstance(helper.body, cst.IndentedBlock)
    assert isinstance(schedulers, cst.FunctionDef)
    footer = helper.body.footer
    if footer and all(line.comment is None for line in footer):
        # Decision: whitespace-only lines after the step's last statement belong to its block (libcst's footer): they
        # were the blank lines before the next method. They go after the last inserted helper, so the next method
        # keeps its distance from the code before it; a footer with comments stays with the step it ends.
        helper = helper.with_changes(body=helper.body.with_changes(footer=[]))
        assert isinstance(schedulers.body, cst.IndentedBlock)
        schedulers = schedulers.with_changes(body=schedulers.body.with_changes(footer=footer))
    body: list[Any] = []  # statements: each has leading_lines
    for statement in cls.body.body:
        if statement is step:
            blank = [cst.EmptyLine(indent=False)]
            body += [new_step, helper, active.with_changes(leading_lines=blank)]
            body.append(schedulers.with_changes(leading_lines=blank))
        elif statement is methods["configure_optimizers"] and freqs is None:
            body += _reading_configure(statement)
        elif statement is methods["configure_optimizers"] and freqs:
            body.append(statement.visit(_DropFrequency()))
        else:
            body.append(statement)
    # The flag goes first in the class body, after a docstring.
    body = _with_flag(body, flag)
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _reading_configure(configure: cst.FunctionDef) -> list[cst.FunctionDef]:
    """A ``configure_optimizers`` that reads the 1.x frequencies of the user's, kept unchanged as
    ``_configure_optimizers_1x`` after it."""
    reader = cst.parse_statement(
        "def configure_optimizers(self):\n"
        '    # 1.x took turns by the "frequency" keys the optimizers\' dicts hold; 2.x ignores them (a warning):\n'
        "    # read here for _active_optimizers_1x, and dropped from what 2.x gets\n"
        f"    config, self._optimizer_frequencies_1x = {FREQUENCY_READER}(self.{CONFIGURE_HELPER}())\n"
        "    return config\n"
    )
    assert isinstance(reader, cst.FunctionDef)
    reader = reader.with_changes(leading_lines=configure.leading_lines)
    kept = configure.with_changes(name=cst.Name(CONFIGURE_HELPER), leading_lines=[cst.EmptyLine(indent=False)])
    return [reader, kept]


def convert_subclass(cls: cst.ClassDef, kind: str) -> cst.ClassDef | None:
    """A subclass of a converted class: its own 1.x step becomes its ``_training_step_1x`` (``"helper"``), or a step
    of one optimizer gets automatic optimization back (``"automatic"``); None where it no longer fits.

    Args:
        cls: the subclass, as the other rules left it.
        kind: what it needs (:class:`ManualPlan`).
    """
    if not isinstance(cls.body, cst.IndentedBlock):
        return None
    methods = _methods(cls)
    step = methods.get("training_step")
    if kind == "helper":
        if step is None or not _step_of_1x(step):
            return None
        renamed = step.with_changes(name=cst.Name(HELPER)).visit(_Rename("optimizer_idx", INDEX))
        assert isinstance(renamed, cst.FunctionDef)
        helper = renamed.visit(_SuperStep())
        body = [helper if s is step else s for s in cls.body.body]
        return _without_frequencies(cls.with_changes(body=cls.body.with_changes(body=body)))
    if kind == "inherit":
        return _without_frequencies(cls)
    if kind == "automatic":
        flag = cst.parse_statement(
            "# its base steps several optimizers by hand; this step of one optimizer is Lightning's to run\n"
            "automatic_optimization = True\n"
        )
        return cls.with_changes(body=cls.body.with_changes(body=_with_flag(list(cls.body.body), flag)))
    return cls


def _without_frequencies(cls: cst.ClassDef) -> cst.ClassDef:
    """A subclass's own ``configure_optimizers`` without its optimizers' ``"frequency"`` keys: the plan took it only
    where they are the base's (the inherited step turns by those), and 2.x warns about the key."""
    configure = _methods(cls).get("configure_optimizers")
    if configure is None or not frequencies(configure):
        return cls
    body = [s.visit(_DropFrequency()) if s is configure else s for s in cls.body.body]
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _with_flag(body: list[Any], flag: Any) -> list[Any]:
    """``body`` with ``flag`` (a class attribute, its comment in its leading lines) first, after a docstring, a blank
    line around it."""
    first = body[0]
    docstring = (
        isinstance(first, cst.SimpleStatementLine)
        and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
    at = 1 if docstring else 0
    if at == 1:  # a blank line between the docstring and the flag's comment
        flag = flag.with_changes(leading_lines=[cst.EmptyLine(indent=False), *flag.leading_lines])
    blank_after = at < len(body) and not (body[at].leading_lines and body[at].leading_lines[0].comment is None)
    if blank_after:  # and one after the flag
        body[at] = body[at].with_changes(leading_lines=[cst.EmptyLine(indent=False), *body[at].leading_lines])
    return [*body[:at], flag, *body[at:]]
