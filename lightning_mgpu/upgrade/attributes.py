"""The attributes-and-names family: attribute chains through a Lightning namespace's alias or a subpackage's local
name (``pl.loggers.NeptuneLogger``, ``pl.strategies.DDPShardedStrategy``, ``pl.metrics.Accuracy``), the removed
Trainer attributes (``trainer.root_gpu``), the uses of a name an import renamed, and the ``EPOCH_OUTPUT`` annotation.

Rule ids: bundle-class, plugin-class, bundle-name, renamed-name, moved-module, metrics-import, epoch-output-type, and
the rules of ``removed_names.TRAINER_ATTRIBUTES``; trainer-progress-bar-dict; TODO trainer-accelerator-connector,
trainer-resume-attribute, trainer-bar-dict-read, spawn-class-use. A Trainer attribute's owner is a Trainer as
:mod:`~lightning_mgpu.upgrade.trainer_owners` reads it (bound from one, or named like one).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.leftover_spellings import is_accelerator_connector
from lightning_mgpu.upgrade.nodes import code as _code
from lightning_mgpu.upgrade.removed_names import epoch_output_annotation, trainer_attribute
from lightning_mgpu.upgrade.scopes import dotted as _dotted
from lightning_mgpu.upgrade.spawn_checks import checked_names, class_name, name_attribute


def visit_attribute(ctx: UpgradeContext, node: cst.Attribute) -> None:
    ctx.attribute_names.add(id(node.attr))  # x.DDPPlugin is not the imported name DDPPlugin
    if name_attribute(ctx, node):
        ctx.called_names.add(id(node.value))  # DDPSpawnStrategy.__name__: spawn_checks.class_name writes the name


def leave_attribute(ctx: UpgradeContext, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
    if name_attribute(ctx, original):
        return class_name(ctx, original, ctx.fstring_quotes[-1] if ctx.fstring_quotes else "")
    # Whether the owner is a Trainer: bound from one or named like one, asked of the original node (trainer_owners.py).
    of_trainer = ctx.is_trainer(original.value)
    bar_dict = progress_bar_dict(ctx, original, updated, of_trainer)
    if bar_dict is not None:
        return bar_dict
    # trainer.root_gpu, trainer.training_type_plugin: removed_names.py.
    attribute = trainer_attribute(updated, of_trainer)
    if attribute is not None:
        ctx.change(original, attribute[1], f"{_code(original)} -> {_code(attribute[0])}")
        return attribute[0]
    text = rules.todo_text("trainer-accelerator-connector")
    if is_accelerator_connector(updated, of_trainer) and not (ctx.pending and text in ctx.pending[-1]):
        ctx.todo(original, text)
        return updated
    # A removed Trainer attribute with no faithful rewrite here (one TODO per statement): its path, which 1.x kept
    # until fit restored it, and progress_bar_dict of an owner that cannot be read twice (a call's result).
    if of_trainer and updated.attr.value in ("resume_from_checkpoint", "progress_bar_dict"):
        if updated.attr.value == "resume_from_checkpoint":
            text = rules.todo_text("trainer-resume-attribute")
        else:
            text = rules.todo_text("trainer-bar-dict-read")
        if not (ctx.pending and text in ctx.pending[-1]):
            ctx.todo(original, text)
        return updated
    dotted = _dotted(updated)
    if dotted is None or "." not in dotted:
        return updated
    head, _, rest = dotted.partition(".")
    namespace = ctx.namespace_aliases.get(head)
    subpackage = ""  # reached through a subpackage's local name: loggers.TestTubeLogger
    if namespace is None and head in ctx.submodule_aliases:
        namespace, subpackage = ctx.submodule_aliases[head]
        rest = f"{subpackage}.{rest}"
    if namespace is None:
        return updated
    below, _, name = rest.rpartition(".")
    bundle = rules.BUNDLE_FOR_NAMESPACE[namespace]
    if name in rules.REMOVED_CLASSES and below in rules.REMOVED_CLASS_MODULES:
        new, extra = rules.REMOVED_CLASSES[name]
        ctx.add_import(bundle, new, None)
        if extra:
            ctx.renamed[f"{dotted}"] = (bundle, new, extra)
        ctx.change(original, "bundle-class", f"{dotted} -> {new} (from {bundle})")
        return cst.Name(new) if not extra else updated
    if name in rules.LIGHTNING_PLUGINS and below in rules.LIGHTNING_PLUGIN_MODULES:
        new, extra = rules.LIGHTNING_PLUGINS[name]
        if extra:
            ctx.renamed[dotted] = (f"{namespace}.strategies", new, extra)
            if subpackage:
                ctx.add_import(f"{namespace}.strategies", new, None)  # the call site writes the bare name
            return updated  # the call site rewrites it, with its extra arguments
        spelled = reached(ctx, head, subpackage, namespace, "strategies", new)
        ctx.change(original, "plugin-class", f"{dotted} -> {_code(spelled)}")
        return spelled
    moved = rules.MOVED_NAMES.get((below, name))
    if moved is not None:
        submodule, new = moved
        ctx.add_import(f"{bundle}.{submodule}", new, None)
        if new != name:
            ctx.renamed[dotted] = (f"{bundle}.{submodule}", new, {})
        ctx.change(original, "bundle-name", f"{dotted} -> {new} (from {bundle}.{submodule})")
        return cst.Name(new)
    renamed = rules.RENAMED_NAMES.get((below, name))
    if renamed is not None:
        spelled = reached(ctx, head, subpackage, namespace, *renamed)
        ctx.change(original, "renamed-name", f"{dotted} -> {_code(spelled)}")
        return spelled
    if below in rules.MOVED_MODULES:
        spelled = reached(ctx, head, subpackage, namespace, rules.MOVED_MODULES[below], name)
        ctx.change(original, "moved-module", f"{dotted} -> {_code(spelled)}")
        return spelled
    if below == "metrics" or below.startswith("metrics."):
        ctx.plain_imports["torchmetrics"] = None
        new = rules.TORCHMETRICS_RENAMED.get(name, name)
        target = "torchmetrics" + below[len("metrics") :]
        ctx.change(original, "metrics-import", f"{dotted} -> {target}.{new}")
        return cst.parse_expression(f"{target}.{new}")
    return updated


def progress_bar_dict(
    ctx: UpgradeContext, original: cst.Attribute, updated: cst.Attribute, of_trainer: bool
) -> cst.Dict | None:
    """``trainer.progress_bar_dict`` (removed in 1.7) -> ``{**get_standard_metrics(trainer),
    **trainer.progress_bar_metrics}``: what 2.x's progress bar shows, as a new dict (1.x built a new one on every
    read; ``progress_bar_metrics`` alone is the trainer's own dict, which a caller's ``pop("v_num")`` would change).
    Only where the owner is a Trainer (``of_trainer``) and is a plain name or attribute chain (it is read twice)."""
    if updated.attr.value != "progress_bar_dict" or _dotted(updated.value) is None or not of_trainer:
        return None
    owner = updated.value
    ctx.add_import(f"{ctx.namespace}.callbacks.progress.progress_bar", "get_standard_metrics", None)
    ctx.change(
        original, "trainer-progress-bar-dict", f"{_code(original)} -> get_standard_metrics + progress_bar_metrics"
    )
    call = cst.Call(func=cst.Name("get_standard_metrics"), args=[cst.Arg(owner)])
    metrics = cst.Attribute(value=owner, attr=cst.Name("progress_bar_metrics"))
    return cst.Dict(
        [cst.StarredDictElement(call), cst.StarredDictElement(metrics)], lpar=updated.lpar, rpar=updated.rpar
    )


def reached(
    ctx: UpgradeContext, head: str, subpackage: str, namespace: str, module: str, name: str
) -> cst.BaseExpression:
    """``name`` of ``module`` (below the namespace) as this file reaches it: through the namespace's alias
    (``pl.loggers.X``), through a subpackage's local name that holds it (``loggers.X``), or imported by name."""
    if not subpackage:
        return cst.parse_expression(".".join(part for part in (head, module, name) if part))
    if module == subpackage or module.startswith(subpackage + "."):
        return cst.parse_expression(".".join([head, *module.split(".")[1:], name]))
    ctx.add_import(".".join(part for part in (namespace, module) if part), name, None)
    return cst.Name(name)


