"""``horovod``: Horovod ring all-reduce for Lightning 2.x, under ``horovodrun`` or self-launched.

``strategy.py`` is the Lightning strategy; ``environment.py`` Horovod's ranks as a ``ClusterEnvironment``;
``script_launcher.py`` the self-launch (the script runs again per worker); ``runtime.py`` the thin layer over
``horovod.torch`` (lazy import, controller checks, optimizer hooks). The patched source build of horovod 0.28.1 is a
tool: :mod:`lightning_mgpu.tools.build_horovod`.
"""

from lightning_mgpu.strategies.horovod.environment import HorovodEnvironment
from lightning_mgpu.strategies.horovod.strategy import HorovodStrategy

__all__ = ["HorovodEnvironment", "HorovodStrategy"]
