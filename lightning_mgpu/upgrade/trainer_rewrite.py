"""The Trainer-arguments family: a 1.x Trainer's keyword arguments (:class:`~lightning_mgpu.upgrade.trainer_kwargs.
TrainerArgs`) rewritten to 2.x by :func:`rewrite_trainer_args`, one small function per argument group, wherever they
are written (a call, a dict of settings, a subscript assignment: :mod:`~lightning_mgpu.upgrade.trainer_call` and
:mod:`~lightning_mgpu.upgrade.statements` hand them here). The strategy and device groups are in
:mod:`~lightning_mgpu.upgrade.trainer_devices`.

Rule ids: trainer-precision, trainer-amp-backend, trainer-renamed-arg, trainer-checkpoint-callback,
trainer-early-stop-callback, trainer-weights-summary, trainer-progress-bar, trainer-reload-dataloaders,
trainer-accumulate-dict, trainer-profiler, trainer-max-steps, track-grad-norm-callback, trainer-weights-save-path (a
rewrite, :mod:`~lightning_mgpu.upgrade.trainer_weights_path`), and the rules of
:data:`rules.DROPPED_ARGS` (with their notes), :data:`rules.REMOVED_ARGS` and :data:`rules.FLAG_CALLBACKS`; TODOs
trainer-apex, trainer-amp-backend-variable, the removed arguments' rules, and trainer-checkpoint-callback,
trainer-weights-summary, trainer-progress-bar, trainer-accumulate-dict where a value cannot be rewritten.
"""

from __future__ import annotations

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.nodes import code as _code
from lightning_mgpu.upgrade.nodes import quoted as _quoted
from lightning_mgpu.upgrade.nodes import string as _string
from lightning_mgpu.upgrade.scopes import dotted
from lightning_mgpu.upgrade.scopes import literal as _literal
from lightning_mgpu.upgrade.trainer_devices import rewrite_devices, rewrite_strategy
from lightning_mgpu.upgrade.trainer_kwargs import TrainerArgs
from lightning_mgpu.upgrade.trainer_weights_path import weights_save_path


def rewrite_trainer_args(args: TrainerArgs) -> TrainerArgs:
    """Rewrite 1.x Trainer keyword arguments to 2.x (see docs/upgrade.md for the table), one argument group after the
    other (the order matters: the strategy names a device type, the device arguments decide whether precision=16 ran
    mixed, and a callback a flag adds joins the ``callbacks=`` the earlier groups built)."""
    accelerator = rewrite_strategy(args)
    rewrite_devices(args, accelerator)
    sixteen = _precision(args)
    _amp(args, sixteen)
    for old, new in rules.RENAMED_ARGS.items():
        value = args.get(old)
        if value is not None:
            args.replace(old, [(new, value)])
            args.change("trainer-renamed-arg", f"{old} -> {new}")
    _checkpoint_callback(args)
    _flag_callbacks(args)
    _trainloader_mode(args)
    _track_grad_norm(args)
    _early_stop_callback(args)
    _weights_summary(args)
    _progress_bar(args)
    _small_renames(args)
    # weights_save_path=X -> default_root_dir=X where the callbacks all have their folders (after the groups above
    # have joined theirs to callbacks=); otherwise the removed argument's TODO below.
    weights_save_path(args, args.spells("default_root_dir"))
    _dropped_and_removed(args)
    return args


def _precision(args: TrainerArgs) -> bool:
    """precision=16 -> "16-mixed", "bf16" -> "bf16-mixed". Returns whether precision was 16 (where amp_backend
    mattered)."""
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
    return sixteen


def _amp(args: TrainerArgs, sixteen: bool) -> None:
    """amp_backend and amp_level: gone (native AMP is the only one in 2.x); apex is a TODO."""
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


def _checkpoint_callback(args: TrainerArgs) -> None:
    """checkpoint_callback=bool -> enable_checkpointing; a ModelCheckpoint object -> callbacks=[...]."""
    checkpoint = args.get("checkpoint_callback")
    if checkpoint is None:
        return
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


def _flag_callbacks(args: TrainerArgs) -> None:
    """1.x flags that became one of the bundle's callbacks: True adds it, False (1.x's default) goes, a value this tool
    cannot read adds it when true (``*([C()] if value else [])``); callbacks= the tool cannot extend keeps the flag's
    TODO (:func:`_dropped_and_removed`)."""
    for flag, name in rules.FLAG_CALLBACKS.items():
        value = args.get(flag)
        literal = _literal(value) if value is not None else None
        rule = rules.REMOVED_ARGS[flag]
        # 1.x added no StochasticWeightAveraging where the callbacks held one; a stochastic_weight_avg= read at run
        # time beside a list read at run time asks the class at run time (unless_given).
        unless_given = flag == "stochastic_weight_avg"
        if literal is False:
            args.remove(flag)
            args.change(rule, f"{flag}=False removed (1.x's default)")
        elif value is not None and _holds_callback(args.get("callbacks"), rules.FLAG_CALLBACK_CLASSES[flag]):
            # Decision: callbacks=[..., StochasticWeightAveraging(...)] beside the flag (any value): 1.x kept the
            # user's and added none; a TerminateOnNaN there (a file converted by hand) checks what the flag would.
            args.remove(flag)
            args.change(rule, f"{flag}={_code(value)} removed (callbacks= holds that callback already)")
        elif literal is True and args.add_callback(
            f"{name}()", name, "callbacks", flag, bundle=True, unless_given=unless_given
        ):
            args.change(rule, f"{flag}=True -> callbacks=[{name}()]")
        elif (
            value is not None
            and literal is ...
            and args.add_callback(
                f"{name}()", name, "callbacks", flag, bundle=True, when=value, unless_given=unless_given
            )
        ):
            # A value the tool cannot read (stochastic_weight_avg=config.swa): 1.x tested it for truth when the
            # Trainer was built, and added the callback where it held; the list does the same at run time.
            args.change(rule, f"{flag}={_code(value)} -> callbacks=[..., *([{name}()] if {_code(value)} else [])]")


