"""The imports family: 1.x imports rewritten to where 2.x (or the bundle, or torchmetrics) keeps the name, the local
names this file gives the Lightning namespaces and their subpackages (read by the attribute and call rewrites), and
at the end of the module the imports the rewrites need, after the file's own.

Rule ids: metrics-import, bundle-class, plugin-class, bundle-name, renamed-name, moved-module, trainer-argparse,
auto-move-data, bundle-import; TODOs result-object, fsdp-plugin, test-tube-logger, argparse-utility.
"""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, ImportItem

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.calls import ARGPARSE_FUNCTIONS, ARGPARSE_MODULES
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.findings import Finding
from lightning_mgpu.upgrade.leftover_spellings import RESULT_CLASSES
from lightning_mgpu.upgrade.nodes import alias_of as _alias_of
from lightning_mgpu.upgrade.scopes import dotted as _dotted

#: The namespaces' subpackages a script may import by name (``from pytorch_lightning import loggers``) and reach a
#: removed name through (``loggers.TestTubeLogger``).
SUBPACKAGES = frozenset({"loggers", "callbacks", "plugins", "strategies", "profiler"})
#: Deeper modules a script may import by name (``from pytorch_lightning.callbacks import progress``) that still exist
#: in 2.x and hold a name 2.x renamed (``progress.ProgressBarBase`` -> ``ProgressBar``).
NESTED_SUBPACKAGES = frozenset({"callbacks.progress"})
#: The bundle module with 1.x's @auto_move_data (rule auto-move-data).
LEGACY_MOVE = "lightning_mgpu.upgrade.legacy_move"


def visit_import_from(ctx: UpgradeContext, node: cst.ImportFrom) -> None:
    module = _dotted(node.module) if node.module is not None else ""
    if isinstance(node.names, cst.ImportStar) or module is None:
        return
    below = next((module[len(ns) + 1 :] for ns in rules.BUNDLE_FOR_NAMESPACE if module.startswith(ns + ".")), "")
    namespace = next((ns for ns in rules.BUNDLE_FOR_NAMESPACE if module == ns or module.startswith(ns + ".")), None)
    if namespace is not None:
        # from pytorch_lightning import loggers [as pl_loggers]: a subpackage, reached as an attribute later.
        for alias in node.names:
            name = _dotted(alias.name)
            if name and name in SUBPACKAGES and "." not in name and not below:
                ctx.submodule_aliases[_alias_of(alias) or name] = (namespace, name)
            elif name and below and f"{below}.{name}" in NESTED_SUBPACKAGES:
                # from pytorch_lightning.callbacks import progress: progress.ProgressBarBase is renamed as the
                # from-import of the name is (the module itself is still there in 2.x).
                ctx.submodule_aliases[_alias_of(alias) or name] = (namespace, f"{below}.{name}")
    if module.startswith("torchmetrics") or below == "metrics" or below.startswith("metrics."):
        for alias in node.names:
            if isinstance(alias.name, cst.Name):
                name = alias.name.value
                ctx.torchmetrics_imports.append(("torchmetrics", rules.TORCHMETRICS_RENAMED.get(name, name)))


def visit_import(ctx: UpgradeContext, node: cst.Import) -> None:
    for alias in node.names:
        name = _dotted(alias.name)
        local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
        if name in rules.BUNDLE_FOR_NAMESPACE:
            ctx.namespace_aliases[local or name] = name
        namespace = next((ns for ns in rules.BUNDLE_FOR_NAMESPACE if (name or "").startswith(ns + ".")), None)
        if namespace is not None and local is not None:  # import pytorch_lightning.loggers as pl_loggers
            ctx.submodule_aliases[local] = (namespace, name[len(namespace) + 1 :])  # type: ignore[index]


def leave_import(ctx: UpgradeContext, original: cst.Import, updated: cst.Import) -> cst.Import:
    # import pytorch_lightning.metrics -> import torchmetrics
    names = []
    for alias in updated.names:
        name = _dotted(alias.name) or ""
        namespace = next((ns for ns in rules.BUNDLE_FOR_NAMESPACE if name.startswith(ns + ".metrics")), None)
        if namespace is not None and alias.asname is not None:
            new = "torchmetrics" + name[len(namespace) + len(".metrics") :]
            alias = alias.with_changes(name=cst.parse_expression(new))
            ctx.change(original, "metrics-import", f"import {name} -> import {new}")
        names.append(alias)
    return updated.with_changes(names=names)


