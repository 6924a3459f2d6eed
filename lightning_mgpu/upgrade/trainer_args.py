"""Lightning 1.x's Trainer command line, on Lightning 2.x: what ``lightning-mgpu upgrade`` turns
``Trainer.add_argparse_args(parser)`` and ``Trainer.from_argparse_args(args, **kw)`` into.

Lightning 2.0 removed both. A script built on them keeps its command line with these two functions (the 1.x utilities
``pytorch_lightning.utilities.argparse.add_argparse_args/from_argparse_args`` had the same signatures)::

    from lightning_mgpu.upgrade.trainer_args import add_argparse_args, from_argparse_args

    parser = add_argparse_args(Trainer, parser)  # --max_epochs, --devices, ... and the 1.x --gpus, --accelerator ddp
    args = parser.parse_args()
    trainer = from_argparse_args(Trainer, args, logger=logger)

Every 2.x Trainer argument with a simple type becomes a flag, with the Trainer's default. The 1.x flags that were
removed (``--gpus``, ``--num_processes``, ``--distributed_backend``, ``--resume_from_checkpoint``, ...) are still
accepted, default to None, and are translated by :func:`legacy_trainer_kwargs` as the 1.x Trainer read them, so an old
command line (``python train.py --gpus 2 --accelerator ddp --precision 16``) trains the same way. A value with no 2.x
meaning is refused with one line that names the 2.x way. Works with ``lightning.pytorch`` and ``pytorch_lightning``
(the namespace is read from the class passed) and with any other class (a LightningDataModule): only a Trainer's
arguments are translated.

1.x's other command-line helpers are here too, with 1.x's signatures: :func:`parse_argparser` (``Trainer.
parse_argparser(args)``), :func:`parse_env_variables` (``Trainer.match_env_arguments()``) and
:func:`get_init_arguments_and_types`.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
from ast import literal_eval
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.tuning import TUNER_FLAGS, keep_tuner_flags

#: 1.x Trainer flags that 2.x removed, added beside the 2.x ones (default None, or 1.x's own default where it was not
#: None: only a value given is translated).
LEGACY_FLAGS = (
    "gpus",
    "num_processes",
    "tpu_cores",
    "ipus",
    "distributed_backend",
    "auto_select_gpus",
    "amp_backend",
    "amp_level",
    "resume_from_checkpoint",
    "checkpoint_callback",
    "weights_summary",
    "progress_bar_refresh_rate",
    "replace_sampler_ddp",
    "reload_dataloaders_every_epoch",
    "flush_logs_every_n_steps",
    "log_gpu_memory",
    "terminate_on_nan",
    "track_grad_norm",
    "auto_lr_find",
    "auto_scale_batch_size",
    "stochastic_weight_avg",
    "move_metrics_to_cpu",
    "multiple_trainloader_mode",
    "prepare_data_per_node",
    "weights_save_path",
)
#: The removed flags whose 1.x default was not None (``--weights_summary None`` turned the summary off).
_LEGACY_DEFAULTS: dict[str, Any] = {"weights_summary": "top"}
#: Values of a removed flag that mean "not used": dropped without a word.
_UNSET = (None, False, "", "false", "False", "none", "None", -1)


def _value(text: str) -> Any:
    """A command-line value as 1.x's Trainer flags read it: ints, floats, booleans and None, else the string."""
    lowered = text.strip().lower()
    if lowered in ("true", "yes"):
        return True
    if lowered in ("false", "no"):
        return False
    if lowered == "none":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _same(value: Any, default: Any) -> bool:
    return type(value) is type(default) and value == default


def _is_trainer(cls: type) -> bool:
    return any(base.__name__ == "Trainer" for base in inspect.getmro(cls))


def _namespace(cls: type) -> str:
    """``lightning.pytorch`` or ``pytorch_lightning``: the Lightning tree ``cls`` (a Trainer subclass) belongs to."""
    trainer = next(base for base in inspect.getmro(cls) if base.__name__ == "Trainer")
    module = trainer.__module__
    return module.split(".trainer", 1)[0] if ".trainer" in module else module.rsplit(".", 1)[0]


