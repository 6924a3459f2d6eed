"""Glue to the cluster launchers users already run; the bundle has no cluster layer of its own.

- :mod:`~lightning_mgpu.launchers.ray_train`: a Lightning training function on Ray Train's ``TorchTrainer``.
- :mod:`~lightning_mgpu.launchers.torchrun`: a process group of its own for each round torchrun restarts.
- :mod:`~lightning_mgpu.launchers.rendezvous`: a rendezvous that fails within a bound, naming the address.

Otherwise torchrun, SLURM and horovodrun need no glue: Lightning's ``TorchElasticEnvironment`` and
``SLURMEnvironment`` and the bundle's ``HorovodEnvironment`` read what they set (docs/multinode.md).
"""

#: Seconds to reach MASTER_ADDR:MASTER_PORT and for every process to join (a light constant: command lines show it).
DEFAULT_RENDEZVOUS_TIMEOUT_S = 120.0
