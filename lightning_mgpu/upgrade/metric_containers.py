"""A torchmetrics Metric kept in a plain list, tuple or dict and logged as an object (TODO ``metric-log-container``).

Up to 1.3, ``self.log(name, metric)`` took the Metric object wherever the module kept it, and logged
``metric.compute()`` at the epoch's end (then reset it). Since 1.4, and in 2.x, ``self.log`` looks the Metric up among
the LightningModule's submodules and raises ``MisconfigurationException`` ("Could not find the LightningModule
attribute for the torchmetrics.Metric logged") where it is not one: a Metric in a plain list, tuple or dict is not
registered. The conversion cannot register it without changing the module's structure, so the log call gets a TODO.

Found (a pre-pass over the file, :func:`container_metric_logs`): in a class, ``self.X = [...]`` / ``(...)`` /
``{...}`` holding a metric's constructor call (a name of ``torchmetrics`` or ``pytorch_lightning.metrics``, or a
classification metric's class name), and ``self.log(name, m)`` inside ``for ... in self.X`` (or ``self.X.items()``,
``self.X.values()``) with ``m`` a name the loop binds.
"""

from __future__ import annotations

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.scopes import dotted
from lightning_mgpu.upgrade.traverse import read_only_visit

#: The metric classes a bare name may be (the classification ones, imported from torchmetrics).
_METRIC_CLASSES = frozenset(name for name in rules.TORCHMETRICS_TASK if name[:1].isupper())


def _is_metric_call(node: cst.Call) -> bool:
    name = dotted(node.func) or ""
    return (
        name.startswith("torchmetrics.")
        or ".metrics." in f".{name}"
        or name.rsplit(".", 1)[-1] in _METRIC_CLASSES
        or name.startswith("Legacy")  # the inferred-task stand-ins (legacy_metrics.py)
    )


def _self_attr(node: cst.BaseExpression) -> str | None:
    """``X`` of ``self.X``; None for anything else."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def _containers(cls: cst.ClassDef) -> set[str]:
    """The attributes the class assigns a list, tuple, set or dict display holding a metric's constructor call."""
    found: set[str] = set()

    class Assigns(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if len(node.targets) != 1 or not isinstance(node.value, (cst.List, cst.Tuple, cst.Set, cst.Dict)):
                return
            attr = _self_attr(node.targets[0].target)
            if attr is None:
                return
            calls: list[cst.Call] = []

            class Calls(cst.CSTVisitor):
                def visit_Call(self, call: cst.Call) -> None:
                    calls.append(call)

            read_only_visit(node.value, Calls())
            if any(_is_metric_call(c) for c in calls):
                found.add(attr)

    read_only_visit(cls, Assigns())
    return found


def _bound_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for e in target.elements for n in _bound_names(e.value)}
    return set()


def _iterated_attr(node: cst.BaseExpression) -> str | None:
    """``X`` of ``self.X``, ``self.X.items()`` or ``self.X.values()``."""
    if (
        isinstance(node, cst.Call)
        and not node.args
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in ("items", "values")
    ):
        return _self_attr(node.func.value)
    return _self_attr(node)


def container_metric_logs(module: cst.Module) -> frozenset[int]:
    """The ids of the ``self.log(name, m)`` calls that log a Metric taken from a plain container (module docstring).

    Args:
        module: the parsed file.

    Returns:
        The ids of those Call nodes.
    """
    found: set[int] = set()

    class Classes(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            containers = _containers(node)
            if containers:
                found.update(_logs(node, containers))

    read_only_visit(module, Classes())
    return frozenset(found)


def _logs(cls: cst.ClassDef, containers: set[str]) -> set[int]:
    found: set[int] = set()
    bound: list[set[str]] = []

    class Logs(cst.CSTVisitor):
        def visit_For(self, node: cst.For) -> None:
            # Decision: only a loop straight over the container binds a metric (a copy or a zip is not followed).
            attr = _iterated_attr(node.iter)
            bound.append(_bound_names(node.target) if attr in containers else set())

        def leave_For(self, original_node: cst.For) -> None:
            bound.pop()

        def visit_Call(self, node: cst.Call) -> None:
            if _self_attr(node.func) != "log" or not any(bound):
                return
            value = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "value"), None)
            positional = [a.value for a in node.args if a.keyword is None]
            value = value if value is not None else (positional[1] if len(positional) > 1 else None)
            if isinstance(value, cst.Name) and any(value.value in names for names in bound):
                found.add(id(node))

    read_only_visit(cls, Logs())
    return found