def add_argparse_args(
    cls: type, parser: argparse.ArgumentParser, *, use_argument_group: bool = True
) -> argparse.ArgumentParser:
    """Add a flag per argument of ``cls.__init__`` (and, for a Trainer, the removed 1.x flags) to ``parser``.

    Args:
        cls: the Trainer (or LightningDataModule) class whose arguments become flags.
        parser: the parser to extend.
        use_argument_group: group the flags under the class name in ``--help``, as 1.x did.

    Returns:
        ``parser``, as 1.x's ``Trainer.add_argparse_args`` did, so ``parser = add_argparse_args(Trainer, parser)``
        works.
    """
    group = parser.add_argument_group(cls.__name__) if use_argument_group else parser
    taken = {action.dest for action in parser._actions}  # a flag the script defines itself wins
    for name, param in inspect.signature(cls).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name in taken:
            continue
        default = param.default if param.default is not inspect.Parameter.empty else None
        if not isinstance(default, (bool, int, float, str, type(None))):
            continue  # callbacks, loggers, plugins, profilers objects: not from a command line
        group.add_argument(f"--{name}", dest=name, type=_value, default=default, help=f"(default: {default!r})")
        taken.add(name)
    if _is_trainer(cls):
        for name in LEGACY_FLAGS:
            if name not in taken:
                group.add_argument(
                    f"--{name}",
                    dest=name,
                    type=_value,
                    default=_LEGACY_DEFAULTS.get(name),
                    help="Lightning 1.x flag, translated",
                )
    return parser


def from_argparse_args(
    cls: type, args: argparse.Namespace | argparse.ArgumentParser | dict[str, Any], **kwargs: Any
) -> Any:
    """Build ``cls`` from parsed flags, as 1.x's ``Trainer.from_argparse_args(args, **kwargs)`` did.

    Args:
        cls: the class to build.
        args: the parsed namespace (or a dict, or a parser: parsed by :func:`parse_argparser`, as 1.x did); entries
            that are not arguments of ``cls`` are ignored.
        **kwargs: arguments that win over the flags.

    Returns:
        ``cls(**params)``, with a Trainer's 1.x flags translated by :func:`legacy_trainer_kwargs`; a Trainer keeps the
        ``auto_lr_find``/``auto_scale_batch_size`` it was given for
        :func:`~lightning_mgpu.upgrade.tuning.legacy_tune` (1.x's tune() read them, nothing else did).

    Raises:
        ValueError: a 1.x flag was given a value that has no 2.x meaning (the message names the 2.x way).
    """
    if isinstance(args, argparse.ArgumentParser):
        args = parse_argparser(cls, args)
    given = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
    signature = inspect.signature(cls).parameters
    accepted = set(signature) | (set(LEGACY_FLAGS) if _is_trainer(cls) else set())
    # A flag left at the class's own default says nothing: dropping it lets a 1.x flag (--gpus 2) set that argument.
    params = {
        name: value
        for name, value in given.items()
        if name in accepted and not (name in signature and _same(value, signature[name].default))
    }
    params.update(kwargs)
    if not _is_trainer(cls):
        return cls(**params)
    # auto_lr_find/auto_scale_batch_size: 1.x's Trainer kept them for tune() alone (fit() never read them). 2.x's
    # Trainer takes neither: they are kept on the Trainer for legacy_tune, which a converted tune() calls.
    tuner_flags = {name: params.pop(name) for name in TUNER_FLAGS if name in params}
    trainer = cls(**legacy_trainer_kwargs(params, namespace=_namespace(cls)))
    keep_tuner_flags(trainer, tuner_flags)
    return trainer


