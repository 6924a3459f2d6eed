"""What ``lightning-mgpu upgrade`` rewrites: Lightning 1.x spellings and their 2.x + lightning_mgpu equivalents.

Tables only (no libcst here), so that docs/upgrade.md and the tests read the same facts as the transformer.
"""

from __future__ import annotations

#: The Lightning namespaces a script may import, and the bundle module that serves each (the user's namespace stays).
BUNDLE_FOR_NAMESPACE = {"pytorch_lightning": "lightning_mgpu.pl", "lightning.pytorch": "lightning_mgpu"}

#: 1.x ``accelerator=`` / ``distributed_backend=`` / ``plugins=`` strings that named a strategy -> 2.x ``strategy=``.
#: ``ddp_cpu`` was ddp on CPU processes.
STRATEGY_STRINGS = {
    "dp": "dp",
    "ddp": "ddp",
    "ddp_spawn": "ddp_spawn",
    "ddp2": "ddp2",
    "horovod": "horovod",
    "ddp_cpu": "ddp",
    "ddp_sharded": "ddp_sharded",
    "ddp_sharded_spawn": "ddp_sharded_spawn",
}

#: Strategy names that only exist once lightning_mgpu is imported: a script that passes one gets ``import lightning_mgpu``.
BUNDLE_STRATEGY_NAMES = frozenset(
    {
        "dp",
        "ddp2",
        "horovod",
        "ddp_sharded",
        "ddp_sharded_spawn",
        "ddp_sharded_find_unused_parameters_false",
        "ddp_sharded_spawn_find_unused_parameters_false",
        "sharded",
        "sharded_spawn",
        "sharded_fsdp2",
        "sharded_fsdp2_spawn",
    }
)
REGISTERS_COMMENT = "# registers dp, ddp2, horovod and ddp_sharded with Lightning"

#: Removed 1.x strategy and plugin classes -> (the bundle's class, extra keyword arguments at call sites).
REMOVED_CLASSES: dict[str, tuple[str, dict[str, str]]] = {
    "DataParallelStrategy": ("DataParallelStrategy", {}),
    "DDPShardedStrategy": ("ShardedStrategy", {}),
    "DDPSpawnShardedStrategy": ("ShardedStrategy", {"start_method": '"spawn"'}),
    "HorovodStrategy": ("HorovodStrategy", {}),
    "DDP2Strategy": ("DDP2Strategy", {}),
    # Lightning <= 1.5 called them plugins.
    "DataParallelPlugin": ("DataParallelStrategy", {}),
    "DDPShardedPlugin": ("ShardedStrategy", {}),
    "DDPSpawnShardedPlugin": ("ShardedStrategy", {"start_method": '"spawn"'}),
    "HorovodPlugin": ("HorovodStrategy", {}),
    "DDP2Plugin": ("DDP2Strategy", {}),
}
#: Modules (below the namespace) that held them in 1.x.
REMOVED_CLASS_MODULES = (
    "strategies",
    "plugins",
    "plugins.training_type",
    "strategies.sharded",
    "strategies.sharded_spawn",
    "strategies.dp",
    "strategies.horovod",
    "strategies.ddp2",
    "plugins.training_type.sharded",
    "plugins.training_type.sharded_spawn",
    "plugins.training_type.dp",
    "plugins.training_type.horovod",
    "plugins.training_type.ddp2",
)

#: Other removed names the bundle provides: (1.x module below the namespace, name) -> (bundle submodule, new name).
MOVED_NAMES = {
    ("loggers", "NeptuneLogger"): ("loggers", "NeptuneLogger"),
    ("loggers.neptune", "NeptuneLogger"): ("loggers", "NeptuneLogger"),
    ("callbacks", "GPUStatsMonitor"): ("callbacks", "GPUUtilizationMonitor"),
    ("callbacks.gpu_stats_monitor", "GPUStatsMonitor"): ("callbacks", "GPUUtilizationMonitor"),
}

#: 1.x precision spellings -> 2.x.
PRECISION = {"16": "16-mixed", "bf16": "bf16-mixed"}

#: Trainer arguments renamed in 2.0, where the value carries over.
RENAMED_ARGS = {"replace_sampler_ddp": "use_distributed_sampler"}