def _holds_callback(callbacks: cst.BaseExpression | None, names: frozenset[str]) -> bool:
    """Whether ``callbacks`` is a list display (or a sum of them) with an entry that calls one of ``names`` (by its
    last dotted name: ``pl.callbacks.StochasticWeightAveraging(...)``); an entry added under a condition
    (``*([...] if x else [])``) does not count."""
    if isinstance(callbacks, cst.BinaryOperation) and isinstance(callbacks.operator, cst.Add):
        return _holds_callback(callbacks.left, names) or _holds_callback(callbacks.right, names)
    if not isinstance(callbacks, cst.List):
        return False
    return any(
        isinstance(e, cst.Element)
        and isinstance(e.value, cst.Call)
        and (dotted(e.value.func) or "").rsplit(".", 1)[-1] in names
        for e in callbacks.elements
    )


def _trainloader_mode(args: TrainerArgs) -> None:
    """multiple_trainloader_mode="max_size_cycle" (1.x's default) goes: 2.x's fit loop wraps a dict or list of
    training loaders in CombinedLoader(loaders, "max_size_cycle"), the same batches (the shorter loaders restart until
    the longest is done; a single loader is not combined in either). Any other value (min_size, a variable) keeps the
    rule's TODO (:func:`_dropped_and_removed`)."""
    value = args.get("multiple_trainloader_mode")
    if value is not None and _literal(value) == rules.TRAINLOADER_MODE_DEFAULT:
        args.remove("multiple_trainloader_mode")
        rule = rules.REMOVED_ARGS["multiple_trainloader_mode"]
        args.change(rule, f"multiple_trainloader_mode={_code(value)} removed (2.x's Trainer combines loaders so)")


def _track_grad_norm(args: TrainerArgs) -> None:
    """track_grad_norm=p -> the bundle's ``TrackGradNorm(p)`` callback, which logs what 1.x logged; -1 (1.x's
    default: off) goes. A value the tool cannot
    read goes to the callback as it is: it takes -1 as off and refuses what 1.x's Trainer refused. Where callbacks= is
    something the tool cannot extend, the flag's TODO stays (:func:`_dropped_and_removed`)."""
    value = args.get("track_grad_norm")
    if value is None:
        return
    literal = _literal(value)
    if literal == -1 and not isinstance(literal, bool):
        args.remove("track_grad_norm")
        args.change("track-grad-norm-callback", "track_grad_norm=-1 removed (1.x's default: no norms logged)")
        return
    # Decision: a literal 1.x's Trainer took (a positive number, "inf") or an expression read at run time; a literal
    # it refused (0, "2", True) keeps the TODO rather than turning into an error this tool would write.
    readable = literal is ... or literal == "inf"
    readable = readable or (isinstance(literal, (int, float)) and not isinstance(literal, bool) and literal > 0)
    code = _code(value)
    if readable and args.add_callback(f"TrackGradNorm({code})", "TrackGradNorm", "callbacks", "track_grad_norm", True):
        args.change("track-grad-norm-callback", f"track_grad_norm={code} -> callbacks=[TrackGradNorm({code})]")


def _early_stop_callback(args: TrainerArgs) -> None:
    """early_stop_callback=False/None goes, True or an EarlyStopping object joins callbacks=."""
    early = args.get("early_stop_callback")
    if early is None:
        return
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


def _weights_summary(args: TrainerArgs) -> None:
    """weights_summary=None/"top"/"full" -> enable_model_summary=False / the default / ModelSummary(max_depth=-1)."""
    summary = args.get("weights_summary")
    if summary is None:
        return
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


def _progress_bar(args: TrainerArgs) -> None:
    """progress_bar_refresh_rate=0 -> enable_progress_bar=False; a positive rate -> TQDMProgressBar(refresh_rate=)."""
    rate = args.get("progress_bar_refresh_rate")
    if rate is None:
        return
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


def _small_renames(args: TrainerArgs) -> None:
    """reload_dataloaders_every_epoch, accumulate_grad_batches={...}, profiler=bool and max_steps=None."""
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


def _dropped_and_removed(args: TrainerArgs) -> None:
    """Arguments 2.x dropped (a note) or removed with no 2.x argument (a TODO)."""
    for name, rule in rules.DROPPED_ARGS.items():
        if args.has(name):
            args.remove(name)
            args.note(rule)
            args.change(rule, f"{name} dropped")
    # Decision: 1.1/1.2 optimized automatically where the module's automatic_optimization AND the Trainer's were
    # set, the Trainer's None counting as True (1.1.0's Trainer.__init__, ModelConnector): None or True leaves the
    # module's own setting, which is all 2.x reads. False stays a TODO (the fitted module must be set).
    automatic = args.get("automatic_optimization")
    if automatic is not None and _literal(automatic) in (None, True):
        args.remove("automatic_optimization")
        args.change(
            "trainer-automatic-optimization",
            f"automatic_optimization={_code(automatic)} dropped (1.x then followed the module's own setting, as 2.x)",
        )
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