def get_init_arguments_and_types(cls: Any) -> list[tuple[str, tuple[Any, ...], Any]]:
    """The arguments of ``cls`` (a class or a function) as 1.x's ``get_init_arguments_and_types`` gave them.

    Returns:
        ``(name, types, default)`` per parameter: ``types`` the members of a ``Union``/``Optional`` annotation (the
        types of a ``Literal``'s values), else the annotation alone; ``default`` ``inspect.Parameter.empty`` where
        there is none. A 2.x class's own signature: a Trainer's 1.x arguments are not in it.
    """
    try:  # annotations written as strings (``from __future__ import annotations``) read as the types they name
        parameters = inspect.signature(cls, eval_str=True).parameters
    except Exception:  # noqa: BLE001  (a name the annotation's module cannot resolve: read as written, as 1.x did)
        parameters = inspect.signature(cls).parameters
    found = []
    for name, parameter in parameters.items():
        annotation = parameter.annotation
        try:
            if type(annotation).__name__ == "_LiteralGenericAlias":
                types: tuple[Any, ...] = tuple({type(a) for a in annotation.__args__})
            elif "typing.Literal" in str(annotation) or "typing_extensions.Literal" in str(annotation):
                types = tuple({type(a) for union in annotation.__args__ for a in union.__args__})
            else:
                types = tuple(annotation.__args__)
        except (AttributeError, TypeError):
            types = (annotation,)
        found.append((name, types, parameter.default))
    return found


def parse_argparser(cls: type, arg_parser: argparse.ArgumentParser | argparse.Namespace) -> argparse.Namespace:
    """1.x's ``Trainer.parse_argparser(arg_parser)``: parse the command line (where given a parser) and read a flag
    given without a value (None) as True, for an argument of ``cls`` that takes a bool and defaults to one.

    Args:
        cls: the class whose arguments are read (the Trainer, or a LightningDataModule).
        arg_parser: a parser (its ``parse_args()`` is called) or a namespace already parsed.

    Returns:
        A new namespace with every entry of the parsed one.
    """
    args = arg_parser.parse_args() if isinstance(arg_parser, argparse.ArgumentParser) else arg_parser
    types_default = {name: (types, default) for name, types, default in get_init_arguments_and_types(cls)}
    parsed = {}
    for name, value in vars(args).items():
        if name in types_default and value is None:
            types, default = types_default[name]
            if bool in types and isinstance(default, bool):
                value = True  # --flag with no value (1.x's nargs="?"): on, whatever the default
        parsed[name] = value
    return argparse.Namespace(**parsed)


def parse_env_variables(cls: type, template: str = "PL_%(cls_name)s_%(cls_argument)s") -> argparse.Namespace:
    """1.x's ``parse_env_variables(cls)`` (a Trainer's ``match_env_arguments()``): the arguments of ``cls`` set in
    the environment (``PL_TRAINER_MAX_EPOCHS=3``), their values read as Python literals where they are one.

    Args:
        cls: the class whose arguments are looked up; for a Trainer the removed 1.x arguments too
            (``PL_TRAINER_GPUS=2``), which :func:`from_argparse_args` translates.
        template: the variable's name, from ``cls_name`` (the class's name, upper case) and ``cls_argument``.

    Returns:
        A namespace of the variables found (an empty one where none is set).
    """
    names = [name for name, _, _ in get_init_arguments_and_types(cls)]
    if _is_trainer(cls):
        names += [name for name in LEGACY_FLAGS if name not in names]
    found = {}
    for name in names:
        value: Any = os.environ.get(template % {"cls_name": cls.__name__.upper(), "cls_argument": name.upper()})
        if value is None or value == "":
            continue
        with suppress(Exception):  # not a literal: the string as it is (1.x did the same)
            value = literal_eval(value)
        found[name] = value
    return argparse.Namespace(**found)


def _is_strategy(value: Any) -> bool:
    """A Lightning strategy object (either namespace's, the bundle's included): its class derives from a class named
    Strategy in a Lightning ``strategies`` package."""
    return any(
        base.__name__ == "Strategy" and base.__module__.split(".strategies", 1)[0] in rules.BUNDLE_FOR_NAMESPACE
        for base in inspect.getmro(type(value))
    )