#: Trainer arguments removed in 2.0 that this tool cannot rewrite: the TODO's text says the 2.x way.
REMOVED_ARGS = {
    "tpu_cores": 'tpu_cores is gone: use accelerator="tpu", devices=N',
    "ipus": 'ipus is gone: use accelerator="ipu", devices=N (Graphcore\'s lightning-graphcore package)',
    "auto_select_gpus": 'auto_select_gpus is gone: use devices="auto" or pick free GPUs with CUDA_VISIBLE_DEVICES',
    "track_grad_norm": "track_grad_norm is gone: log lightning.pytorch.utilities.grad_norm(self, norm_type=2) in on_before_optimizer_step",
    "auto_lr_find": "auto_lr_find is gone: use lightning.pytorch.tuner.Tuner(trainer).lr_find(model)",
    "auto_scale_batch_size": "auto_scale_batch_size is gone: use lightning.pytorch.tuner.Tuner(trainer).scale_batch_size(model)",
    "stochastic_weight_avg": "stochastic_weight_avg is gone: add the StochasticWeightAveraging callback",
    "move_metrics_to_cpu": "move_metrics_to_cpu is gone: move tensors yourself before logging them",
    "multiple_trainloader_mode": "multiple_trainloader_mode is gone: wrap the loaders in CombinedLoader(loaders, mode=...)",
    "reload_dataloaders_every_epoch": "reload_dataloaders_every_epoch is gone: use reload_dataloaders_every_n_epochs=1",
    "progress_bar_refresh_rate": "progress_bar_refresh_rate is gone: pass callbacks=[TQDMProgressBar(refresh_rate=N)]",
    "flush_logs_every_n_steps": "flush_logs_every_n_steps is gone: pass flush_logs_every_n_steps to the logger",
    "terminate_on_nan": "terminate_on_nan is gone: use detect_anomaly=True, or check the loss in training_step",
    "log_gpu_memory": "log_gpu_memory is gone: add lightning_mgpu's GPUUtilizationMonitor or DeviceStatsMonitor",
    "prepare_data_per_node": "prepare_data_per_node moved to the LightningModule/DataModule attribute prepare_data_per_node",
    "amp_level": 'amp_level was apex\'s: use precision="16-mixed" (native AMP)',
}

#: The module hooks that lost ``optimizer_idx`` (and what else each lost) in 2.0.
HOOK_DROPPED_PARAMS = {
    "training_step": ("optimizer_idx",),
    "optimizer_zero_grad": ("optimizer_idx",),
    "optimizer_step": ("optimizer_idx", "on_tpu", "using_native_amp", "using_lbfgs"),
    "backward": ("optimizer", "optimizer_idx"),
}
STEP_END_HOOKS = ("training_step_end", "validation_step_end", "test_step_end")
EPOCH_END_HOOKS = {
    "training_epoch_end": "on_train_epoch_end",
    "validation_epoch_end": "on_validation_epoch_end",
    "test_epoch_end": "on_test_epoch_end",
}

TODO_PREFIX = "# TODO(lightning-mgpu): "

TODO_OPTIMIZER_IDX = (
    "{hook} uses optimizer_idx: Lightning 2.x has one optimizer per step in automatic optimization. Set"
    " self.automatic_optimization = False in __init__, then in training_step: opt_g, opt_d = self.optimizers(); for"
    " each: loss = ...; opt.zero_grad(); self.manual_backward(loss); opt.step() (docs/upgrade.md)"
)
TODO_STEP_END = (
    "{hook} does more than reduce the replicas' outputs: under the bundle's dp/ddp2, define"
    " combine_replica_outputs(self, step_name, outputs) (step_name is 'training_step', ...) with this body, then"
    " delete {hook} (docs/upgrade.md)"
)
TODO_EPOCH_END = (
    "{hook}(outputs) is gone in 2.x: append what you need to a list on self in the step, use it in {new}(self),"
    " then clear the list (docs/upgrade.md)"
)
TODO_APEX = 'amp_backend="apex" is gone: apex AMP is replaced by native AMP, precision="16-mixed"'
TODO_RESUME = "resume_from_checkpoint is gone: pass ckpt_path={value} to trainer.fit(...)"
TODO_CONFLICT = "{old}={value} maps to {new}, which this call already sets: choose one"
TODO_GPU_STATS = (
    "GPUStatsMonitor({args}) became lightning_mgpu's GPUUtilizationMonitor: it logs utilisation, memory, power"
    " and a diagnosis per rank; its arguments differ (log_every_n_steps, sample_interval_s, ...)"
)
TODO_WEIGHTS_SUMMARY = (
    "weights_summary={value} is gone: add callbacks=[ModelSummary(max_depth=-1)] for the full summary"
)
TODO_CHECKPOINT_CALLBACK = (
    "checkpoint_callback={value} is gone: put the ModelCheckpoint in callbacks=[...] and use enable_checkpointing=True"
)
NOTE_FAIRSCALE_CHECKPOINT = (
    "FairScale's checkpoint_wrapper keeps working under every strategy; lightning_mgpu's ActivationCheckpointing"
    " callback does the same without touching the model code and under every strategy (docs/upgrade.md)"
)
