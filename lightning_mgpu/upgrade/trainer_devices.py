"""The Trainer-arguments family's strategy and device groups: the 1.x keys that named a strategy
(``accelerator="ddp"``, ``distributed_backend``, ``plugins=[DDPPlugin()]``) moved to ``strategy=``, and
``gpus``/``num_processes``/``tpu_cores``/``ipus`` turned into ``accelerator=`` + ``devices=``.

Rule ids: trainer-strategy, trainer-devices, trainer-gpus-beside-accelerator, and the rules of ``tpu_cores`` and
``ipus`` in :data:`rules.REMOVED_ARGS`; TODOs trainer-conflict, trainer-distributed-backend,
trainer-accelerator-unknown, trainer-accelerator-unread; note ddp-cpu-gradient-mean.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.conflicts import drop_default, plugin_refines
from lightning_mgpu.upgrade.nodes import code as _code
from lightning_mgpu.upgrade.nodes import quoted as _quoted
from lightning_mgpu.upgrade.nodes import string as _string
from lightning_mgpu.upgrade.scopes import dotted as _dotted
from lightning_mgpu.upgrade.scopes import literal as _literal
from lightning_mgpu.upgrade.trainer_kwargs import TrainerArgs


def rewrite_strategy(args: TrainerArgs) -> str | None:
    """accelerator="ddp" / distributed_backend="dp" / plugins="ddp_sharded": strategy names in 1.x, moved to
    ``strategy=``. Returns the device type a strategy name implies ("cpu" for ddp_cpu), else None."""
    found, accelerator = _strategy_names(args)
    # accelerator="ddp", plugins=[DDPShardedPlugin()]: in 1.x the plugin object refined the backend string, so it
    # is the strategy and the string goes.
    if found and found[-1][1] == "plugins" and plugin_refines(found[-1][0]):  # an object, or "ddp_sharded"
        for strategy, key, written in found[:-1]:
            if _branches(strategy) <= {"ddp", "ddp_spawn", "auto"}:
                args.remove(key)
                args.change("trainer-strategy", f"{key}={written} dropped: the plugin object is the strategy")
        found = [f for f in found if f[1] == "plugins" or not _branches(f[0]) <= {"ddp", "ddp_spawn", "auto"}]
    # Two 1.x keys that both name a strategy: the last one moves, the others are left for a person with the same
    # TODO that a second run would give them.
    for strategy, key, _ in found[:-1]:
        args.todo("trainer-conflict", old=key, value=_code(strategy), new="strategy")
    if found:
        strategy, key, written = found[-1]
        drop_default(
            args, name="strategy", beside=key
        )  # strategy=None/"auto" beside accelerator="ddp": trainer-conflict-resolved
        if args.set("strategy", strategy, replacing=key):
            args.change("trainer-strategy", f"{key}={written} -> strategy={_code(strategy)}")
    return accelerator


def _strategy_names(args: TrainerArgs) -> tuple[list[tuple[cst.BaseExpression, str, str]], str | None]:
    """The 1.x keys that name a strategy, as ``(2.x strategy value, 1.x key, what the user wrote)``, and the device
    type one of them implies."""
    found: list[tuple[cst.BaseExpression, str, str]] = []  # (2.x strategy value, 1.x key, what the user wrote)
    accelerator: str | None = None
    for key in ("accelerator", "distributed_backend", "plugins"):
        value = args.get(key)
        if value is None:
            continue
        name = _string(value)
        if isinstance(value, cst.List) and len(value.elements) == 1:
            name = _string(value.elements[0].value)
            value = value.elements[0].value if name is None else value
        if name is None and key == "plugins" and _is_strategy_object(value, args.assigned(value)):
            # plugins=[DDPShardedPlugin()] / plugins=DDPPlugin(...) / plugins=plugin: a training-type plugin is a
            # strategy in 2.x.
            found.append((value, key, _code(args.get(key))))  # type: ignore[arg-type]
            continue
        if name in rules.STRATEGY_STRINGS:
            found.append((_quoted(rules.STRATEGY_STRINGS[name]), key, _code(value)))
            if name == "ddp_cpu":
                accelerator = "cpu"
                args.note("ddp-cpu-gradient-mean")
            continue
        if name is not None or key == "plugins":
            if key == "distributed_backend" and name is not None:
                args.todo("trainer-distributed-backend", value=name)
            continue
        # Not a literal: a conditional ('ddp' if n > 1 else None), a variable, or a command-line flag.
        values = args.resolve(value)
        mapped = strategy_value(value)
        if args.strategy_var(value):
            found.append((value, key, _code(value)))  # its assignments are rewritten where they are
        elif mapped is not None and _strategy_candidates(values):
            found.append((mapped, key, _code(value)))
        elif _strategy_candidates(values) or (key == "distributed_backend" and values is None):
            # distributed_backend only ever held strategy names; None meant "no strategy", which 2.x spells "auto".
            if values is not None and "ddp_cpu" in values:
                args.todo("trainer-accelerator-unknown", value=_code(value))
                continue
            if values is None or None in values:
                mapped = cst.BooleanOperation(left=value, operator=cst.Or(), right=_quoted("auto"))
            else:
                mapped = value
            found.append((mapped, key, _code(value)))
        elif key == "accelerator" and (values is None or any(v in rules.STRATEGY_STRINGS for v in values)):
            args.todo("trainer-accelerator-unknown", value=_code(value))
    return found, accelerator


def rewrite_devices(args: TrainerArgs, accelerator: str | None) -> None:
    """gpus=N / num_processes=N / tpu_cores / ipus -> accelerator + devices."""
    from_gpus = args.has("gpus") and not args.has("num_processes")  # 1.x: num_processes or gpus, the first set
    accelerator, accelerator_node = _gpus(args, accelerator)
    processes = args.get("num_processes")
    if processes is not None:
        accelerator = accelerator or "cpu"
        if args.set("devices", processes, replacing="num_processes"):
            args.change("trainer-devices", f"num_processes={_code(processes)} -> devices={_code(processes)}")
    for flag, device in (("tpu_cores", "tpu"), ("ipus", "ipu")):
        count = args.get(flag)
        if count is not None and accelerator is None and args.set("devices", count, replacing=flag):
            accelerator = device
            args.change(rules.REMOVED_ARGS[flag], f"{flag}={_code(count)} -> devices={_code(count)}")
    if accelerator is not None or accelerator_node is not None:
        _device_type(args, accelerator, accelerator_node, from_gpus)


def _gpus(args: TrainerArgs, accelerator: str | None) -> tuple[str | None, cst.BaseExpression | None]:
    """``gpus=`` -> ``devices=`` (and ``num_processes`` beside it dropped): the device type it implies, and the
    ``accelerator=`` expression a ``gpus`` this tool cannot read needs."""
    accelerator_node: cst.BaseExpression | None = None
    gpus = args.get("gpus")
    if gpus is None:
        return accelerator, accelerator_node
    literal = _literal(gpus)
    if literal in (0, None, "0", "") and literal is not False:
        accelerator = accelerator or "cpu"
        args.remove("gpus")
        args.change("trainer-devices", f'gpus={_code(gpus)} -> accelerator="cpu"')
    elif literal is True and _literal(args.get("auto_select_gpus") or cst.Name("None")) is True:
        # Decision: gpus=True beside auto_select_gpus=True. 1.x (1.0 to 1.9) handed a bool gpus, an int to Python, to
        # pick_multiple_gpus(True), which picked range(True): one free GPU. 2.x refuses devices=True (a TypeError),
        # so the count 1.x ran is written out (auto_select_gpus itself goes with its note: trainer_rewrite.py).
        # Without auto_select_gpus, 1.x refused a bool gpus at parse_gpu_ids as 2.x refuses devices=True: that
        # case stays below, an error in both.
        accelerator = "gpu"
        if args.set("devices", cst.Integer("1"), replacing="gpus"):
            args.change("trainer-devices", "gpus=True -> devices=1 (auto_select_gpus picked one free GPU in 1.x)")
    elif literal is not ... or isinstance(gpus, cst.List):
        accelerator = "gpu"
        if args.set("devices", gpus, replacing="gpus"):
            args.change("trainer-devices", f"gpus={_code(gpus)} -> devices={_code(gpus)}")
    elif _string(args.get("accelerator") or cst.Name("None")) in ("gpu", "cuda") and not args.has("devices"):
        # gpus=X beside accelerator="gpu" (1.5+): 1.x kept the GPU and took X devices, or all of them
        # ("auto") where X was 0 or None.
        left: cst.BaseExpression = gpus
        if isinstance(left, (cst.IfExp, cst.BooleanOperation, cst.Lambda, cst.NamedExpr)) and not left.lpar:
            left = left.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        all_gpus = cst.BooleanOperation(left=left, operator=cst.Or(), right=_quoted("auto"))
        args.replace("gpus", [("devices", all_gpus)])
        args.change("trainer-gpus-beside-accelerator", f"gpus={_code(gpus)} -> devices={_code(all_gpus)}")
    else:
        # A variable or a condition: 1.x ran on the CPU when it was 0 or None, and so must the rewrite.
        accelerator_node, devices = _accelerator_for(gpus, args.get("num_processes"))
        if args.set("devices", devices, replacing="gpus"):
            args.change("trainer-devices", f"gpus={_code(gpus)} -> devices={_code(devices)}")
        else:
            accelerator_node = None
    if args.has("num_processes"):
        args.remove("num_processes")  # 1.x ignored it when gpus was given (a variable gpus keeps it for CPU)
        args.change("trainer-devices", "num_processes dropped (1.x ignored it beside gpus)")
    return accelerator, accelerator_node


def _device_type(
    args: TrainerArgs, accelerator: str | None, accelerator_node: cst.BaseExpression | None, from_gpus: bool = False
) -> None:
    """``accelerator=`` set to the device type the 1.x flags named (a conflict with the one given is a TODO);
    ``from_gpus``: they were ``gpus=`` alone (no ``num_processes``)."""
    new_node = accelerator_node if accelerator_node is not None else _quoted(accelerator)  # type: ignore[arg-type]
    drop_default(args, name="accelerator", beside="the device arguments")  # accelerator=None beside gpus=N
    given = args.get("accelerator")
    current = _string(given) if given is not None else None
    if args.get("accelerator") is None or current in rules.STRATEGY_STRINGS:
        args.remove("accelerator")
        # Before devices, where a person would write it.
        position = next((i for i, item in enumerate(args.items) if item[0] == "devices"), len(args.items))
        args.items.insert(position, ("accelerator", new_node, None))
        args.change("trainer-devices", f"-> accelerator={_code(new_node)} (the device type the 1.x flags named)")
    elif current == "auto" or (accelerator_node is None and current == accelerator):
        args.change("trainer-devices", f"accelerator={_code(args.get('accelerator'))} kept")  # type: ignore[arg-type]
    elif from_gpus and given is not None and _literal(given) is ...:
        # Decision: accelerator='gpu' if n > 0 else 'cpu' (or a variable) beside gpus=n: 1.x kept a device type
        # given there and took gpus as the number of devices; which device type this value is, only the run knows.
        # A TODO that the run-time translation settles (trainer_call.py moves the settings into
        # legacy_trainer_kwargs, which reads them as 1.x did), not a conflict between two literals.
        args.todo("trainer-accelerator-unread", value=_code(given))
    else:
        args.todo("trainer-conflict", old="gpus", value=_code(new_node), new="accelerator")


def _is_strategy_object(node: cst.BaseExpression, assigned: list[cst.BaseExpression] | None) -> bool:
    """A call of a 1.x training-type plugin or a strategy class, or a name every assignment gave one."""
    calls = [node] if isinstance(node, cst.Call) else (assigned or [])
    if not calls or not all(isinstance(c, cst.Call) for c in calls):
        return False
    names = [(_dotted(c.func) or "").rsplit(".", 1)[-1] for c in calls]  # type: ignore[attr-defined]
    return all(
        n in rules.REMOVED_CLASSES or n in rules.LIGHTNING_PLUGINS or n.endswith("Strategy") or n.endswith("DDPPlugin")
        for n in names
    )


def may_hold_strategy(node: cst.BaseExpression, assigned: list[cst.BaseExpression] | None) -> bool:
    """Whether ``plugins=`` given ``node`` (a name, with what each assignment in its scope gave it) may hold a 1.x
    training-type plugin or a strategy object: one assignment (or a branch of one, or an element of a list) calls
    such a class, though others may not (``plugins = DDPPlugin(...)`` in one branch, None or
    a command-line value in others). Such a value is translated at run time (trainer_call.py); one that holds a
    strategy in every assignment is ``strategy=`` already (:func:`rewrite_strategy`)."""

    def calls_one(value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.IfExp):
            return calls_one(value.body) or calls_one(value.orelse)
        if isinstance(value, (cst.List, cst.Tuple)):
            return any(calls_one(e.value) for e in value.elements)
        return isinstance(value, cst.Call) and _is_strategy_object(value, None)

    return isinstance(node, cst.Name) and any(calls_one(value) for value in assigned or ())


def strategy_value(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``node`` with each 1.x strategy string mapped to its 2.x name and None to "auto", where every branch of it is a
    literal (a string, None, or a conditional of those); None where some branch is not."""
    if isinstance(node, cst.IfExp):
        body, orelse = strategy_value(node.body), strategy_value(node.orelse)
        if body is None or orelse is None:
            return None
        return body if _code(body) == _code(orelse) else node.with_changes(body=body, orelse=orelse)
    value = _literal(node)
    if value is None:
        return _quoted("auto")
    if isinstance(value, str) and value in rules.STRATEGY_STRINGS:
        return _quoted(rules.STRATEGY_STRINGS[value])
    return None