def _strategy_name(value: Any, namespace: str) -> str | None:
    """The 2.x strategy a string in ``plugins=`` named (a 1.x backend string or a registered name), else None."""
    if not isinstance(value, str):
        return None
    if value in rules.STRATEGY_STRINGS:
        return rules.STRATEGY_STRINGS[value]
    registry = importlib.import_module(f"{namespace}.strategies").StrategyRegistry
    return value if value in registry else None


def _strategy_from_plugins(out: dict[str, Any], namespace: str) -> bool:
    """Move the strategy that ``out["plugins"]`` holds (alone, or in a list or tuple beside other plugins) to
    ``out["strategy"]``, as 1.x's accelerator connector took it; the other plugins stay. Returns whether one moved.

    Raises:
        ValueError: two strategies in ``plugins=`` (1.x refused them too), or one beside a different ``strategy=``.
    """
    plugins = out.get("plugins")
    listed = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    found = [p for p in listed if _is_strategy(p) or _strategy_name(p, namespace) is not None]
    if not found:
        return False
    if len(found) > 1:
        names = ", ".join(p if isinstance(p, str) else type(p).__name__ for p in found)
        raise ValueError(f"plugins= holds two strategies ({names}): pass one as strategy=")
    strategy = found[0]
    written = strategy if isinstance(strategy, str) else type(strategy).__name__
    if out.get("strategy") not in (None, "auto"):
        raise ValueError(
            f"plugins= holds the strategy {written}, and strategy={out['strategy']!r} is given too: choose one"
        )
    out["strategy"] = _strategy_name(strategy, namespace) or strategy
    rest = [p for p in listed if p is not strategy]
    if rest and isinstance(plugins, (list, tuple)):
        out["plugins"] = type(plugins)(rest)
    else:
        del out["plugins"]
    return True


