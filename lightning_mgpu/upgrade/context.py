"""The state one file's upgrade shares between the transformer's rule families, and its bookkeeping: the findings,
the TODO and note comments waiting for the statement being visited, the scopes, the classes being visited, the
imports to add, the names this file renamed, and the plans the pre-passes made for the whole module.

:class:`UpgradeContext` is made by :class:`~lightning_mgpu.upgrade.transform.UpgradeTransformer` (the dispatcher),
which hands it to each family's handler: one object with every piece of shared state in view, instead of a mixin per
family over one class's attributes. It emits one rule of its own, ``internal-error`` (a construct whose rewrite raised).
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Callable
from typing import Any

import libcst as cst
from libcst.metadata import PositionProvider

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.findings import Finding
from lightning_mgpu.upgrade.hooks import HookShape
from lightning_mgpu.upgrade.manual_optimization import ManualPlan
from lightning_mgpu.upgrade.nodes import node_kind
from lightning_mgpu.upgrade.result_objects import ResultPlan
from lightning_mgpu.upgrade.scopes import FileFacts, Scope
from lightning_mgpu.upgrade.trainer_owners import BY_NAME, TrainerOwners
from lightning_mgpu.upgrade.tuner import TunePlan

#: The transformer's logger, under the name it always had (the module that held all of it).
log = logging.getLogger("lightning_mgpu.upgrade.transform")


class UpgradeContext:
    """What the rule families of one upgrade share; ``metadata`` is the transformer's ``get_metadata``."""

    def __init__(self, facts: FileFacts, namespace: str, metadata: Callable[..., Any]) -> None:
        self.facts = facts
        self.metadata = metadata
        self.namespace = namespace  # the Lightning tree the file imports: what added imports come from
        self.findings: list[Finding] = []
        self.pending: list[list[str]] = []  # comment texts for the statement being visited, innermost last
        self.scopes: list[Scope] = []
        self.class_depth = 0
        self.class_has_optimizer_idx: list[bool] = []
        self.class_manual: list[str] = []  # what manual_optimization.py makes of the class (ManualPlan.kind)
        self.class_refusal: list[str] = []  # why it keeps the optimizer-idx TODO (ManualPlan.why), or ""
        self.class_per_sample: list[set[str]] = []  # per enclosing class: its steps with per-sample outputs
        #: per enclosing class: its 1.x step ends that convert -> how (classes.py's step_end_plan)
        self.class_step_ends: list[dict[str, str]] = []
        self.manual = ManualPlan(frozenset())
        self.epoch_ends: dict[str, dict[str, HookShape]] = {}
        #: local name -> (bundle module, new name, extra call kwargs) for the removed classes imported in this file.
        self.renamed: dict[str, tuple[str, str, dict[str, str]]] = {}
        #: aliases of the Lightning namespaces: {"pl": "pytorch_lightning", "L": "lightning.pytorch"}.
        self.namespace_aliases: dict[str, str] = {}
        #: local names of the namespaces' subpackages (``from pytorch_lightning import loggers as pl_loggers``,
        #: ``import pytorch_lightning.plugins as plugins``): {"pl_loggers": ("pytorch_lightning", "loggers")}.
        self.submodule_aliases: dict[str, tuple[str, str]] = {}
        self.imports_to_add: dict[tuple[str, str, str | None], None] = {}  # (module, name, asname), in order
        self.plain_imports: dict[str, None] = {}  # ``import X`` statements to add
        self.fairscale_checkpoint_line: int | None = None
        self.needs_bundle_import = False  # a bundle strategy name is passed as a string: it must be registered
        self.datamodules: set[str] = set()  # classes in this file that derive from a LightningDataModule
        self.torchmetrics_imports: list[tuple[str, str]] = []  # (module, name) of metrics imported by this file
        self.fstring_quotes: list[str] = []  # the opening of each f-string the visit is inside (f", f''')
        self.called_names: set[int] = set()  # ids of the Name nodes a call's rewrite handles (attributes.visit_call)
        self.attribute_names: set[int] = set()  # ids of the Name nodes that are an attribute's attr
        self.lightning_class: list[bool] = []  # per enclosing class: whether it may be a Lightning class
        self.collapsed_handlers: set[int] = set()  # ids of the except ImportError: handlers that go (import_fallbacks)
        self.failed: set[int] = set()  # ids of the nodes whose rewrite raised (each gets one internal-error TODO)
        self.module_comments: list[str] | None = None  # TODOs with no statement to sit above: the file's header
        self.class_counts: dict[int, str] = {}  # id(call) -> the class count its context offers (metrics.py)
        self.tune = TunePlan()  # where auto_lr_find/auto_scale_batch_size go (tuner.py)
        self.result_plan = ResultPlan()  # the TrainResult/EvalResult the class rewrite takes (result_objects.py)
        #: whether the file's 1.x ran on_epoch_start/on_epoch_end in training epochs only (era.py: 1.0-1.1 code)
        self.epoch_hooks_train_only = False
        #: ids of the self.log(name, metric) calls that log a Metric kept in a plain container (metric_containers.py)
        self.container_metric_logs: frozenset[int] = frozenset()
        self.assigned_calls: dict[cst.Call, str] = {}  # name = Call(...) statements: the call -> the name
        self.last_checkpoint_names: dict[cst.Call, str] = {}  # ModelCheckpoint(prefix=P) -> "P-last" (1.x's)
        #: whether an attribute's owner (an original node) is a Trainer: trainer_owners.py, set by upgrade_source
        self.is_trainer: TrainerOwners = BY_NAME

    # -- bookkeeping ---------------------------------------------------------------------------------------------

    def line(self, node: cst.CSTNode) -> int:
        try:
            return self.metadata(PositionProvider, node).start.line
        except KeyError:
            return 0

    def change(self, node: cst.CSTNode, rule: str, message: str) -> None:
        """A rewrite made at ``node``, under ``rule`` (an id of :data:`rules.RULES`)."""
        self.findings.append(Finding(self.line(node), message, rule=rule))

    def todo(self, node: cst.CSTNode, text: str, detail: str = "") -> None:
        """A TODO comment (``text`` from :func:`rules.todo_text`) above the statement being visited; ``detail`` (this
        TODO's own reason, too long for its line) follows it as indented comment lines."""
        text = rules.one_line(text)  # a comment holds no line break: libcst would refuse the whole file
        self.findings.append(Finding(self.line(node), text, todo=True))
        lines = [text, *(f"  {line}" for line in textwrap.wrap(rules.one_line(detail), 100))]
        if self.pending:
            self.pending[-1].extend(lines)
        elif self.module_comments is not None:
            self.module_comments.extend(lines)

    def note(self, node: cst.CSTNode, text: str) -> None:
        text = rules.one_line(text)
        self.findings.append(Finding(self.line(node), text, note=True))
        if self.pending:
            self.pending[-1].append(text)

    def internal_error(self, node: cst.CSTNode, err: BaseException) -> None:
        """``node``'s rewrite raised: a TODO at it names the exception, and the rest of the file still converts."""
        if id(node) in self.failed:
            return
        self.failed.add(id(node))
        log.debug(
            "lightning-mgpu upgrade failed on a %s at line %s", type(node).__name__, self.line(node), exc_info=err
        )
        self.todo(node, rules.todo_text("internal-error", node=node_kind(node), error=type(err).__name__))

    def add_import(self, module: str, name: str, asname: str | None) -> None:
        self.imports_to_add[(module, name, asname)] = None

    # -- what the pre-pass found about a name ----------------------------------------------------------------------

    def is_trainer_dict(self, name: str) -> bool:
        owner = self.scopes[-1].lookup(name)
        return owner is not None and (owner.node, name) in self.facts.trainer_dicts

    def is_strategy_var(self, name: str) -> bool:
        owner = self.scopes[-1].lookup(name)
        return owner is not None and (owner.node, name) in self.facts.strategy_vars
