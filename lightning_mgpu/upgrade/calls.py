"""The calls family: what a call is routed to (:func:`leave_call`) and the call rewrites that are not the Trainer's
or a metric's: a renamed class's call (with the arguments its new class needs), ``isinstance`` with a removed spawn
class, the tuner's calls, ``resume_from_checkpoint`` moved to ``fit(ckpt_path=)``, ``add_argparse_args`` /
``from_argparse_args``, the loops' renamed keywords, ``parser.set_defaults``, ``ModelCheckpoint`` and
``TestTubeLogger``.

Rule ids: tuner, tuner-tune-result, trainer-resume, trainer-argparse, trainer-loop-kwargs, trainer-renamed-arg,
ddp-spawn-isinstance, checkpoint-every-n-epochs, checkpoint-filepath, checkpoint-prefix-moved, test-tube-logger-args,
and a renamed class's rule (metrics-import, bundle-class, bundle-name, plugin-class, renamed-name); TODOs
result-object, trainer-tune, gpu-stats-monitor, checkpoint-filepath, checkpoint-positional-path, checkpoint-prefix,
test-tube-logger.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.checkpoint_prefix import fix_last_comma, moved_prefix
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.leftover_spellings import result_class
from lightning_mgpu.upgrade.metric_calls import is_torchmetrics, metric_call
from lightning_mgpu.upgrade.nodes import code as _code
from lightning_mgpu.upgrade.nodes import kwarg as _kwarg
from lightning_mgpu.upgrade.nodes import quoted as _quoted
from lightning_mgpu.upgrade.nodes import string as _string
from lightning_mgpu.upgrade.removed_names import test_tube_arguments
from lightning_mgpu.upgrade.scopes import dotted as _dotted
from lightning_mgpu.upgrade.scopes import is_trainer_call as _is_trainer_call
from lightning_mgpu.upgrade.scopes import literal as _literal
from lightning_mgpu.upgrade.spawn_checks import rewrite_isinstance
from lightning_mgpu.upgrade.trainer_call import trainer_call
from lightning_mgpu.upgrade.tuner import read_flags_call, tune_result, tuner_call, tuner_owner

#: The command-line classmethods 2.0 removed from the Trainer (and a DataModule: the first two and the last), each
#: a function of the same name and signature (the class first) in lightning_mgpu.upgrade.trainer_args.
ARGPARSE_METHODS = ("add_argparse_args", "from_argparse_args", "parse_argparser", "get_init_arguments_and_types")
#: The names ``pytorch_lightning.utilities.argparse`` (1.2 and before: ``argparse_utils``) held that
#: lightning_mgpu.upgrade.trainer_args has, with 1.x's signatures.
ARGPARSE_FUNCTIONS = (*ARGPARSE_METHODS, "parse_env_variables")
#: Those modules, below the namespace.
ARGPARSE_MODULES = ("utilities.argparse", "utilities.argparse_utils")


def leave_call(ctx: UpgradeContext, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
    """A call, routed to its rewrite: a renamed class's, the tuner's, the argparse methods', a metric's, a Trainer's
    (some calls pass through several: ``isinstance``, ``fit(ckpt_path=)``, the loops' keywords, ``ModelCheckpoint``)."""
    func = _dotted(original.func) or ""
    result = result_class(original)
    if result is not None:  # Lightning 1.0's TrainResult/EvalResult: leftover_spellings.py
        if id(original) in ctx.result_plan.calls and ctx.lightning_class and ctx.lightning_class[-1]:
            return updated  # its hook is rewritten when the class is left: result_objects.py
        ctx.todo(original, rules.todo_text("result-object", name=result))
        return updated
    if id(original) in ctx.container_metric_logs:
        # self.log(name, metric) of a Metric in a plain list/dict: 2.x raises (metric_containers.py).
        ctx.todo(original, rules.todo_text("metric-log-container"))
    if func == "TestTubeLogger" and func not in ctx.renamed:
        # A bare TestTubeLogger the file does not import from Lightning (a test file missing its import, a star
        # import): which class it is cannot be told here, so its arguments stay and a person picks TensorBoardLogger.
        ctx.todo(original, rules.todo_text("test-tube-logger"))
    elif func.rsplit(".", 1)[-1] == "TestTubeLogger":  # its arguments, as TensorBoardLogger takes them
        updated = test_tube_call(ctx, original, updated)
    owner_and_method = tuner_owner(original.func, ctx.is_trainer)
    if owner_and_method is not None:  # trainer.tuner.lr_find(...) -> Tuner(trainer).lr_find(...): tuner.py
        tuned = tuner_call(updated, *owner_and_method)
        if tuned is not None:
            ctx.add_import(f"{ctx.namespace}.tuner", "Tuner", None)
            ctx.change(original, "tuner", f"{func}(...) -> Tuner(...).{owner_and_method[1]}(...)")
            return tuned
    if func in ctx.renamed:
        return renamed_call(ctx, original, updated, func)
    if func == "isinstance":
        updated = isinstance_spawn(ctx, original, updated)
        checked = rewrite_isinstance(ctx, original, updated)  # isinstance(s, DDPSpawnStrategy): spawn_checks.py
        if checked is not updated:
            return checked
    if original in ctx.facts.moved_resume:
        value = ctx.facts.moved_resume[original]
        args = list(updated.args)
        if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(_kwarg("ckpt_path", value.deep_clone()))
        ctx.change(original, "trainer-resume", f"resume_from_checkpoint={_code(value)} -> {func}(ckpt_path=...)")
        updated = updated.with_changes(args=args)
    owner, _, method = func.rpartition(".")
    if method in ARGPARSE_METHODS and argparse_owner(ctx, owner):
        return argparse_call(ctx, original, updated, owner, method)
    if method in rules.LOOP_KWARGS and owner and not owner.endswith("Trainer"):
        updated = loop_kwargs(ctx, original, updated, method)
    if original in ctx.tune.results:
        # result = trainer.tune(...), read as result["lr_find"]: the dict 1.x returned, from the Tuner's calls.
        ctx.add_import(f"{ctx.namespace}.tuner", "Tuner", None)
        methods = ctx.tune.results[original]
        ctx.change(original, "tuner-tune-result", f"{func}(...) -> {{{', '.join(methods)}: Tuner(...)...}}")
        return tune_result(original, methods)
    if original in ctx.tune.read_flags:
        # trainer = Trainer.from_argparse_args(args): the parsed flags, kept on the Trainer (tuner.py, tuning.py).
        ctx.add_import("lightning_mgpu.upgrade.tuning", "legacy_tune", None)
        ctx.change(original, "tuner-flags-read", f"{func}(...) -> legacy_tune({owner}, ...): the parsed flags' tuners")
        return read_flags_call(updated)
    trainer_method = isinstance(original.func, cst.Attribute) and ctx.is_trainer(original.func.value)
    if method == "tune" and trainer_method and original not in ctx.tune.tunes:
        ctx.todo(original, rules.todo_text("trainer-tune"))
    if method == "set_defaults":
        updated = set_defaults(ctx, original, updated)
    if func.rsplit(".", 1)[-1] == "ModelCheckpoint":
        updated = model_checkpoint(ctx, original, updated)
    new_func = _dotted(updated.func) or ""
    old_name = new_func.rsplit(".", 1)[-1]
    if (
        new_func.split(".")[0] == "torchmetrics"
        and isinstance(updated.func, cst.Attribute)
        and rules.TORCHMETRICS_RENAMED.get(old_name, old_name) != old_name
    ):
        # torchmetrics.F1(...) (the module imported, in this file or a notebook's other cell): the class was renamed
        # as it is where it is imported by name (F1 -> F1Score), then converted like one.
        renamed = rules.TORCHMETRICS_RENAMED[old_name]
        updated = updated.with_changes(func=updated.func.with_changes(attr=cst.Name(renamed)))
        ctx.change(original, "metrics-import", f"{new_func}(...) -> {new_func[: -len(old_name)]}{renamed}(...)")
        new_func = new_func[: -len(old_name)] + renamed
    if new_func.split(".")[-1] in rules.TORCHMETRICS_TASK and is_torchmetrics(ctx, new_func):
        return metric_call(ctx, original, updated)
    if _is_trainer_call(original) or original in ctx.facts.subclass_trainer_calls:
        # cls(...) in a classmethod and super().__init__(...) in __init__ of a Trainer subclass: a Trainer's call too.
        return trainer_call(ctx, original, updated)
    if new_func.split(".")[-1].endswith("Trainer"):
        foreign_trainer_call(ctx, original, new_func.split(".")[-1])
    return updated


#: The keywords only a 1.x Lightning Trainer took (removed, dropped or renamed in 2.0).
_TRAINER_1X_KEYS = frozenset(
    {"early_stop_callback"} | rules.LEGACY_SETTINGS_KEYS | set(rules.REMOVED_ARGS) | set(rules.DROPPED_ARGS)
) | frozenset(rules.RENAMED_ARGS)


def foreign_trainer_call(ctx: UpgradeContext, original: cst.Call, name: str) -> None:
    """``BaalTrainer(gpus=..., distributed_backend=...)``: a class named like a Trainer that this tool does not
    rewrite as Lightning's, given keywords only a 1.x Lightning Trainer took. Whether it hands them to Lightning's
    Trainer only its package (or its ``__init__``) says: a TODO names them (rule trainer-foreign-class), the call
    stays. Before, the independent scan found them and nothing marked them."""
    keys = [a.keyword.value for a in original.args if a.keyword is not None and a.keyword.value in _TRAINER_1X_KEYS]
    if keys:
        ctx.todo(original, rules.todo_text("trainer-foreign-class", name=name, keys=", ".join(keys)))


def test_tube_call(ctx: UpgradeContext, original: cst.Call, updated: cst.Call) -> cst.Call:
    """``TestTubeLogger(...)`` -> ``TensorBoardLogger(...)``'s arguments (removed_names.py; the name itself is
    renamed through ``rules.RENAMED_NAMES``)."""
    converted = test_tube_arguments(updated)
    if converted is None:
        ctx.todo(original, rules.todo_text("test-tube-logger"))
        return updated
    dropped = f", dropped {', '.join(converted[1])}" if converted[1] else ""
    ctx.change(original, "test-tube-logger-args", f"TestTubeLogger(...) -> TensorBoardLogger(...){dropped}")
    return converted[0]


def renamed_call(ctx: UpgradeContext, original: cst.Call, updated: cst.Call, func: str) -> cst.Call:
    _, new, extra = ctx.renamed[func]
    args = list(updated.args)
    if new == "GPUUtilizationMonitor" and args:
        ctx.todo(original, rules.todo_text("gpu-stats-monitor", value=", ".join(_code(a).rstrip(", ") for a in args)))
        args = []
    for key, value in extra.items():
        if not any(a.keyword is not None and a.keyword.value == key for a in args):
            if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(_kwarg(key, cst.parse_expression(value)))
    new_func: cst.BaseExpression = cst.Name(new)
    head = func.split(".")[0]
    if "." in func and head in ctx.namespace_aliases:
        new_func = (
            cst.parse_expression(f"{head}.strategies.{new}") if "strategies" in ctx.renamed[func][0] else new_func
        )
    ctx.change(
        original,
        renamed_rule(ctx, func),
        f"{func}(...) -> {new}(...)" + (f" with {', '.join(f'{k}={v}' for k, v in extra.items())}" if extra else ""),
    )
    renamed = updated.with_changes(func=new_func, args=args)
    if new in rules.TORCHMETRICS_TASK and ctx.renamed[func][0].startswith("torchmetrics"):
        return metric_call(ctx, original, renamed)
    return renamed


def isinstance_spawn(ctx: UpgradeContext, original: cst.Call, updated: cst.Call) -> cst.Call:
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
            and e.value.value in ctx.renamed
            and ctx.renamed[e.value.value][2]  # renamed with extra arguments: a spawn class
            and ctx.renamed[e.value.value][1] in names
        )
    ]
    if len(kept) == len(classes.elements):
        return updated
    dropped = [_code(e.value) for e in classes.elements if e not in kept]
    kept[-1] = kept[-1].with_changes(comma=cst.Comma() if len(kept) == 1 else cst.MaybeSentinel.DEFAULT)
    ctx.change(original, "ddp-spawn-isinstance", f"isinstance(..., {', '.join(dropped)}) dropped from the tuple")
    return updated.with_changes(
        args=[updated.args[0], updated.args[1].with_changes(value=classes.with_changes(elements=kept))]
    )