def visit_call(ctx: UpgradeContext, node: cst.Call) -> None:
    """The names a call's rewrite handles itself: its callee (``DDPSpawnPlugin(...)`` gets its extra arguments in
    leave_Call) and a spawn class that ``isinstance(s, (DDPStrategy, DDPSpawnStrategy))`` drops from its tuple."""
    if isinstance(node.func, cst.Name):
        ctx.called_names.add(id(node.func))
        if node.func.value == "isinstance" and len(node.args) == 2 and isinstance(node.args[1].value, cst.Tuple):
            elements = [e.value for e in node.args[1].value.elements if isinstance(e.value, cst.Name)]
            for e in elements:
                entry = ctx.renamed.get(e.value)
                others = {
                    ctx.renamed[o.value][1] if o.value in ctx.renamed else o.value for o in elements if o is not e
                }
                if entry is not None and entry[2] and entry[1] in others:
                    ctx.called_names.add(id(e))  # calls.isinstance_spawn drops it
        for name in checked_names(ctx, node):
            ctx.called_names.add(id(name))  # spawn_checks.rewrite_isinstance replaces the check


def leave_name(ctx: UpgradeContext, original: cst.Name, updated: cst.Name) -> cst.Name:
    # References to a renamed import (isinstance(cb, GPUStatsMonitor)); calls that add arguments go through
    # leave_Call.
    if id(original) in ctx.attribute_names:
        return updated
    entry = ctx.renamed.get(updated.value)
    if entry is not None and entry[2] and id(original) not in ctx.called_names:
        # A class that became another with extra arguments (DDPSpawnPlugin -> DDPStrategy(start_method="spawn")),
        # named but not called (isinstance(s, DDPSpawnStrategy), a base class, a list of classes): its import went
        # and 2.x has no class that is it alone. Renaming it would widen what it matches; left as it is, it is
        # undefined: a TODO.
        ctx.todo(original, rules.todo_text("spawn-class-use", name=updated.value))
    return cst.Name(entry[1]) if entry is not None and not entry[2] else updated


def leave_annotation(ctx: UpgradeContext, original: cst.Annotation, updated: cst.Annotation) -> cst.Annotation:
    """``outputs: EPOCH_OUTPUT`` -> ``outputs: list[STEP_OUTPUT]`` (removed_names.py)."""
    if m.matches(original.annotation, m.Name("EPOCH_OUTPUT")) and "EPOCH_OUTPUT" in ctx.renamed:
        step_output = ctx.renamed["EPOCH_OUTPUT"][1]
        ctx.change(original, "epoch-output-type", f"EPOCH_OUTPUT -> list[{step_output}]")
        return epoch_output_annotation(updated, step_output)
    return updated
