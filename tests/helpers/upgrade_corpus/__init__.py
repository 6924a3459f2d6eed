"""Lightning 1.x scripts, as users wrote them, for ``lightning-mgpu upgrade``'s tests.

Written for this repository in the shapes of Lightning 1.6/1.9's own examples that used dp, ddp2, horovod and
ddp_sharded (the GAN with two optimizers, the multi-node ddp2 demo, the sharded plugin) and of the seed guide's
snippets. Each runs on synthetic data. ``CPU_RUNNABLE`` names those that train on 2 CPU processes once converted,
with the strategy each names (they convert without a TODO: a TODO marks code a person must finish first); the others
need GPUs, and are built with ``accelerator="cpu"`` substituted.
"""

CPU_RUNNABLE = {
    "ddp_cpu_processes.py": "ddp",
    "sharded_plugin_cpu.py": "sharded",
    "horovod_processes.py": "horovod",
    "ddp2_cpu.py": "ddp2",
}
GPU_ONLY = {
    "gan_dp.py": "dp",
    "seed_guide.py": "dp",
    "sharded_gpus.py": "ddp_sharded",
    "multinode_ddp2.py": "ddp2",
}