def legacy_trainer_kwargs(
    params: Mapping[str, Any] | None = None,
    namespace: str = "lightning.pytorch",
    *,
    callbacks: Any = None,
    **settings: Any,
) -> dict[str, Any]:
    """Translate Lightning 1.x Trainer keyword arguments into 2.x ones, as 1.x's Trainer read them.

    ``lightning-mgpu upgrade`` writes ``Trainer(**legacy_trainer_kwargs(settings))`` where settings it cannot read
    (a config file, a function's ``**kwargs``) are splatted into a Trainer, and
    ``Trainer(max_epochs=3, **legacy_trainer_kwargs(accelerator=args.accelerator, gpus=args.gpus))`` where a call's
    own arguments hold values it cannot read.

    Args:
        params: keyword arguments for a Trainer (a dict, or any mapping: an OmegaConf ``DictConfig``), 1.x and 2.x
            spellings mixed; 2.x ones at their defaults ("auto", None) are overridden by a 1.x one that says more.
        namespace: the Lightning tree whose callbacks a translation adds (``lightning.pytorch`` or
            ``pytorch_lightning``).
        callbacks: the ``callbacks=`` the Trainer call passes beside the splatted settings: a callback a 1.x key
            adds (``progress_bar_refresh_rate``) joins them, as 1.x's Trainer added it, instead of clashing with them.
        **settings: more keyword arguments for the Trainer, as ``params`` holds them.

    Returns:
        The 2.x keyword arguments.

    Raises:
        ValueError: a 1.x argument whose value has no 2.x meaning, named with the 2.x way; ``callbacks`` given both
            in ``params`` and as ``callbacks=`` (the Trainer call would have refused it too); or a setting given both
            in ``params`` and as a keyword.
    """
    if settings:
        twice = sorted(set(params or {}) & set(settings))
        if twice:
            raise ValueError(f"{', '.join(twice)} given twice: in the settings and as keywords")
        params = {**(params or {}), **settings}
    params = params if params is not None else {}
    if callbacks is not None:
        if "callbacks" in params:
            raise ValueError("callbacks= is given twice: in the settings and beside them")
        params = {**params, "callbacks": callbacks}
    out = {k: v for k, v in params.items() if k not in LEGACY_FLAGS}

    def put(name: str, value: Any, old: str) -> None:
        # A 2.x argument left at its default ("auto"/None) takes the 1.x value; a different explicit one conflicts.
        if out.get(name) in (None, "auto") or out.get(name) == value:
            out[name] = value
        else:
            raise ValueError(f"{old} maps to {name}={value!r}, but {name}={out[name]!r} is given too: choose one")

    # plugins=DDPStrategy(...) / [DeepSpeedStrategy(...), env] / "ddp_sharded": 1.x's accelerator connector took a
    # training-type plugin (an object, or a name of its registry) given in plugins= as the strategy; 2.x's Trainer
    # refuses a strategy there. It moves to strategy=, before the backend strings below read what strategy= holds.
    from_plugins = _strategy_from_plugins(out, namespace)
    strategy_source = next(
        (k for k in ("distributed_backend", "accelerator") if params.get(k) in rules.STRATEGY_STRINGS), None
    )
    if strategy_source is not None:
        name = params[strategy_source]
        if strategy_source == "accelerator":
            out.pop("accelerator")
        given = out.get("strategy")
        if given is not None and (not isinstance(given, str) or from_plugins) and name in ("ddp", "ddp_spawn"):
            # accelerator="ddp" beside plugins=DDPPlugin(...) (now strategy=DDPStrategy(...)) or plugins="ddp_sharded":
            # in 1.x the plugin refined the backend string, so the plugin is the strategy (as trainer_devices.py
            # rewrites it).
            pass
        else:
            put("strategy", rules.STRATEGY_STRINGS[name], f"{strategy_source}={name!r}")
        if name == "ddp_cpu":
            put("accelerator", "cpu", f"{strategy_source}={name!r}")
    elif params.get("distributed_backend") not in (None, ""):
        raise ValueError(
            f"distributed_backend={params['distributed_backend']!r} is not a strategy: pass strategy= instead"
        )
    gpus = params.get("gpus")
    if gpus is True and params.get("auto_select_gpus"):
        # gpus=True beside auto_select_gpus: 1.x (1.0 to 1.9) picked range(True), one free GPU; 2.x refuses
        # devices=True. Without auto_select_gpus 1.x refused a bool gpus, as 2.x does: it passes on unchanged.
        gpus = 1
    given = params.get("accelerator")
    if (
        gpus is not None
        and given not in (None, "auto")
        and not (isinstance(given, str) and given in rules.STRATEGY_STRINGS)
        and params.get("num_processes") in (None, 0)
    ):
        # accelerator="cpu"/"gpu" (a device type, or an Accelerator object) beside gpus=: 1.x's accelerator
        # connector (1.6 to 1.9) kept the device type given and took a non-zero gpus as the number of devices
        # ("cpu" with gpus=2: two CPU processes); gpus=0 left the accelerator's own default, all its devices (one
        # CPU), which is 2.x's devices="auto".
        if gpus not in (0, "0", "", []):
            put("devices", gpus, f"gpus={gpus!r}")
    elif gpus not in (None, 0, "0", "", []):
        put("accelerator", "gpu", f"gpus={gpus!r}")
        put("devices", gpus, f"gpus={gpus!r}")
    elif params.get("num_processes") not in (None, 0):
        put("accelerator", "cpu", f"num_processes={params['num_processes']!r}")
        put("devices", params["num_processes"], f"num_processes={params['num_processes']!r}")
    elif gpus is not None:
        put("accelerator", "cpu", f"gpus={gpus!r}")
    for flag, accelerator in (("tpu_cores", "tpu"), ("ipus", "ipu")):
        if params.get(flag) not in (None, 0):
            put("accelerator", accelerator, f"{flag}={params[flag]!r}")
            put("devices", params[flag], f"{flag}={params[flag]!r}")
    precision = out.get("precision")
    if str(precision) in rules.PRECISION:
        out["precision"] = rules.PRECISION[str(precision)]
    if params.get("amp_backend") == "apex" and str(precision) == "16":
        raise ValueError('amp_backend="apex" is gone: precision="16-mixed" is native AMP (drop --amp_backend)')
    for old, new in rules.RENAMED_ARGS.items():
        if old in params:
            out.pop(old, None)
            if params[old] is not None:
                put(new, params[old], old)
    if params.get("checkpoint_callback") is not None:
        if not isinstance(params["checkpoint_callback"], bool):
            raise ValueError("checkpoint_callback= takes no ModelCheckpoint in 2.x: pass it in callbacks=[...]")
        put("enable_checkpointing", params["checkpoint_callback"], "checkpoint_callback")
    summary = params.get("weights_summary", "top")
    if summary is None:
        put("enable_model_summary", False, "weights_summary=None")
    elif summary == "full":  # every layer: 2.x's ModelSummary callback with no depth limit
        full = importlib.import_module(f"{namespace}.callbacks").ModelSummary(max_depth=-1)
        listed = out.get("callbacks") or []
        out["callbacks"] = [*(listed if isinstance(listed, list) else [listed]), full]
    elif summary != "top":
        raise ValueError(f'weights_summary={summary!r}: 1.x took "top", "full" or None')
    if params.get("reload_dataloaders_every_epoch"):
        put("reload_dataloaders_every_n_epochs", 1, "reload_dataloaders_every_epoch=True")
    rate = params.get("progress_bar_refresh_rate")
    if rate == 0:
        put("enable_progress_bar", False, "progress_bar_refresh_rate=0")
    elif rate is not None:
        bar = importlib.import_module(f"{namespace}.callbacks").TQDMProgressBar(refresh_rate=int(rate))
        callbacks = out.get("callbacks") or []
        out["callbacks"] = [*(callbacks if isinstance(callbacks, list) else [callbacks]), bar]
    bundle_callbacks = importlib.import_module(f"{rules.BUNDLE_FOR_NAMESPACE[namespace]}.callbacks")
    for flag, name in rules.FLAG_CALLBACKS.items():
        if params.get(flag):
            callbacks = out.get("callbacks") or []
            listed = callbacks if isinstance(callbacks, list) else [callbacks]
            # 1.x added no StochasticWeightAveraging where the callbacks held one; a TerminateOnNaN there already
            # checks what terminate_on_nan=True would (rules.FLAG_CALLBACK_CLASSES).
            kinds = tuple(
                getattr(module, cls)
                for module in (importlib.import_module(f"{namespace}.callbacks"), bundle_callbacks)
                for cls in sorted(rules.FLAG_CALLBACK_CLASSES[flag])
                if hasattr(module, cls)
            )
            if not any(isinstance(callback, kinds) for callback in listed):
                out["callbacks"] = [*listed, getattr(bundle_callbacks, name)()]
    if params.get("multiple_trainloader_mode") == rules.TRAINLOADER_MODE_DEFAULT:
        pass  # 1.x's default: 2.x's fit loop combines several training loaders the same way (no argument needed)
    elif params.get("multiple_trainloader_mode") not in _UNSET:
        raise ValueError(
            f"multiple_trainloader_mode={params['multiple_trainloader_mode']!r} is gone: return"
            f" CombinedLoader(loaders, mode={params['multiple_trainloader_mode']!r}) from train_dataloader"
        )
    if params.get("resume_from_checkpoint") is not None:
        raise ValueError(
            "resume_from_checkpoint is gone from the Trainer: pass ckpt_path=args.resume_from_checkpoint to trainer.fit"
        )
    for name in ("accelerator", "strategy", "devices"):
        if name in out and out[name] is None:
            del out[name]  # 1.x's "not given"; 2.x's default is "auto"
    if out.get("max_steps") is None and "max_steps" in out:
        out["max_steps"] = -1  # 1.x's "no limit"
    # Removed flags whose unset values mean nothing, and whose set values have no 2.x Trainer argument.
    for old, rule in {**rules.REMOVED_ARGS, **rules.DROPPED_ARGS}.items():
        # above: accelerator and devices, the callbacks, the loaders' mode
        translated = ("tpu_cores", "ipus", *rules.FLAG_CALLBACKS, "multiple_trainloader_mode")
        if params.get(old) not in _UNSET and old not in translated and old not in rules.DROPPED_ARGS:
            raise ValueError(f"--{old}={params[old]!r}: {rules.RULES[rule].todo}")
    return out