def renamed_rule(ctx: UpgradeContext, func: str) -> str:
    """The rule a call of a renamed class falls under, from where its new name comes from."""
    module, new, _ = ctx.renamed[func]
    if module.startswith("torchmetrics"):
        return "metrics-import"
    if module.startswith("lightning_mgpu"):
        return "bundle-class" if new in {n for n, _ in rules.REMOVED_CLASSES.values()} else "bundle-name"
    if any(new == n for n, _ in rules.LIGHTNING_PLUGINS.values()):
        return "plugin-class"
    return "renamed-name"


def argparse_owner(ctx: UpgradeContext, owner: str, depth: int = 0) -> bool:
    """A Trainer or a LightningDataModule class: by its name, a class of this file, or a local name that every
    assignment in its scope gives one (``dm_cls = MNISTDataModule`` in each branch of an ``if``)."""
    last = owner.rsplit(".", 1)[-1]
    if last == "Trainer" or last.endswith("DataModule") or last in ctx.datamodules:
        return True
    if "." in owner or depth > 4 or not ctx.scopes:
        return False
    scope = ctx.scopes[-1].lookup(owner)
    values = scope.assigns.get(owner) if scope is not None else None
    return bool(values) and all(
        (_dotted(value) or "") not in ("", owner) and argparse_owner(ctx, _dotted(value) or "", depth + 1)
        for value in values  # type: ignore[union-attr]
    )


