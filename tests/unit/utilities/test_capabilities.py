"""Strategy capabilities: what each strategy declares, read from an instance, a class or a registered name."""

from __future__ import annotations

import pytest

import lightning_mgpu  # noqa: F401  (registers the names)
from lightning_mgpu.utilities.capabilities import DEFAULTS, capability


@pytest.mark.parametrize(
    "name,loads_node_batch,under_horovodrun,on_ray",
    [
        ("dp", True, False, False),
        ("ddp2", True, False, False),
        ("horovod", False, True, False),
        ("sharded", False, False, True),
        ("sharded_fsdp2", False, False, True),
        ("ddp", False, False, True),  # Lightning's own: the defaults
    ],
)
def test_each_strategy_declares_what_it_does(
    name: str, loads_node_batch: bool, under_horovodrun: bool, on_ray: bool
) -> None:
    assert capability(name, "loads_node_batch") is loads_node_batch
    assert capability(name, "runs_under_horovodrun") is under_horovodrun
    assert (capability(name, "ray_incompatibility") is None) is on_ray
    assert capability(name, "syncs_across_processes") is (name != "dp")


def test_instances_classes_and_names_agree_and_unknowns_are_refused() -> None:
    from lightning_mgpu.strategies import DataParallelStrategy

    assert (
        capability(DataParallelStrategy, "loads_node_batch")
        is capability(DataParallelStrategy(), "loads_node_batch")
        is True
    )
    assert capability(object(), "install_hint") is DEFAULTS["install_hint"]
    with pytest.raises(KeyError, match="unknown strategy capability 'fast'"):
        capability("dp", "fast")
    with pytest.raises(KeyError, match="'nope' is not registered"):
        capability("nope", "loads_node_batch")
