"""The libcst transformer behind ``lightning-mgpu upgrade``: one source file in, the 2.x source and a list of what
changed and what needs a hand out. Comments and formatting survive (a concrete syntax tree, not an AST).

The rules are in :mod:`lightning_mgpu.upgrade.rules`. Each rewrite is idempotent: its input spelling is gone from its
output, and a TODO comment is added only where the same comment is not there yet.

:class:`UpgradeTransformer` is the dispatcher: it contains each construct's failure (an ``internal-error`` TODO
there, the rest of the file converted), places the TODO comments above their statements, and routes each node to its
rule family, a module of its own that receives the shared :class:`~lightning_mgpu.upgrade.context.UpgradeContext`:

- :mod:`~lightning_mgpu.upgrade.imports`: imports, and the imports to add at the end;
  :mod:`~lightning_mgpu.upgrade.import_fallbacks`: try/except ImportError blocks that import one name two ways;
- :mod:`~lightning_mgpu.upgrade.attributes`: attribute chains, renamed names, annotations;
- :mod:`~lightning_mgpu.upgrade.calls`: calls (routed on to :mod:`~lightning_mgpu.upgrade.trainer_call` and
  :mod:`~lightning_mgpu.upgrade.metric_calls`);
- :mod:`~lightning_mgpu.upgrade.trainer_rewrite` (with :mod:`~lightning_mgpu.upgrade.trainer_devices` and
  :mod:`~lightning_mgpu.upgrade.trainer_kwargs`): the Trainer's keyword arguments, wherever they are written;
- :mod:`~lightning_mgpu.upgrade.statements`: assignments and statements rewritten as a whole;
- :mod:`~lightning_mgpu.upgrade.classes`: classes and their hooks;
- :mod:`~lightning_mgpu.upgrade.findings`: what a file's upgrade gives back, and the checks around it;
  :mod:`~lightning_mgpu.upgrade.nodes`: the small node helpers the families share.

Rule ids of its own: internal-error (through the context), and the note fairscale-checkpoint that
:func:`upgrade_source` adds where the file imports fairscale's ``checkpoint_wrapper``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from lightning_mgpu.upgrade import (
    attributes,
    calls,
    classes,
    import_fallbacks,
    imports,
    metric_calls,
    rules,
    statements,
)
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.era import epoch_hooks_train_only
from lightning_mgpu.upgrade.findings import (
    FileResult,
    Finding,
    UpgradeError,
    check_compiles,
    namespace_of,
    syntax_error,
)
from lightning_mgpu.upgrade.hooks import epoch_end_plan
from lightning_mgpu.upgrade.manual_optimization import plan as manual_plan
from lightning_mgpu.upgrade.metric_containers import container_metric_logs
from lightning_mgpu.upgrade.metrics import class_counts
from lightning_mgpu.upgrade.nodes import code as _code
from lightning_mgpu.upgrade.result_objects import plan as result_plan
from lightning_mgpu.upgrade.scopes import FileFacts, Scope
from lightning_mgpu.upgrade.trainer_kwargs import TrainerArgs
from lightning_mgpu.upgrade.trainer_owners import BY_NAME, trainer_owners
from lightning_mgpu.upgrade.trainer_rewrite import rewrite_trainer_args
from lightning_mgpu.upgrade.traverse import read_only_visit
from lightning_mgpu.upgrade.tuner import tune_plan

__all__ = [
    "FileResult",
    "Finding",
    "TrainerArgs",
    "UpgradeError",
    "UpgradeTransformer",
    "namespace_of",
    "rewrite_trainer_args",
    "syntax_error",
    "upgrade_source",
]

log = logging.getLogger(__name__)

_STATEMENTS = (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef, cst.If, cst.For, cst.While, cst.With, cst.Try)


class UpgradeTransformer(cst.CSTTransformer):
    """Rewrites one module; :func:`upgrade_source` runs it."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, facts: FileFacts, namespace: str, check_code: bool = False) -> None:
        super().__init__()
        #: the state and bookkeeping the rule families share (findings, pending comments, scopes, imports, ...)
        self.ctx = UpgradeContext(facts, namespace, self.get_metadata)
        #: write out each rewritten statement as it is left, and keep the original of one libcst cannot write (the
        #: second pass over a file whose first pass built such a node: slower, so not the default)
        self.check_code = check_code
        self._first_statement: cst.CSTNode | None = None
        self._header_comments: set[str] = set()
        self._visit_failed: set[int] = set()  # ids of the nodes whose visit_* raised
        #: a notebook's module-level trainer names whose tuner flags no cell could run (tuner.py)
        self.notebook_unused: frozenset[str] = frozenset()

    # -- what upgrade_source reads and sets --------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        return self.ctx.namespace

    @property
    def findings(self) -> list[Finding]:
        return self.ctx.findings

    @property
    def renamed(self) -> dict[str, tuple[str, str, dict[str, str]]]:
        return self.ctx.renamed

    @property
    def namespace_aliases(self) -> dict[str, str]:
        return self.ctx.namespace_aliases

    @property
    def fairscale_checkpoint_line(self) -> int | None:
        return self.ctx.fairscale_checkpoint_line

    def add_metric_names(self, names: Sequence[str]) -> None:
        """torchmetrics names imported elsewhere (a notebook's other cells), known as if this source imported them."""
        metric_calls.add_metric_names(self.ctx, names)

    # -- failure containment and the TODO comments -----------------------------------------------------------------

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _STATEMENTS):
            self.ctx.pending.append([])
        if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1 and isinstance(node.body[0], cst.Assign):
            assign = node.body[0]
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
                if isinstance(assign.value, cst.Call):
                    self.ctx.assigned_calls[assign.value] = assign.targets[0].target.value
        if isinstance(node, cst.Module):
            # libcst keeps the comments above a file's first statement in Module.header, not in its leading_lines:
            # a TODO written there by an earlier run is found here, so a second run does not write it again.
            self._first_statement = node.body[0] if node.body else None
            self._header_comments = {line.comment.value for line in node.header if line.comment is not None}
            self.ctx.module_comments = []
            self.ctx.class_counts = class_counts(node)
            self.ctx.manual = manual_plan(node)
            self.ctx.epoch_ends = epoch_end_plan(
                node, self.ctx.manual.classes | {c for c, _ in self.ctx.manual.subclasses}
            )
            self.ctx.tune = tune_plan(node, self.notebook_unused, self.ctx.is_trainer)
            self.ctx.result_plan = result_plan(node)
            self.ctx.epoch_hooks_train_only = epoch_hooks_train_only(node)
            self.ctx.container_metric_logs = container_metric_logs(node)
        if isinstance(node, (cst.Module, cst.FunctionDef)):
            # A function the pre-pass failed on has no scope of its own: it knows nothing about its names.
            self.ctx.scopes.append(
                self.ctx.facts.scopes.get(node) or Scope(node, self.ctx.scopes[-1] if self.ctx.scopes else None)
            )
        if node in self.ctx.facts.failed:
            self.ctx.internal_error(node, self.ctx.facts.failed[node])
        # Whatever one construct raises stays with that construct: a TODO there, its children left as they are, and
        # the rest of the file converted (each visit_* records its state only once it cannot fail any more).
        try:
            return super().on_visit(node)
        except Exception as err:  # noqa: BLE001
            self.ctx.internal_error(node, err)
            self._visit_failed.add(id(node))
            return False

    def on_leave(self, original_node: cst.CSTNode, updated_node: Any) -> Any:
        if id(original_node) in self._visit_failed:
            result = updated_node  # its visit raised before recording anything: its leave is skipped too
        else:
            try:
                result = super().on_leave(original_node, updated_node)
            except Exception as err:  # noqa: BLE001
                self.ctx.internal_error(original_node, err)
                result = updated_node  # its children converted, its own rewrite left out
        if self.check_code and isinstance(original_node, _STATEMENTS) and result is not original_node:
            try:
                for written in result.nodes if isinstance(result, cst.FlattenSentinel) else [result]:
                    if isinstance(written, cst.CSTNode):
                        _code(written)
            except Exception as err:  # noqa: BLE001
                self.ctx.internal_error(original_node, err)
                result = original_node  # the statement as it was, with the TODO
        if isinstance(original_node, (cst.Module, cst.FunctionDef)):
            self.ctx.scopes.pop()
        if isinstance(original_node, cst.Module) and self.ctx.module_comments:
            header = [line.comment.value for line in result.header if line.comment is not None]
            new = [f"# {t}" for t in dict.fromkeys(self.ctx.module_comments) if f"# {t}" not in header]
            result = result.with_changes(header=[*result.header, *(cst.EmptyLine(comment=cst.Comment(c)) for c in new)])
        if isinstance(original_node, _STATEMENTS):
            comments = self.ctx.pending.pop()
            first = result.nodes[0] if isinstance(result, cst.FlattenSentinel) and result.nodes else result
            if comments and isinstance(first, _STATEMENTS):
                present = {line.comment.value for line in first.leading_lines if line.comment is not None}
                if original_node is self._first_statement:
                    present |= self._header_comments
                new_lines = [
                    cst.EmptyLine(indent=True, comment=cst.Comment(f"# {t}"))
                    for t in dict.fromkeys(comments)
                    if f"# {t}" not in present
                ]
                if new_lines:
                    first = first.with_changes(leading_lines=[*first.leading_lines, *new_lines])
                    if isinstance(result, cst.FlattenSentinel):
                        result = cst.FlattenSentinel([first, *result.nodes[1:]])
                    else:
                        result = first
        return result

    # -- routes to the rule families -------------------------------------------------------------------------------

    def visit_Import(self, node: cst.Import) -> None:
        imports.visit_import(self.ctx, node)

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import:
        return imports.leave_import(self.ctx, original, updated)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        imports.visit_import_from(self.ctx, node)

    def leave_ImportFrom(
        self, original: cst.ImportFrom, updated: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        return imports.leave_import_from(self.ctx, original, updated)

    def visit_Try(self, node: cst.Try) -> None:
        import_fallbacks.visit_try(self.ctx, node)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> bool:
        return import_fallbacks.visit_except_handler(self.ctx, node)

    def leave_Try(
        self, original: cst.Try, updated: cst.Try
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        return import_fallbacks.leave_try(self.ctx, original, updated)

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return imports.leave_module(self.ctx, original, updated)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self.ctx.fstring_quotes.append(node.start)

    def leave_FormattedString(self, original: cst.FormattedString, updated: cst.FormattedString) -> cst.FormattedString:
        self.ctx.fstring_quotes.pop()
        return updated

    def visit_Attribute(self, node: cst.Attribute) -> None:
        attributes.visit_attribute(self.ctx, node)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        return attributes.leave_attribute(self.ctx, original, updated)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return attributes.leave_name(self.ctx, original, updated)

    def leave_Annotation(self, original: cst.Annotation, updated: cst.Annotation) -> cst.Annotation:
        return attributes.leave_annotation(self.ctx, original, updated)

    def visit_Call(self, node: cst.Call) -> None:
        attributes.visit_call(self.ctx, node)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        return calls.leave_call(self.ctx, original, updated)

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        return statements.leave_assign(self.ctx, original, updated)

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        return statements.leave_simple_statement_line(self.ctx, original, updated)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        classes.visit_class_def(self.ctx, node)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        return classes.leave_class_def(self.ctx, original, updated)

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef | cst.RemovalSentinel:
        return classes.leave_function_def(self.ctx, original, updated)


def upgrade_source(
    source: str,
    namespace: str | None = None,
    aliases: dict[str, str] | None = None,
    metric_names: Sequence[str] = (),
    renamed: dict[str, tuple[str, str, dict[str, str]]] | None = None,
    notebook_unused: frozenset[str] = frozenset(),
    submodules: dict[str, tuple[str, str]] | None = None,
    notebook_trainers: frozenset[str] = frozenset(),
) -> FileResult:
    """Upgrade one file's source.

    Args:
        source: Python source of a Lightning 1.x script or module.
        namespace: the Lightning tree that added imports come from (default: the one ``source`` imports).
        aliases: names that stand for a Lightning tree without ``source`` importing them (a notebook's earlier
            cells: ``{"pl": "pytorch_lightning"}``).
        metric_names: torchmetrics names imported where ``source`` does not show it (a notebook's other cells:
            ``from torchmetrics import Accuracy``), so that ``Accuracy()`` converts as in one file.
        renamed: names renamed by imports ``source`` does not show (a notebook's earlier cells:
            ``from pytorch_lightning.plugins import DDPPlugin``), as :attr:`FileResult.renamed` gives them.
        notebook_unused: a notebook's module-level trainer names whose tuner flags no cell could run
            (:func:`~lightning_mgpu.upgrade.tuner.notebook_unused_trainers`).
        submodules: names that stand for a Lightning subpackage without ``source`` importing them (a notebook's
            other cells: ``import pytorch_lightning.callbacks as cb`` gives ``{"cb": ("pytorch_lightning",
            "callbacks")}``), so that ``cb.GPUStatsMonitor()`` converts as in one file.
        notebook_trainers: a notebook's module-level names that other cells bind to a Trainer
            (:func:`~lightning_mgpu.upgrade.trainer_owners.notebook_trainers`).

    Returns:
        The upgraded source (identical when there was nothing to do) and its findings, with original line numbers.

    Raises:
        libcst.ParserSyntaxError: the source does not parse.
        UpgradeError: the rewritten source does not compile where the source did (a bug of the tool: the caller leaves
            the file as it was). An exception in one construct's rewrite is not raised: the construct stays as it
            was, with an ``internal-error`` TODO, and the rest of the file converts.

    Example::

        result = upgrade_source('trainer = Trainer(gpus=2, accelerator="dp")\\n')
        result.source  # 'trainer = Trainer(accelerator="gpu", devices=2, strategy="dp")\\n'
    """
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)  # the module is this call's own: no copy needed
    facts = FileFacts()
    read_only_visit(wrapper.module, facts)
    try:
        # Which attribute owners are Trainers, by where they came from (trainer_owners.py).
        owners = trainer_owners(wrapper.module, notebook_trainers)
    except Exception:  # noqa: BLE001  (the file still converts, its trainers known by their names alone)
        log.debug("the trainer-owner pre-pass failed; trainers are known by their names", exc_info=True)
        owners = BY_NAME
    transformer = UpgradeTransformer(facts, namespace or namespace_of(source))
    transformer.ctx.is_trainer = owners
    transformer.namespace_aliases.update(aliases or {})
    transformer.renamed.update(renamed or {})
    transformer.add_metric_names(metric_names)
    transformer.notebook_unused = notebook_unused
    transformer.ctx.submodule_aliases.update(submodules or {})
    new = wrapper.visit(transformer)
    try:
        code = new.code
    except Exception:  # noqa: BLE001  (a rewrite built a node libcst cannot write out)
        log.debug("a rewrite cannot be written out; again, statement by statement", exc_info=True)
        transformer = UpgradeTransformer(facts, transformer.namespace, check_code=True)
        transformer.ctx.is_trainer = owners
        transformer.namespace_aliases.update(aliases or {})
        transformer.renamed.update(renamed or {})
        transformer.add_metric_names(metric_names)
        transformer.notebook_unused = notebook_unused
        transformer.ctx.submodule_aliases.update(submodules or {})
        new = wrapper.visit(transformer)
        code = new.code
    findings = sorted(transformer.findings, key=lambda f: (f.line, f.todo))
    if transformer.fairscale_checkpoint_line is not None:
        findings.append(
            Finding(transformer.fairscale_checkpoint_line, rules.note_text("fairscale-checkpoint"), note=True)
        )
    if code != source:
        check_compiles(source, code)
    return FileResult(code, findings, dict(transformer.renamed))