def argparse_call(ctx: UpgradeContext, original: cst.Call, updated: cst.Call, owner: str, method: str) -> cst.Call:
    """``Trainer.add_argparse_args(parser)`` -> ``add_argparse_args(Trainer, parser)``, and the same for
    ``from_argparse_args``, whose keyword arguments are Trainer arguments to rewrite too."""
    ctx.add_import("lightning_mgpu.upgrade.trainer_args", method, None)
    owner_node = original.func.value  # type: ignore[attr-defined]
    args = [cst.Arg(owner_node, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), *updated.args]
    new = updated.with_changes(func=cst.Name(method), args=args)
    ctx.change(
        original,
        "trainer-argparse",
        f"{owner}.{method}(...) -> {method}({owner}, ...) (lightning_mgpu.upgrade.trainer_args)",
    )
    if method == "from_argparse_args" and owner.rsplit(".", 1)[-1] == "Trainer":
        return trainer_call(ctx, original, new)
    return new


def loop_kwargs(ctx: UpgradeContext, original: cst.Call, updated: cst.Call, method: str) -> cst.Call:
    renames = rules.LOOP_KWARGS[method]
    if not any(a.keyword is not None and a.keyword.value in renames for a in updated.args):
        return updated
    args = []
    for arg in updated.args:
        if arg.keyword is not None and arg.keyword.value in renames:
            ctx.change(
                original,
                "trainer-loop-kwargs",
                f"{method}({arg.keyword.value}=...) -> {method}({renames[arg.keyword.value]}=...)",
            )
            arg = arg.with_changes(keyword=cst.Name(renames[arg.keyword.value]))
        args.append(arg)
    return updated.with_changes(args=args)