def leave_import_from(
    ctx: UpgradeContext, original: cst.ImportFrom, updated: cst.ImportFrom
) -> cst.ImportFrom | cst.RemovalSentinel:
    module = _dotted(updated.module) if updated.module is not None else None
    if module is None:
        return updated
    namespace = next((ns for ns in rules.BUNDLE_FOR_NAMESPACE if module == ns or module.startswith(ns + ".")), None)
    below = module[len(namespace) + 1 :] if namespace is not None and module != namespace else ""
    if below == "metrics" or below.startswith("metrics."):
        # A removed package: every import from it, a star import too, would stop the script.
        return metrics_import(ctx, original, updated, "torchmetrics" + below[len("metrics") :])
    if isinstance(updated.names, cst.ImportStar):
        return updated
    if namespace is not None:  # from pytorch_lightning import TrainResult: leftover_spellings.py
        aliases = list(updated.names)
        results = [a for a in aliases if isinstance(a.name, cst.Name) and a.name.value in RESULT_CLASSES]
        if results and ctx.result_plan.every_mention and all(a.asname is None for a in results):
            # every use of the names is a constructor the class rewrite takes (result_objects.py): the names go
            others = [a for a in aliases if all(a is not r for r in results)]
            why = "self.log instead" if ctx.result_plan.calls else "the file never uses it"
            ctx.change(original, "result-object-log", f"TrainResult/EvalResult import removed ({why})")
            if not others:
                return cst.RemoveFromParent()
            others[-1] = others[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            updated = updated.with_changes(names=others)
            aliases = others
        for alias in aliases:
            if isinstance(alias.name, cst.Name) and alias.name.value in RESULT_CLASSES:
                ctx.todo(original, rules.todo_text("result-object", name=alias.name.value))
    if isinstance(updated.names, cst.ImportStar):  # never (a list of names above): the type, for what follows
        return updated
    if (module == "torchmetrics" or module.startswith("torchmetrics.")) and any(
        isinstance(a.name, cst.Name) and rules.TORCHMETRICS_RENAMED.get(a.name.value, a.name.value) != a.name.value
        for a in updated.names
    ):
        # torchmetrics' own names of 0.6 and before (F1, IoU, ...), which it removed in 0.8: its new ones.
        return metrics_import(ctx, original, updated, module)
    if module == "lightning" and any(a.name.value == "pytorch" for a in updated.names if isinstance(a.name, cst.Name)):
        for a in updated.names:
            if isinstance(a.name, cst.Name) and a.name.value == "pytorch":
                ctx.namespace_aliases[_alias_of(a) or "pytorch"] = "lightning.pytorch"
    if module == "fairscale.nn" or module.startswith("fairscale.nn.checkpoint"):
        if any(isinstance(a.name, cst.Name) and a.name.value == "checkpoint_wrapper" for a in updated.names):
            ctx.fairscale_checkpoint_line = ctx.line(original)
    if namespace is None:
        return updated
    bundle = rules.BUNDLE_FOR_NAMESPACE[namespace]
    kept: list[cst.ImportAlias] = []
    for alias in updated.names:
        if not _moved_name(ctx, original, alias, module, namespace, below, bundle):
            kept.append(alias)
    if len(kept) == len(updated.names):
        return updated
    if not kept:
        return cst.RemoveFromParent()
    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(names=kept)


def _moved_name(
    ctx: UpgradeContext,
    original: cst.ImportFrom,
    alias: cst.ImportAlias,
    module: str,
    namespace: str,
    below: str,
    bundle: str,
) -> bool:
    """One name imported from a Lightning namespace, imported from where 2.x (or the bundle) keeps it: True where it
    goes from this import statement (its new import added, its uses renamed), False where it stays."""
    name = alias.name.value if isinstance(alias.name, cst.Name) else None
    local = _alias_of(alias) or name
    asname = _alias_of(alias)
    if name in rules.REMOVED_CLASSES and below in rules.REMOVED_CLASS_MODULES:
        # The bundle's class under its own name, and every use renamed; a user's own alias stays.
        new, extra = rules.REMOVED_CLASSES[name]
        keep_alias = asname if not extra and asname != new else None
        ctx.add_import(bundle, new, keep_alias)
        if keep_alias is None:
            ctx.renamed[local] = (bundle, new, extra)  # type: ignore[index]
        ctx.change(
            original,
            "bundle-class",
            f"from {module} import {name} -> from {bundle} import {new}" + (f" as {keep_alias}" if keep_alias else ""),
        )
        return True
    if name in rules.LIGHTNING_PLUGINS and below in rules.LIGHTNING_PLUGIN_MODULES:
        new, extra = rules.LIGHTNING_PLUGINS[name]
        ctx.add_import(f"{namespace}.strategies", new, None)
        ctx.renamed[local] = (f"{namespace}.strategies", new, extra)  # type: ignore[index]
        ctx.change(original, "plugin-class", f"from {module} import {name} -> from {namespace}.strategies import {new}")
        if new == "FSDPStrategy":
            ctx.todo(original, rules.todo_text("fsdp-plugin", value=name))
        return True
    moved = rules.MOVED_NAMES.get((below, name))  # type: ignore[arg-type]
    if moved is not None:
        submodule, new = moved
        target = f"{bundle}.{submodule}"
        if new == name:
            ctx.add_import(target, new, asname)
        else:
            ctx.add_import(target, new, None)
            ctx.renamed[local] = (target, new, {})  # type: ignore[index]
        ctx.change(original, "bundle-name", f"from {module} import {name} -> from {target} import {new}")
        return True
    renamed = rules.RENAMED_NAMES.get((below, name))  # type: ignore[arg-type]
    if renamed is not None:
        submodule, new = renamed
        ctx.add_import(f"{namespace}.{submodule}", new, asname)
        if asname is None:
            ctx.renamed[local] = (f"{namespace}.{submodule}", new, {})  # type: ignore[index]
        ctx.change(
            original,
            "renamed-name",
            f"from {module} import {name} -> from {namespace}.{submodule} import {new}",
        )
        return True
    if below in rules.MOVED_MODULES:
        target = f"{namespace}.{rules.MOVED_MODULES[below]}".rstrip(".")
        ctx.add_import(target, name, asname)  # type: ignore[arg-type]
        ctx.change(original, "moved-module", f"from {module} import {name} -> from {target} import {name}")
        return True
    if below in ARGPARSE_MODULES and name in ARGPARSE_FUNCTIONS:
        ctx.add_import("lightning_mgpu.upgrade.trainer_args", name, asname)
        ctx.change(
            original,
            "trainer-argparse",
            f"from {module} import {name} -> from lightning_mgpu.upgrade.trainer_args",
        )
        return True
    if below in ARGPARSE_MODULES and name not in rules.ARGPARSE_KEPT:
        # 1.x's private helpers (_gpus_allowed_type, ...) and what the module imported (str_to_bool, ...): 2.x's
        # module no longer has them, and the bundle has no equivalent; the import stays, with a TODO naming it.
        ctx.todo(original, rules.todo_text("argparse-utility", value=name))
    if name == "TestTubeLogger":
        ctx.todo(original, rules.todo_text("test-tube-logger"))
    if name == "auto_move_data":
        # The module is gone in 2.x: the bundle's legacy_auto_move_data (legacy_move.py) does what 1.x's did, so the
        # decorator stays on forward, whoever calls it; a user's own alias stays, any other use is renamed.
        ctx.add_import(LEGACY_MOVE, "legacy_auto_move_data", asname)
        if asname is None:
            ctx.renamed[local] = (LEGACY_MOVE, "legacy_auto_move_data", {})  # type: ignore[index]
        ctx.change(
            original,
            "auto-move-data",
            f"from {module} import auto_move_data -> from {LEGACY_MOVE} import legacy_auto_move_data",
        )
        return True
    return False


def metrics_import(
    ctx: UpgradeContext, original: cst.ImportFrom, updated: cst.ImportFrom, target: str
) -> cst.ImportFrom:
    """``from pytorch_lightning.metrics[.x] import A`` -> ``from torchmetrics[.x] import A`` (renamed where
    torchmetrics renamed it)."""
    names: list[cst.ImportAlias] = []
    for alias in () if isinstance(updated.names, cst.ImportStar) else updated.names:
        name = alias.name.value if isinstance(alias.name, cst.Name) else ""
        new = rules.TORCHMETRICS_RENAMED.get(name, name)
        if new != name:
            if alias.asname is None:
                ctx.renamed[name] = (target, new, {})
            alias = alias.with_changes(name=cst.Name(new))
        names.append(alias)
    source = _dotted(updated.module)  # type: ignore[arg-type]
    ctx.change(
        original,
        "metrics-import",
        f"from {source} -> from {target} (torchmetrics)" if source != target else f"from {target}: renamed names",
    )
    return updated.with_changes(module=cst.parse_expression(target), names=names or updated.names)


def leave_module(ctx: UpgradeContext, original: cst.Module, updated: cst.Module) -> cst.Module:
    """Add the imports the rewrites need, through libcst's ``AddImportsVisitor``: a name the file already imports is
    not added again, a name from a module the file already imports from joins that statement, and new statements go
    after the file's opening block of imports.

    The visitor runs on that opening block only (its docstring and imports), not on the whole file: a visit of a whole
    module rebuilds every node (the 161 real files took 31 % longer), and the names a file's top imports bind are
    the ones its later code can use (an import inside a function binds nothing at module level).
    """
    updated = import_bundle(ctx, original, updated)
    if not ctx.imports_to_add and not ctx.plain_imports:
        return updated
    items = [ImportItem(module) for module in ctx.plain_imports]
    items += [ImportItem(module, name, asname) for module, name, asname in ctx.imports_to_add]
    # Workaround (libcst 1.x): AddImportsVisitor sorts a module's (name, alias) pairs and raises TypeError where one
    # name is asked for both plainly and under an alias (None < str); each such second request goes in a run of its
    # own. It can go once libcst sorts those pairs with a key that tolerates None.
    runs: list[list[ImportItem]] = []
    for item in items:
        key = (item.module_name, item.obj_name)
        run = next((r for r in runs if all((i.module_name, i.obj_name) != key for i in r)), None)
        if run is None:
            runs.append(run := [])
        run.append(item)
    head = opening_block(updated)
    block = updated.with_changes(body=updated.body[:head])
    for run in runs:
        block = AddImportsVisitor(CodemodContext(), run).transform_module(block)
    return updated.with_changes(body=[*block.body, *updated.body[head:]])


def import_bundle(ctx: UpgradeContext, original: cst.Module, updated: cst.Module) -> cst.Module:
    """``import lightning_mgpu`` where a Trainer gets a bundle strategy by name and nothing imports the bundle: the
    names exist only once it is imported."""
    if not ctx.needs_bundle_import:
        return updated
    for statement in updated.body:
        for small in getattr(statement, "body", []) if isinstance(statement, cst.SimpleStatementLine) else []:
            if isinstance(small, cst.Import) and any(_dotted(a.name) == "lightning_mgpu" for a in small.names):
                return updated
            if (
                isinstance(small, cst.ImportFrom)
                and small.module is not None
                and (_dotted(small.module) or "").startswith("lightning_mgpu")
            ):
                return updated  # importing any part of the package imports (and registers) the package
    if any(module.startswith("lightning_mgpu") for module, _, _ in ctx.imports_to_add):
        return updated
    ctx.findings.append(
        Finding(
            1,
            "import lightning_mgpu added: it registers the bundle's strategy names with Lightning",
            rule="bundle-import",
        )
    )
    line = cst.SimpleStatementLine(
        body=[cst.Import(names=[cst.ImportAlias(name=cst.Name("lightning_mgpu"))])],
        trailing_whitespace=cst.TrailingWhitespace(
            whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(rules.REGISTERS_COMMENT)
        ),
    )
    return insert_after_imports(updated, [line])


def opening_block(module: cst.Module) -> int:
    """How many of ``module``'s first statements are its opening block: its docstring and the imports (with any
    docstring-like strings between them) before the first other statement."""
    last_import = -1
    for index, statement in enumerate(module.body):
        if isinstance(statement, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body
        ):
            last_import = index
        elif last_import >= 0 and not (
            isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.Expr)
        ):
            break
    body = module.body
    if (
        last_import < 0
        and body
        and isinstance(body[0], cst.SimpleStatementLine)
        and isinstance(body[0].body[0], cst.Expr)
    ):
        last_import = 0  # the docstring
    return last_import + 1


def insert_after_imports(module: cst.Module, statements: list[cst.SimpleStatementLine]) -> cst.Module:
    """Insert ``statements`` after the file's opening block of imports (after its docstring when it has none)."""
    at = opening_block(module)
    return module.with_changes(body=[*module.body[:at], *statements, *module.body[at:]])