def _branches(node: cst.BaseExpression) -> set[Any]:
    """The literals a value or a conditional of values can be (``{...}`` where a branch is not a literal)."""
    if isinstance(node, cst.IfExp):
        return _branches(node.body) | _branches(node.orelse)
    return {_literal(node)}


def _strategy_candidates(values: set[Any] | None) -> bool:
    """Whether every value a setting may hold is a 1.x strategy name or None, and one of them is a name."""
    if not values:
        return False
    return all(v is None or v in rules.STRATEGY_STRINGS for v in values) and any(v is not None for v in values)


def _accelerator_for(
    node: cst.BaseExpression, cpu_devices: cst.BaseExpression | None = None
) -> tuple[cst.BaseExpression, cst.BaseExpression]:
    """``gpus=<non-literal>`` keeps its CPU path: ``accelerator="gpu" if X else "cpu"``, ``devices=X or 1``. A
    conditional with literal branches is rewritten branch by branch instead (and folded where both agree)."""
    if isinstance(node, cst.IfExp) and _literal(node.body) is not ... and _literal(node.orelse) is not ...:

        def branch(value: cst.BaseExpression) -> tuple[str, cst.BaseExpression]:
            on = _literal(value) not in (0, None, "0", "", False)
            return ("gpu" if on else "cpu"), (value if on else (cpu_devices or cst.Integer("1")))

        (acc_a, dev_a), (acc_b, dev_b) = branch(node.body), branch(node.orelse)
        accelerator = (
            _quoted(acc_a) if acc_a == acc_b else node.with_changes(body=_quoted(acc_a), orelse=_quoted(acc_b))
        )
        devices = dev_a if _code(dev_a) == _code(dev_b) else node.with_changes(body=dev_a, orelse=dev_b)
        return accelerator, devices
    inner = node.deep_clone()
    if isinstance(inner, (cst.IfExp, cst.BooleanOperation, cst.Comparison, cst.UnaryOperation)):
        inner = inner.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    accelerator = cst.IfExp(
        test=inner,
        body=_quoted("gpu"),
        orelse=_quoted("cpu"),
        whitespace_before_if=cst.SimpleWhitespace(" "),
        whitespace_after_if=cst.SimpleWhitespace(" "),
        whitespace_before_else=cst.SimpleWhitespace(" "),
        whitespace_after_else=cst.SimpleWhitespace(" "),
    )
    # 1.x ran num_processes CPU processes when gpus was 0 or None (one without it).
    devices = cst.BooleanOperation(left=inner.deep_clone(), operator=cst.Or(), right=cpu_devices or cst.Integer("1"))
    return accelerator, devices