def set_defaults(ctx: UpgradeContext, original: cst.Call, updated: cst.Call) -> cst.Call:
    """``parser.set_defaults(replace_sampler_ddp=False)``: the renamed Trainer flags (the others stay 1.x flags,
    which :mod:`lightning_mgpu.upgrade.trainer_args` accepts and translates)."""
    args = []
    for arg in updated.args:
        if arg.keyword is not None and arg.keyword.value in rules.RENAMED_ARGS:
            new = rules.RENAMED_ARGS[arg.keyword.value]
            ctx.change(
                original, "trainer-renamed-arg", f"set_defaults({arg.keyword.value}=...) -> set_defaults({new}=...)"
            )
            arg = arg.with_changes(keyword=cst.Name(new))
        args.append(arg)
    return updated.with_changes(args=args)


def model_checkpoint(ctx: UpgradeContext, original: cst.Call, updated: cst.Call) -> cst.Call:
    """``ModelCheckpoint(filepath=...)`` (split into ``dirpath`` and ``filename`` as 1.x did), ``period`` and
    ``every_n_val_epochs`` (``every_n_epochs``), ``prefix`` (into ``filename=``, or the run-time split, else a
    TODO), and a positional path (1.0-1.1's filepath or 1.2's dirpath)."""
    args: list[cst.Arg] = []
    first = updated.args[0] if updated.args else None
    # ModelCheckpoint(X): X was filepath in 1.0-1.1 and is dirpath from 1.2 (rule checkpoint-positional-path).
    positional = first is not None and first.keyword is None and not first.star
    positional_filepath = positional and _positional_is_filepath(ctx, original, updated.args)
    keyword_filepath = any(a.keyword is not None and a.keyword.value == "filepath" for a in updated.args)
    # prefix=P beside a filepath (1.0-1.1) that the literal rewrite cannot fold (checkpoint_prefix.py): it goes into
    # legacy_checkpoint_filepath(X, prefix=P), which joins it as 1.x did when the callback is built.
    run_time_prefix = _run_time_prefix(updated.args) if positional_filepath or keyword_filepath else None
    for index, arg in enumerate(updated.args):
        key = arg.keyword.value if arg.keyword is not None else None
        if index == 0 and positional_filepath:
            key = "filepath"
        if run_time_prefix is not None and arg is run_time_prefix:
            ctx.change(original, "checkpoint-prefix-moved", "ModelCheckpoint(prefix=...) -> legacy_checkpoint_filepath")
            continue
        if key in rules.CHECKPOINT_RENAMED:
            args.append(arg.with_changes(keyword=cst.Name(rules.CHECKPOINT_RENAMED[key])))
            ctx.change(
                original,
                "checkpoint-every-n-epochs",
                f"ModelCheckpoint({key}=...) -> ({rules.CHECKPOINT_RENAMED[key]}=...)",
            )
        elif key == "filepath":
            prefix = run_time_prefix.value if run_time_prefix is not None else None
            args += checkpoint_filepath_args(ctx, original, arg, _separator(updated.args), prefix)
            written = "filepath=..." if arg.keyword is not None else "X), 1.0-1.1's filepath (a name pattern"
            ctx.change(original, "checkpoint-filepath", f"ModelCheckpoint({written}) -> (dirpath=..., filename=...)")
        else:
            args.append(arg)
    if run_time_prefix is not None:
        args = fix_last_comma(args, list(updated.args))
    elif any(a.keyword is not None and a.keyword.value == "prefix" for a in args):
        # prefix="P": in front of filename= (checkpoint_prefix.py), and of the last checkpoint's name.
        moved = moved_prefix(args, original in ctx.assigned_calls)
        if moved is None:
            ctx.todo(original, rules.todo_text("checkpoint-prefix"))
        else:
            args, last = moved
            if last is not None:
                ctx.last_checkpoint_names[original] = last
            ctx.change(original, "checkpoint-prefix-moved", "ModelCheckpoint(prefix=...) -> filename=...")
    return updated.with_changes(args=args)


def _run_time_prefix(args: Sequence[cst.Arg]) -> cst.Arg | None:
    """The ``prefix=`` argument that ``legacy_checkpoint_filepath(X, prefix=P)`` can take from a call with a
    filepath, or None where it stays with its TODO (or an empty literal goes, as checkpoint_prefix.py drops it)."""
    given = {a.keyword.value: a for a in args if a.keyword is not None}
    prefix = given.get("prefix")
    if prefix is None or any(a.star for a in args):
        return None  # no prefix; or a ** that may hold save_last or a name of its own
    value = _string(prefix.value)
    if value is not None and (not value or "{" in value or "}" in value):
        # "": nothing to join (dropped where the literal rule runs); braces: 2.x would format them, 1.x did not,
        # so no filename writes 1.x's name (the helper refuses them at run time too): the TODO stays.
        return None
    save_last = given.get("save_last")
    if save_last is not None and _literal(save_last.value) not in (False, None):
        # 1.x named the last checkpoint "P-last" too: that needs callback.CHECKPOINT_NAME_LAST set beside the call,
        # which a run-time prefix cannot be given here; the TODO stays.
        return None
    return prefix


#: ModelCheckpoint's path keywords: any of them beside a positional X makes X 1.2's dirpath (see below).
_PATH_KEYWORDS = frozenset({"dirpath", "filename", "filepath"})


def _positional_is_filepath(ctx: UpgradeContext, original: cst.Call, args: Sequence[cst.Arg]) -> bool:
    """Whether ``ModelCheckpoint(X, ...)``'s X is 1.0-1.1's ``filepath`` (to be split as ``filepath=X`` is); where the
    call does not say which release it was written for, a TODO names the choice and X stays (2.x's dirpath)."""
    if any(a.keyword is not None and a.keyword.value in _PATH_KEYWORDS for a in args):
        # Decision: 1.1 refused dirpath= or filename= beside a filepath and 1.0 had neither (a filepath= keyword
        # beside X is a TypeError in every release): X is 1.2's dirpath, which 2.x reads the same.
        return False
    value = args[0].value

    def a_file(node: cst.BaseExpression) -> bool:
        path = _string(node)
        return (path is not None and _surely_a_file(path)) or (path is None and looks_like_a_pattern(node))

    # A name counts as what every assignment in its scope gave it (path = out + "/{epoch}-{val_loss:.2f}").
    given = ctx.facts.assigned(value, ctx.scopes[-1]) if isinstance(value, cst.Name) and ctx.scopes else None
    if len([a for a in args if a.keyword is None and not a.star]) == 1 and (
        a_file(value) or (bool(given) and all(v is not None and a_file(v) for v in given or ()))
    ):
        # Decision: a last part that is a name pattern ({epoch}) or a .ckpt file is a file, not a folder: 1.0-1.1's
        # filepath (1.2+ would have made a folder named "{epoch}"). Only where it is the one positional argument:
        # 1.0-1.1's second was monitor, 1.2's filename, which keywords would have to say.
        return True
    ctx.todo(original, rules.todo_text("checkpoint-positional-path"))
    return False


def checkpoint_filepath_args(
    ctx: UpgradeContext,
    original: cst.Call,
    arg: cst.Arg,
    separator: cst.Comma,
    prefix: cst.BaseExpression | None = None,
) -> list[cst.Arg]:
    """``filepath=X`` as 1.x read it: ``dirpath=``/``filename=`` where a literal says which (a name pattern or a
    ``.ckpt`` file), else ``**legacy_checkpoint_filepath(X)``, which splits it at run time as 1.x did (by whether X
    is an existing folder: :mod:`lightning_mgpu.upgrade.legacy_checkpoint`); ``separator`` goes between two
    arguments written for one. ``prefix``: the call's ``prefix=`` value, joined at run time
    (``legacy_checkpoint_filepath(X, prefix=P)``) whatever X is."""
    path = _string(arg.value)
    if path is not None and not path and prefix is None:
        return []  # filepath="": as if none was given, in 1.x too
    if path is not None and _surely_a_file(path) and prefix is None:
        # 1.x: os.path.split(realpath(X)). The folder is the part before the last "/" (the working directory
        # where there is none: 2.x's default is the logger's folder instead); the name keeps a ".ckpt" (1.x wrote
        # best.ckpt.ckpt for "best.ckpt", and 2.x adds the same suffix).
        head, tail = posixpath.split(path)
        return [
            _kwarg("dirpath", _path_literal(head or "."), arg).with_changes(comma=separator),
            # the last keeps what followed the argument (a line break before the call's ")")
            _kwarg("filename", _path_literal(tail), arg).with_changes(
                comma=arg.comma, whitespace_after_arg=arg.whitespace_after_arg
            ),
        ]
    # A folder or not: only the run knows (1.x asked the file system when the callback was built).
    ctx.add_import("lightning_mgpu.upgrade.legacy_checkpoint", "legacy_checkpoint_filepath", None)
    if path is not None or not looks_like_a_pattern(arg.value):
        # A folder got the default name pattern, which depended on the release: note it.
        ctx.note(original, rules.note_text("checkpoint-filepath-folder"))
    helper_args = [cst.Arg(arg.value)]
    if prefix is not None:
        helper_args = [
            cst.Arg(arg.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            _kwarg("prefix", prefix),
        ]
    helper = cst.Call(func=cst.Name("legacy_checkpoint_filepath"), args=helper_args)
    return [cst.Arg(value=helper, star="**", comma=arg.comma, whitespace_after_arg=arg.whitespace_after_arg)]


def _separator(args: Sequence[cst.Arg]) -> cst.Comma:
    """The comma between a call's arguments (its line break and indentation, where it has them): the first one that
    is not the last argument's (a trailing comma before ")" is spaced for the bracket)."""
    return next(
        (a.comma for a in args[:-1] if isinstance(a.comma, cst.Comma)),
        cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
    )


def _path_literal(value: str) -> cst.SimpleString:
    """``"value"``, or Python's own quoting where the path holds a quote or a backslash."""
    return cst.SimpleString(repr(value)) if '"' in value or "\\" in value else _quoted(value)


def _surely_a_file(path: str) -> bool:
    """A literal path whose last part is a name pattern (``{epoch}``) or a ``.ckpt`` file: not an existing folder
    when the callback is built (a folder is what 1.x checked for)."""
    last = posixpath.basename(path)
    return "{" in last or last.endswith(".ckpt")


def looks_like_a_pattern(node: cst.BaseExpression) -> bool:
    """``os.path.join(out, "{epoch}-{val_loss:.2f}")`` or an f-string with ``{epoch}``: a file pattern, not a folder."""
    code = _code(node)
    return "{epoch" in code or "{step" in code or "{val" in code or ".ckpt" in code
