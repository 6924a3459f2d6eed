"""What ``lightning-mgpu upgrade`` rewrites: Lightning 1.x spellings and their 2.x + lightning_mgpu equivalents.

Tables only (no libcst here), so that docs/upgrade.md and the tests read the same facts as the transformer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The Lightning namespaces a script may import, and the bundle module that serves each (the user's namespace stays).
BUNDLE_FOR_NAMESPACE = {"pytorch_lightning": "lightning_mgpu.pl", "lightning.pytorch": "lightning_mgpu"}
#: 1.x Trainer flags that became a callback of the bundle's (``lightning_mgpu.callbacks``): flag -> the callback.
FLAG_CALLBACKS = {"stochastic_weight_avg": "LegacyStochasticWeightAveraging", "terminate_on_nan": "TerminateOnNaN"}
#: The callbacks that already do what each of those flags adds: 1.x's Trainer added no StochasticWeightAveraging where
#: its callbacks held one (callback_connector.py ``_configure_swa_callbacks``, 1.2 to 1.6), and the bundle's
#: TerminateOnNaN is what terminate_on_nan=True becomes; a callbacks= list that holds one of these takes nothing more.
FLAG_CALLBACK_CLASSES = {
    "stochastic_weight_avg": frozenset({"StochasticWeightAveraging", "LegacyStochasticWeightAveraging"}),
    "terminate_on_nan": frozenset({"TerminateOnNaN"}),
}

#: Names of ``pytorch_lightning.utilities.argparse`` that 2.x's module still has: their imports stay as they are.
ARGPARSE_KEPT = frozenset({"_defaults_from_env_vars"})
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

#: Strategy names that only exist once lightning_mgpu is imported: a script that passes one gets
#: ``import lightning_mgpu``.
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

#: Trainer arguments renamed in 2.0 (or earlier), where the value carries over.
RENAMED_ARGS = {
    "replace_sampler_ddp": "use_distributed_sampler",
    "row_log_interval": "log_every_n_steps",
    # Lightning 0.x names that 1.0-era scripts still carried.
    "max_nb_epochs": "max_epochs",
    "min_nb_epochs": "min_epochs",
    "default_save_path": "default_root_dir",
    "nb_sanity_val_steps": "num_sanity_val_steps",
    "nb_gpu_nodes": "num_nodes",
    "train_percent_check": "limit_train_batches",
    "val_percent_check": "limit_val_batches",
    "test_percent_check": "limit_test_batches",
}

#: Trainer arguments removed in 2.0 whose removal changes nothing a run computes: dropped, with a comment.
DROPPED_ARGS = {
    "auto_select_gpus": "trainer-auto-select-gpus",
    "flush_logs_every_n_steps": "trainer-flush-logs",
    "log_save_interval": "trainer-flush-logs",
    "move_metrics_to_cpu": "trainer-move-metrics",
    "enable_pl_optimizer": "trainer-enable-pl-optimizer",
}

#: Trainer arguments removed in 2.0 with no mechanical equivalent: the rule whose TODO says the 2.x way.
REMOVED_ARGS = {
    "tpu_cores": "trainer-tpu-cores",
    "ipus": "trainer-ipus",
    "track_grad_norm": "trainer-track-grad-norm",
    "auto_lr_find": "trainer-auto-lr-find",
    "auto_scale_batch_size": "trainer-auto-scale-batch-size",
    "stochastic_weight_avg": "trainer-swa",
    "multiple_trainloader_mode": "trainer-multiple-trainloader-mode",
    "terminate_on_nan": "trainer-terminate-on-nan",
    "log_gpu_memory": "trainer-log-gpu-memory",
    "prepare_data_per_node": "trainer-prepare-data-per-node",
    "weights_save_path": "trainer-weights-save-path",
    "truncated_bptt_steps": "trainer-tbptt",
    "automatic_optimization": "trainer-automatic-optimization",
    "process_position": "trainer-process-position",
}

#: ModelCheckpoint keywords renamed in 1.x's deprecations (removed by 2.0).
CHECKPOINT_RENAMED = {"period": "every_n_epochs", "every_n_val_epochs": "every_n_epochs"}
#: 1.x's multiple_trainloader_mode default, which 2.x's fit loop applies to a collection of training loaders itself.
TRAINLOADER_MODE_DEFAULT = "max_size_cycle"
#: Base classes that make a class plainly not Lightning's (its methods keep their names: a hand-written loop may call
#: its own ``training_epoch_end``).
NON_LIGHTNING_BASES = frozenset(
    {
        "Module",
        "object",
        "Dataset",
        "IterableDataset",
        "Enum",
        "Exception",
        "ABC",
        "NamedTuple",
        "TypedDict",
        "dict",
        "list",
        "Sequential",
        "ModuleList",
        "ModuleDict",
    }
)

#: Keyword arguments of ``trainer.fit/validate/test/predict/tune`` renamed in 2.0.
LOOP_KWARGS = {
    "fit": {"train_dataloader": "train_dataloaders", "val_dataloader": "val_dataloaders"},
    "validate": {"val_dataloaders": "dataloaders"},
    "test": {"test_dataloaders": "dataloaders"},
    "predict": {},
}

#: Removed module paths -> (2.x module below the namespace, or a whole module path outside it). Names keep.
MOVED_MODULES = {
    "core.lightning": "",
    "callbacks.base": "callbacks",
    "loggers.base": "loggers.logger",
    "utilities.seed": "",
    "utilities.distributed": "utilities",
    "profiler": "profilers",
    "core.memory": "utilities.model_summary",
}
#: Removed names -> (module below the namespace, new name).
RENAMED_NAMES = {
    ("loggers.base", "LightningLoggerBase"): ("loggers", "Logger"),
    ("loggers", "LightningLoggerBase"): ("loggers", "Logger"),
    ("loggers.logger", "LightningLoggerBase"): ("loggers", "Logger"),
    # 2.0 gave the base class the name 1.x's tqdm bar had (TQDMProgressBar since 1.5): only the base moves here.
    ("callbacks", "ProgressBarBase"): ("callbacks", "ProgressBar"),
    ("callbacks.progress", "ProgressBarBase"): ("callbacks", "ProgressBar"),
    ("core.memory", "ModelSummary"): ("utilities.model_summary", "ModelSummary"),
}
#: Lightning's own 1.x training-type plugins -> their 2.x strategy classes (``strategies`` below the namespace), with
#: extra keyword arguments at call sites.
LIGHTNING_PLUGINS: dict[str, tuple[str, dict[str, str]]] = {
    "DDPPlugin": ("DDPStrategy", {}),
    "DDPSpawnPlugin": ("DDPStrategy", {"start_method": '"spawn"'}),
    "DDPSpawnStrategy": ("DDPStrategy", {"start_method": '"spawn"'}),
    "DeepSpeedPlugin": ("DeepSpeedStrategy", {}),
    "SingleDevicePlugin": ("SingleDeviceStrategy", {}),
    "DDPFullyShardedPlugin": ("FSDPStrategy", {}),
    "DDPFullyShardedStrategy": ("FSDPStrategy", {}),
}
LIGHTNING_PLUGIN_MODULES = (
    "plugins",
    "plugins.training_type",
    "strategies",
    "plugins.training_type.ddp",
    "plugins.training_type.ddp_spawn",
    "plugins.training_type.deepspeed",
    "plugins.training_type.single_device",
    "plugins.training_type.fully_sharded",
    "strategies.ddp_spawn",
    "strategies.fully_sharded",
)

#: ``pytorch_lightning.metrics`` -> torchmetrics: 1.x names renamed there.
TORCHMETRICS_RENAMED = {
    "F1": "F1Score",
    "FBeta": "FBetaScore",
    "IoU": "JaccardIndex",
    "SSIM": "StructuralSimilarityIndexMeasure",
    "PSNR": "PeakSignalNoiseRatio",
    "MeanSquaredLogError": "MeanSquaredLogError",
    "ExplainedVariance": "ExplainedVariance",
    "iou": "jaccard_index",
    "f1": "f1_score",
    "fbeta": "fbeta_score",
    "ssim": "structural_similarity_index_measure",
    "psnr": "peak_signal_noise_ratio",
}
#: torchmetrics classification metrics that need ``task=`` (and num_classes) since torchmetrics 0.11.
TORCHMETRICS_TASK = frozenset(
    {
        "Accuracy",
        "Precision",
        "Recall",
        "F1Score",
        "FBetaScore",
        "AUROC",
        "AveragePrecision",
        "ConfusionMatrix",
        "ROC",
        "PrecisionRecallCurve",
        "StatScores",
        "Specificity",
        "JaccardIndex",
        "HammingDistance",
        "CohenKappa",
        "MatthewsCorrCoef",
        "accuracy",
        "precision",
        "recall",
        "f1_score",
        "fbeta_score",
        "auroc",
        "average_precision",
        "confusion_matrix",
        "roc",
        "precision_recall_curve",
        "stat_scores",
        "specificity",
        "jaccard_index",
        "hamming_distance",
    }
)

#: Callback and module hooks renamed in 2.0: old -> new (and the hooks the old one also stood for).
RENAMED_HOOKS = {
    "on_epoch_start": ("on_train_epoch_start", ("on_validation_epoch_start", "on_test_epoch_start")),
    "on_epoch_end": ("on_train_epoch_end", ("on_validation_epoch_end", "on_test_epoch_end")),
    "on_pretrain_routine_start": ("on_fit_start", ()),
    "on_pretrain_routine_end": ("on_fit_start", ()),
    "on_batch_start": ("on_train_batch_start", ()),
    "on_batch_end": ("on_train_batch_end", ()),
}
#: Hooks that lost a parameter (callback signature has trainer, pl_module first).
HOOK_PARAM_DROPS = {
    "on_train_batch_start": "dataloader_idx",
    "on_train_batch_end": "dataloader_idx",
    "on_train_epoch_end": "outputs",
}

#: The module hooks that lost ``optimizer_idx`` (and what else each lost) in 2.0.
HOOK_DROPPED_PARAMS = {
    "training_step": ("optimizer_idx",),
    "optimizer_zero_grad": ("optimizer_idx",),
    "optimizer_step": ("optimizer_idx", "on_tpu", "using_native_amp", "using_lbfgs"),
    "backward": ("optimizer", "optimizer_idx"),
    "on_before_optimizer_step": ("optimizer_idx",),
    "lr_scheduler_step": ("optimizer_idx",),
    "configure_gradient_clipping": ("optimizer_idx",),
}
STEP_END_HOOKS = ("training_step_end", "validation_step_end", "test_step_end")
EPOCH_END_HOOKS = {
    "training_epoch_end": "on_train_epoch_end",
    "validation_epoch_end": "on_validation_epoch_end",
    "test_epoch_end": "on_test_epoch_end",
}

TODO_TAG = "TODO(lightning-mgpu:"
TODO_PREFIX = "# " + TODO_TAG


#: A rule's kinds: ``todo`` may leave a TODO for a person (and may also rewrite), ``note`` leaves a NOTE about what
#: was dropped or keeps working, ``rewrite`` only ever rewrites.
KINDS = ("todo", "note", "rewrite")


@dataclass(frozen=True)
class Rule:
    """One rewrite or one thing left for a person. Every change, TODO and note the tool makes names one.

    ``todo`` is the short text of the TODO or NOTE comment (``{...}`` filled in at the spot, each value cut to 24
    characters), or for a ``rewrite`` rule its one-line summary; ``text`` is the full explanation that
    ``lightning-mgpu upgrade --explain ID`` prints and docs/upgrade.md lists.
    """

    id: str
    todo: str
    text: str
    kind: str = "todo"


def _rules(*rules: Rule) -> dict[str, Rule]:
    """The registry, by id.

    Raises:
        ValueError: an id given twice, or a kind not in :data:`KINDS`.
    """
    registry = {rule.id: rule for rule in rules}
    if len(registry) != len(rules) or any(rule.kind not in KINDS for rule in rules):
        raise ValueError("each rule needs an id of its own and one of the kinds " + ", ".join(KINDS))
    return registry


RULES = _rules(
    # -- Trainer arguments ------------------------------------------------------------------------------------------
    Rule(
        "trainer-apex",
        'apex AMP is gone: precision="16-mixed" is native AMP',
        'amp_backend="apex" with precision=16 trained with NVIDIA apex at amp_level (O1/O2). Lightning 2.x has'
        ' native AMP only: precision="16-mixed" is the closest (O1-like). The rewrite sets it; check convergence.'
        " Without precision=16, amp_backend had no effect and is dropped.",
    ),
    Rule(
        "trainer-amp-backend-variable",
        'amp_backend={value}: "apex" means native AMP now',
        'amp_backend was given a value this tool cannot read. Lightning 2.x has native AMP only; precision="16-mixed"'
        ' is kept. If the value was "apex", the run now uses native AMP (O1-like) instead of apex.',
    ),
    Rule(
        "trainer-resume",
        "resume_from_checkpoint is gone: pass ckpt_path={value} to fit",
        "Trainer(resume_from_checkpoint=X) moved to trainer.fit(model, ckpt_path=X) in 2.0. The tool moves it when the"
        " Trainer is assigned to a name whose fit(...) calls are in the same function and every assignment of that"
        " name there builds a Trainer. Where the name is built more than once (an if/else) and only some"
        " constructions resume, each construction, alone on its line, gets a variable beside it"
        " (resume_ckpt_path = X, or = None where it did not resume) and the fits pass ckpt_path=resume_ckpt_path: a"
        " fit resumes only where its Trainer would have in 1.x. Where the fits are not the function's (the Trainer"
        " returned, built by a classmethod, handed to a call, the name also given something else), the checkpoint"
        " stays with the object: legacy_resume(Trainer(...), X) (lightning_mgpu.upgrade.legacy_resume), whose next"
        " fit without a ckpt_path of its own resumes from X, once, as 1.4-1.9's did (validate, test, predict and the"
        " tuner never read it from 1.1; 1.0's test restored it too, and 1.0-1.3 also resumed a second fit of the same"
        " Trainer). The TODO stays where there is"
        " no object to wrap: super().__init__(..., resume_from_checkpoint=X) in a Trainer subclass (pass X on to"
        " the fit as ckpt_path=, or wrap the built subclass: legacy_resume(Runner(...), X)), and X in a dict of"
        " settings. 2.x's trainer.ckpt_path = X is not the same: it makes validate, test and predict load X too,"
        " where 1.x resumed fit alone.",
    ),
    Rule(
        "trainer-conflict",
        "{old}={value} maps to {new}, set here too: choose",
        "A 1.x argument maps to a 2.x argument that the call also sets to something else. The tool does not choose.",
    ),
    Rule(
        "trainer-accelerator-unknown",
        "accelerator={value}: a strategy name goes to strategy=",
        'In 1.x, accelerator="ddp"/"dp"/"ddp2"/... named the distributed mode; in 2.x that is strategy= and'
        " accelerator= is the device type (cpu, gpu, tpu). This value's source could not be read: if it can hold a"
        ' strategy name, pass it as strategy= (with "auto" for None).',
    ),
    Rule(
        "trainer-accelerator-unread",
        "accelerator={value} beside gpus=: 1.x kept it as the device type",
        'In 1.x (1.6 to 1.9) an accelerator= given as a device type ("cpu", "gpu") beside gpus= stayed the'
        " device type, and gpus= only set the number of devices (0 or None: the accelerator's own default, all GPUs"
        ' or one CPU). Where the accelerator\'s value is not a literal (accelerator="gpu" if n > 0 else "cpu",'
        " a variable), which device type it is only the run knows: the tool moves accelerator, gpus and the"
        " settings they decide with into **legacy_trainer_kwargs(...) (rule trainer-args-translated), which reads"
        " them as 1.x did when the Trainer is built. This TODO stays where the call cannot be translated (a splat"
        " of its own, a plugins= that is not a strategy, two literals that disagree): pass accelerator= and"
        " devices= as 1.x chose them.",
    ),
    Rule(
        "trainer-distributed-backend",
        "distributed_backend={value} is unknown: pass strategy=",
        "distributed_backend= was renamed accelerator= in 1.0 and strategy= in 1.5; 2.x takes strategy= only.",
    ),
    Rule(
        "trainer-splat",
        "Trainer(**{value}) may hold 1.x keys: check them",
        "The settings splatted into this Trainer come from somewhere this tool cannot follow (a config file, a function"
        " argument), and the call could not be handed to legacy_trainer_kwargs (which the tool writes for any call"
        " whose splats it cannot read: rule trainer-splat-translated). Check them for 1.x keys: gpus ->"
        " accelerator+devices, accelerator/distributed_backend naming a strategy -> strategy,"
        ' precision=16 -> "16-mixed", checkpoint_callback -> enable_checkpointing,'
        " replace_sampler_ddp -> use_distributed_sampler, resume_from_checkpoint -> fit(ckpt_path=...)."
        " Or build it with lightning_mgpu.upgrade.trainer_args.legacy_trainer_kwargs(settings), which translates them.",
    ),
    Rule(
        "trainer-weights-summary",
        "weights_summary={value}: use ModelSummary(max_depth=-1)",
        'weights_summary="full" printed every layer; 2.x: the ModelSummary callback with max_depth=-1.',
    ),
    Rule(
        "trainer-checkpoint-callback",
        "checkpoint_callback={value}: move it into callbacks=[...]",
        "checkpoint_callback= took a ModelCheckpoint in 1.x; 2.x takes it in callbacks=[...]"
        " (enable_checkpointing=True). The tool moves it where callbacks= is absent or a literal list.",
    ),
    Rule(
        "trainer-progress-bar",
        "progress_bar_refresh_rate={value}: use TQDMProgressBar(refresh_rate=N)",
        "progress_bar_refresh_rate=N became the TQDMProgressBar callback's refresh_rate; 0 became"
        " enable_progress_bar=False. The tool rewrites it where callbacks= is absent or a literal list.",
    ),
    Rule(
        "trainer-accumulate-dict",
        "accumulate_grad_batches={value}: GradientAccumulationScheduler",
        "A dict for accumulate_grad_batches (epoch -> factor) became"
        " callbacks=[GradientAccumulationScheduler(scheduling=...)].",
    ),
    Rule(
        "trainer-auto-select-gpus",
        "auto_select_gpus dropped: find_usable_cuda_devices(N) picks free GPUs",
        "auto_select_gpus=True picked N free GPUs. 2.x:"
        " devices=lightning.pytorch.accelerators.find_usable_cuda_devices(N). Dropped: with exclusive-mode GPUs or a"
        " scheduler that sets CUDA_VISIBLE_DEVICES it changes nothing.",
        kind="note",
    ),
    Rule(
        "trainer-flush-logs",
        "dropped: loggers flush on their own (CSVLogger(flush_logs_every_n_steps=N))",
        "flush_logs_every_n_steps / log_save_interval moved to the loggers (CSVLogger's flush_logs_every_n_steps)."
        " Dropped: it only changes when logs are written to disk.",
        kind="note",
    ),
    Rule(
        "trainer-move-metrics",
        "move_metrics_to_cpu dropped: move tensors to the CPU before logging",
        "move_metrics_to_cpu only saved accelerator memory for logged tensors; 2.x removed it. Dropped.",
        kind="note",
    ),
    Rule(
        "trainer-enable-pl-optimizer",
        "enable_pl_optimizer dropped: optimizers are always wrapped in 2.x",
        "enable_pl_optimizer (1.1) chose whether optimizers were wrapped; 2.x always wraps them. Dropped.",
        kind="note",
    ),
    Rule(
        "ddp-cpu-gradient-mean",
        "1.x's ddp_cpu summed the ranks' gradients; 2.x's ddp takes their mean",
        'accelerator="ddp_cpu" ran as ddp_spawn on CPU processes, and Lightning 1.6.5 and 1.9.5 stepped it with the'
        " sum of the ranks' gradients (the spawned ranks' CPU parameters appear to share memory), where ddp, torch's"
        " DDP and 2.x take the mean: the converted script trains with the mean, as ddp on GPUs always did. To"
        " reproduce a 1.x run's numbers with plain SGD, multiply the learning rate by the number of processes"
        " (measured: tests/helpers/upgrade_equivalence/ddp_cpu_spawn.py, docs/upgrade.md).",
        kind="note",
    ),
    Rule(
        "trainer-tpu-cores",
        'tpu_cores is gone: use accelerator="tpu", devices=N',
        'tpu_cores=N became accelerator="tpu", devices=N.',
    ),
    Rule(
        "trainer-ipus",
        'ipus is gone: accelerator="ipu", devices=N (lightning-graphcore)',
        'ipus=N became accelerator="ipu", devices=N, served by Graphcore\'s lightning-graphcore package.',
    ),
    Rule(
        "trainer-track-grad-norm",
        "track_grad_norm is gone: add TrackGradNorm(p) to the Trainer's callbacks",
        "track_grad_norm=p logged the gradients' p-norms. The tool writes callbacks=[TrackGradNorm(p)]"
        " (track-grad-norm-callback); this TODO stays where the"
        " value is one 1.x refused (0, a string other than 'inf') or callbacks= is something the tool cannot extend:"
        " add TrackGradNorm(p) (lightning_mgpu.callbacks, or lightning_mgpu.pl.callbacks under pytorch_lightning) to"
        " the callbacks the Trainer gets, p the value 1.x was given.",
    ),
    Rule(
        "trainer-auto-lr-find",
        "auto_lr_find ran only in tune(): there call Tuner(trainer).lr_find(model)",
        "auto_lr_find=True ran the learning-rate finder in trainer.tune() and nowhere else (fit() never read it)."
        " The tool moves it to the tune() call or drops it where it sees the whole life of the trainer; this TODO"
        " stays where the trainer leaves what the tool can see (returned, passed to another function or module,"
        " built in one notebook cell and used in another). Find where that trainer's tune() is called: there, when"
        " the flag was on, call lightning.pytorch.tuner.Tuner(trainer).lr_find(model, ..., update_attr=True,"
        " attr_name=the flag's string if it was one) (1.x's tune() set the rate it found); where no tune() is ever"
        " called on it, the flag did nothing: delete this line.",
    ),
    Rule(
        "trainer-auto-scale-batch-size",
        "only tune() read it: there call Tuner(trainer).scale_batch_size",
        "auto_scale_batch_size=True or a mode ran the batch-size scaling in trainer.tune() and nowhere else (fit()"
        " never read it). The tool moves it to the tune() call or drops it where it sees the whole life of the"
        " trainer; this TODO stays where the trainer leaves what the tool can see (returned, passed on). Find where"
        " that trainer's tune() is called: there, when the flag was on, call"
        " lightning.pytorch.tuner.Tuner(trainer).scale_batch_size(model, ..., mode=the flag's string, or 'power'"
        " for True), before any lr_find; where no tune() is ever called on it, the flag did nothing: delete this"
        " line.",
    ),
    Rule(
        "trainer-swa",
        "stochastic_weight_avg is gone: add LegacyStochasticWeightAveraging()",
        "stochastic_weight_avg=True added 1.x's StochasticWeightAveraging() with every default; its swa_lrs=None meant"
        " the optimizer's learning rates when averaging starts, and 2.x requires swa_lrs. The tool writes"
        " callbacks=[LegacyStochasticWeightAveraging()] (lightning_mgpu.callbacks, or lightning_mgpu.pl.callbacks"
        " under pytorch_lightning: Lightning's callback, reading those rates as 1.x did), and removes"
        " stochastic_weight_avg=False; a value it cannot read (stochastic_weight_avg=cfg.swa) adds it as"
        " callbacks=[..., *([LegacyStochasticWeightAveraging()] if cfg.swa else [])], tested for truth when the"
        " Trainer is built as 1.x did; legacy_trainer_kwargs adds it for a true value read at run time. As 1.x, no"
        " second one: the flag goes where callbacks= lists a StochasticWeightAveraging already, a list read at run"
        " time gets *LegacyStochasticWeightAveraging.unless_given(that list), and legacy_trainer_kwargs adds none"
        " where the callbacks hold one. This TODO stays where callbacks= is not a list the tool can extend.",
    ),
    Rule(
        "trainer-multiple-trainloader-mode",
        "multiple_trainloader_mode is gone: use CombinedLoader",
        "Trainer(multiple_trainloader_mode=) told 1.x how to combine several training loaders (a dict or list returned"
        ' by train_dataloader): "max_size_cycle" (the default) restarted the shorter ones until the longest was done,'
        ' "min_size" stopped with the shortest. 2.x combines them as "max_size_cycle" itself, so the tool drops that'
        " literal; for min_size (or a value it cannot read that may hold it), return"
        ' lightning.pytorch.utilities.CombinedLoader(loaders, mode="min_size") from train_dataloader, and drop the'
        " argument. legacy_trainer_kwargs (settings translated at run time) takes max_size_cycle and refuses"
        " min_size the same way.",
    ),
    Rule(
        "trainer-terminate-on-nan",
        "terminate_on_nan is gone: add lightning_mgpu's TerminateOnNaN callback",
        "terminate_on_nan=True raised ValueError at a NaN/inf training loss (before its backward) or parameter (after"
        " it). 2.x has no flag; the tool writes callbacks=[TerminateOnNaN()] (from lightning_mgpu.callbacks, or"
        " lightning_mgpu.pl.callbacks under pytorch_lightning), which checks both where 1.x did, and removes"
        " terminate_on_nan=False; a value it cannot read (terminate_on_nan=cfg.nan_check) adds it as"
        " callbacks=[..., *([TerminateOnNaN()] if cfg.nan_check else [])], tested for truth when the Trainer is"
        " built as 1.x did, and legacy_trainer_kwargs adds the callback for a true value read at run time (neither"
        " where callbacks= holds a TerminateOnNaN already: the flag then just goes). This"
        " TODO stays where callbacks= is not a list the tool can extend: add the callback by hand. detect_anomaly=True"
        " instead stops at the operation that made the NaN (slower).",
    ),
    Rule(
        "trainer-log-gpu-memory",
        "log_gpu_memory is gone: add DeviceStatsMonitor or GPUUtilizationMonitor",
        "log_gpu_memory logged nvidia-smi's memory figures. 2.x: callbacks=[DeviceStatsMonitor()], or this bundle's"
        " GPUUtilizationMonitor (utilisation, memory, power and a diagnosis per rank).",
    ),
    Rule(
        "trainer-prepare-data-per-node",
        "prepare_data_per_node moved: an attribute of the module/DataModule",
        "2.x: self.prepare_data_per_node = False in the LightningModule's or DataModule's __init__.",
    ),
    Rule(
        "trainer-weights-save-path",
        "weights_save_path: ModelCheckpoint(dirpath=); SLURM: default_root_dir=",
        "1.x's weights_save_path=X did two things. (1) A ModelCheckpoint without a folder of its own (no dirpath,"
        " no filepath) saved under X (X/<logger name>/<version>/checkpoints, X/checkpoints without a logger): 2.x:"
        " give that callback dirpath= (where every ModelCheckpoint has its folder, (1) changed nothing). (2) Under"
        " SLURM, the checkpoint saved when the job was pre-empted (hpc_ckpt_N.ckpt) went to X, and a requeued job"
        " restored from there: 2.x saves and restores it in default_root_dir, so pass default_root_dir=X where the"
        " script runs under SLURM's auto-requeue (that also moves what 2.x keeps in default_root_dir: the default"
        " logger's folder when logger= is not given, the default ModelCheckpoint's). The tool writes"
        " default_root_dir=X itself where the call shows that (1) cannot happen and nothing else moves: every"
        " callback in callbacks= is Lightning's own and each ModelCheckpoint among them (one at least) has a folder"
        " that is not empty, logger= is a logger object, the call has no default_root_dir and the file never"
        " spells default_root_dir elsewhere. Otherwise (a callback of the script's own, a logger or a folder it"
        " cannot read) which callbacks have a folder, and whether the script runs under SLURM, only the script's"
        " author knows.",
    ),
    Rule(
        "trainer-tbptt",
        "truncated_bptt_steps is gone: split sequences under manual optimization",
        "2.x removed truncated BPTT from automatic optimization; split the batch yourself under manual optimization.",
    ),
    Rule(
        "trainer-automatic-optimization",
        "automatic_optimization moved: set it on the module",
        "Set self.automatic_optimization = False in the LightningModule's __init__. A literal None or True is"
        " dropped instead: 1.1/1.2 then followed the module's own setting (the Trainer's None counted as True, and"
        " automatic optimization ran where both were set), which is all 2.x reads.",
    ),
    Rule(
        "trainer-process-position",
        "process_position is gone: TQDMProgressBar(process_position=N)",
        "process_position moved to the TQDMProgressBar callback.",
    ),
    Rule(
        "trainer-strategy",
        "accelerator=/distributed_backend=/plugins= naming a strategy -> strategy=",
        'In 1.x, accelerator="ddp" (and distributed_backend=, and plugins="ddp_sharded" or a training-type plugin'
        " object) chose the distributed mode; 2.x calls it strategy=. The tool moves literal names, conditions of"
        ' them, variables and argparse flags that only hold them ("ddp_cpu" becomes "ddp", None becomes "auto"); beside'
        " a plugin object, the string goes, as 1.x let the object win.",
        kind="rewrite",
    ),
    Rule(
        "trainer-devices",
        "gpus=/num_processes= -> accelerator= and devices=",
        'gpus=N became accelerator="gpu", devices=N (gpus=0 or None: accelerator="cpu"); num_processes=N became'
        ' accelerator="cpu", devices=N (dropped beside a literal gpus, as 1.x ignored it). A gpus= that is not a'
        ' literal keeps its CPU path: accelerator="gpu" if X else "cpu", devices=X or 1.',
        kind="rewrite",
    ),
    Rule(
        "trainer-precision",
        'precision=16 / "bf16" -> "16-mixed" / "bf16-mixed"',
        '1.x\'s precision=16 and "bf16" were mixed precision; 2.x spells them "16-mixed" and "bf16-mixed" (also in a'
        " condition).",
        kind="rewrite",
    ),
    Rule(
        "trainer-amp-backend",
        "amp_backend=/amp_level= removed: native AMP is the only one",
        'amp_backend="native" was the default, and amp_backend/amp_level had no effect without precision=16; 2.x has'
        " native AMP only, so they are removed (apex at precision 16 is the trainer-apex TODO).",
        kind="rewrite",
    ),
    Rule(
        "trainer-renamed-arg",
        "a renamed Trainer argument (replace_sampler_ddp -> use_distributed_sampler, ...)",
        "Arguments renamed with their values kept: replace_sampler_ddp -> use_distributed_sampler, row_log_interval ->"
        " log_every_n_steps, and 0.x names 1.0-era scripts still carried (max_nb_epochs -> max_epochs,"
        " default_save_path -> default_root_dir, train_percent_check -> limit_train_batches, ...); also in"
        " parser.set_defaults(...).",
        kind="rewrite",
    ),
    Rule(
        "trainer-early-stop-callback",
        "early_stop_callback= -> callbacks=[...]",
        'Trainer(early_stop_callback=True) became callbacks=[EarlyStopping(monitor="val_loss")], an EarlyStopping'
        " object joins callbacks=, and False or None is removed (no early stopping is the 2.x default).",
        kind="rewrite",
    ),
    Rule(
        "trainer-reload-dataloaders",
        "reload_dataloaders_every_epoch -> reload_dataloaders_every_n_epochs",
        "reload_dataloaders_every_epoch=True became reload_dataloaders_every_n_epochs=1 (False is removed, a value the"
        " tool cannot read becomes int(X)). The same data, another order: after each reload 2.x creates the"
        " training loader's iterator twice (FitLoop.setup_data, then the epoch loop), and the first one draws a seed"
        " from torch's global generator, so a shuffle=True loader without its own generator shuffles epochs 2 on"
        " differently from 1.x (tests/helpers/upgrade_equivalence/reload_dataloaders.py).",
        kind="rewrite",
    ),
    Rule(
        "trainer-profiler",
        'profiler=True -> profiler="simple"',
        'profiler=True ran the simple profiler; 2.x takes its name, profiler="simple". profiler=False is removed.',
        kind="rewrite",
    ),
    Rule(
        "trainer-max-steps",
        "max_steps=None -> max_steps=-1",
        "2.x spells no step limit max_steps=-1; None is refused.",
        kind="rewrite",
    ),
    Rule(
        "trainer-loop-kwargs",
        "fit(train_dataloader=) / validate(val_dataloaders=) / test(test_dataloaders=) renamed",
        "trainer.fit(train_dataloader=...) became train_dataloaders=, and validate(val_dataloaders=...) and"
        " test(test_dataloaders=...) became dataloaders=.",
        kind="rewrite",
    ),
    Rule(
        "trainer-argparse",
        "Trainer.add_argparse_args/from_argparse_args/parse_argparser -> lightning_mgpu.upgrade.trainer_args",
        "2.0 removed Trainer.add_argparse_args, from_argparse_args, parse_argparser and get_init_arguments_and_types"
        " (and a DataModule's add_argparse_args, from_argparse_args and get_init_arguments_and_types), and the"
        " module pytorch_lightning.utilities.argparse that held them as functions (with parse_env_variables). The"
        " functions of the same name in lightning_mgpu.upgrade.trainer_args take the class first, as 1.x's did:"
        " Trainer.parse_argparser(args) becomes parse_argparser(Trainer, args), and the module's imports come from"
        " there. add_argparse_args makes every 2.x Trainer argument a flag and still accepts the 1.x flags (--gpus,"
        " --accelerator ddp, --precision 16, ...), which from_argparse_args translates at run time;"
        " parse_argparser reads a bool flag given without a value as True, as 1.x did; parse_env_variables reads"
        " PL_TRAINER_<ARG> variables, the 1.x arguments' included (PL_TRAINER_GPUS).",
        kind="rewrite",
    ),
    Rule(
        "argparse-utility",
        "{value} is gone with pytorch_lightning.utilities.argparse",
        "2.0 removed pytorch_lightning.utilities.argparse. Its public functions (add_argparse_args,"
        " from_argparse_args, parse_argparser, parse_env_variables, get_init_arguments_and_types) are rewritten to"
        " lightning_mgpu.upgrade.trainer_args; this name is not one of them (a private helper such as"
        " _gpus_allowed_type or _int_or_float_type, or str_to_bool, which 1.x's module imported from"
        " utilities.parsing): copy what the script needs from Lightning 1.x into the script.",
    ),
    Rule(
        "trainer-tune",
        "trainer.tune() is gone: run Tuner(trainer) for its auto_* flags that were on",
        "trainer.tune(model, ...) ran the tuners that the Trainer's auto_scale_batch_size and auto_lr_find turned on"
        " (scale_batch_size first), and nothing when both were off. This TODO stays where the tool cannot see how"
        " the trainer was built. Look up those two flags where it was: for each that was on, call"
        " lightning.pytorch.tuner.Tuner(trainer).scale_batch_size(model, ..., mode=...) and then"
        " Tuner(trainer).lr_find(model, ..., update_attr=True) with tune()'s loaders or datamodule; a Trainer built"
        " by the converted from_argparse_args keeps the parsed flags: legacy_tune(trainer, ...) from"
        " lightning_mgpu.upgrade.tuning runs them as 1.x did.",
    ),
    Rule(
        "auto-move-data",
        "@auto_move_data -> the bundle's legacy_auto_move_data, which moves the inputs as 1.x did",
        "1.0-1.4's @auto_move_data (pytorch_lightning.core.decorators; removed in 1.5) moved a LightningModule"
        " method's arguments to the module's device before it ran, through the module's transfer_batch_to_device"
        " ((args, kwargs), device=self.device): forward called outside the Trainer (inference on CPU inputs) got them"
        " on the module's device. 2.x has no such decorator: the import becomes legacy_auto_move_data from"
        " lightning_mgpu.upgrade.legacy_move, which does the same (a user's alias kept, other uses renamed), so the"
        " decorated method behaves as before whoever calls it. To drop the bundle, remove the decorator and move"
        " the inputs with .to(self.device) where the method is called outside the Trainer.",
        kind="rewrite",
    ),
    Rule(
        "checkpoint-filepath",
        "ModelCheckpoint(filepath=) -> dirpath= and filename=, split as 1.x split it",
        "ModelCheckpoint(filepath=X) (up to 1.1; removed in 1.2) was split when the callback was built: an existing"
        " folder became the folder, with the default name pattern; any other path os.path.split(os.path.realpath(X))"
        " (on a local file system): the folder before the last '/' (the working directory where there is none) and"
        " the name pattern after it, kept whole (1.x added .ckpt behind it: 'best.ckpt' wrote best.ckpt.ckpt). 2.x"
        " takes dirpath= and filename=. A literal whose last part is a pattern ('ckpts/{epoch}-{val_loss:.2f}') or"
        ' ends in .ckpt is split here (dirpath="ckpts", filename="{epoch}-{val_loss:.2f}"; dirpath="." where it has'
        " no folder, not 2.x's logger folder). Any other value, which may name a folder, becomes"
        " **legacy_checkpoint_filepath(X) (lightning_mgpu.upgrade.legacy_checkpoint), which splits it at run time as"
        ' 1.x did; filepath="" goes, as 1.x ignored it. A positional ModelCheckpoint(X) whose last part is a name'
        " pattern is 1.0-1.1's filepath and converted the same (rule checkpoint-positional-path).",
        kind="rewrite",
    ),
    Rule(
        "checkpoint-positional-path",
        "ModelCheckpoint(X): filepath (1.0-1.1) or dirpath (1.2+)? name it",
        "ModelCheckpoint's first parameter was filepath in 1.0 and 1.1 (a path split when the callback was built:"
        " an existing folder became the folder, any other path a folder and a name pattern) and dirpath from 1.2,"
        " as in 2.x, where the value is the folder whatever it is. The two differ where the path is not an"
        " existing folder when the callback is built (1.1's ModelCheckpoint('out/ckpts') saved out/ckpts.ckpt"
        " and its kin in out/; 1.2's saved into out/ckpts/). Which release the script was written for, the tool"
        " cannot tell: for 1.2 and later write dirpath=X; for 1.0 or 1.1 write filepath=X and run the tool again,"
        " which splits it as 1.x did. The tool decides alone where the call says which: a dirpath= or filename="
        " beside it (1.1 refused those beside a filepath, 1.0 had none: the value is 1.2's dirpath, kept), or a"
        " value whose last part is a name pattern or a .ckpt file ('ckpts/{epoch}': 1.0-1.1's filepath, split as"
        " filepath= is, rule checkpoint-filepath).",
    ),
    Rule(
        "checkpoint-filepath-folder",
        "if a folder: 1.0 wrote epoch=N.ckpt, 1.1 and 2.x epoch=N-step=M.ckpt",
        "Where ModelCheckpoint(filepath=X) named an existing folder, the checkpoints were named by the default"
        ' pattern, which depended on the release: "{epoch}" in 0.10-1.0 (epoch=3.ckpt), "{epoch}-{step}" in 1.1'
        " (epoch=3-step=1200.ckpt), as in 2.x. **legacy_checkpoint_filepath(X) gives 1.1's (and 2.x's): for"
        ' 1.0\'s names, pass default_filename="{epoch}" to it. Nothing else changes (the folder, what is kept);'
        " a path that is not a folder keeps its own name pattern in every release.",
        kind="note",
    ),
    Rule(
        "checkpoint-prefix",
        "ModelCheckpoint's prefix is gone: put it at the start of filename=",
        'ModelCheckpoint(prefix=P) (1.0-1.2) put P and "-" in front of every checkpoint name, after formatting the'
        ' name (P itself was never formatted), and of "last" where save_last was on. 2.x: filename="P-{epoch}-{step}"'
        ' (the filename you had, with "P-" in front; without one, the default of your release: "{epoch}" in 1.0,'
        ' "{epoch}-{step}" in 1.1-1.2), and callback.CHECKPOINT_NAME_LAST = "P-last" after it is built where'
        " save_last is on. A P with braces has no 2.x spelling: 2.x formats the whole filename, so choose the name.",
    ),
    Rule(
        "checkpoint-every-n-epochs",
        "ModelCheckpoint(period=) / (every_n_val_epochs=) -> every_n_epochs=",
        "ModelCheckpoint's period= and every_n_val_epochs= were renamed every_n_epochs= (same meaning).",
        kind="rewrite",
    ),
    # -- names ------------------------------------------------------------------------------------------------------
    Rule(
        "bundle-import",
        "import lightning_mgpu added: it registers dp, ddp2, horovod, ddp_sharded",
        'strategy="dp", "ddp2", "horovod" and "ddp_sharded" left Lightning in 2.0; this bundle registers them when it'
        " is imported, so a file that passes one by name and imports nothing of the bundle gets import lightning_mgpu.",
        kind="rewrite",
    ),
    Rule(
        "bundle-class",
        "a removed strategy/plugin class -> the bundle's (DDPShardedPlugin -> ShardedStrategy)",
        "DataParallel, DDP2, Horovod and sharded strategies and plugins left Lightning in 2.0; the bundle's classes"
        " (from lightning_mgpu for lightning.pytorch, lightning_mgpu.pl for pytorch_lightning) take their place, every"
        ' use renamed (a user\'s own alias stays); the spawn variants get start_method="spawn" at each call.',
        kind="rewrite",
    ),
    Rule(
        "import-fallback",
        "try/except ImportError importing one name two ways -> the try's (2.x) imports",
        "A version-compatibility block (try: from pytorch_lightning.strategies import DDPStrategy / except"
        " ImportError: from pytorch_lightning.plugins import DDPPlugin as DDPStrategy) converted branch by branch"
        " names 2.x's class twice, and the old branch's DDPStrategy = DDPPlugin becomes a self-assignment that leaves"
        " the name unbound in a function. Where every handler catches ImportError/ModuleNotFoundError only and imports"
        " from the same Lightning namespace as the try:, binding every name the try: binds, and the try: holds only"
        " imports from that namespace and assignments without a call, the statement becomes the try: body (then its"
        " else:), converted as any import: under 2.x it is what ran. A fallback that imports no Lightning name (an"
        " optional dependency), or a try: between lightning.pytorch and pytorch_lightning (both 2.x), stays.",
        kind="rewrite",
    ),
    Rule(
        "spawn-class-use",
        "{name} is named, not called: 2.x has no such class",
        "DDPSpawnPlugin/DDPSpawnStrategy (and the sharded spawn classes) became a 2.x class with extra arguments"
        ' (DDPStrategy(start_method="spawn")): a call converts, and isinstance() drops the spawn class from a tuple'
        " that holds the class it became (ddp-spawn-isinstance), isinstance(s, DDPSpawnStrategy) becomes"
        " legacy_is_ddp_spawn(s) (spawn-isinstance). Named any other way (a base class, a list of classes, the"
        " sharded spawn class in a check) it has no 2.x equivalent: its import went, the name is undefined. A base"
        ' class: subclass DDPStrategy and pass start_method="spawn"; a check: legacy_is_ddp_spawn(s) from'
        " lightning_mgpu.upgrade.legacy_spawn (the sharded one: isinstance(s, ShardedStrategy) and"
        " legacy_is_ddp_spawn(s)).",
    ),
    Rule(
        "trainer-progress-bar-dict",
        "trainer.progress_bar_dict -> a new dict of get_standard_metrics(trainer) and trainer.progress_bar_metrics",
        "Trainer.progress_bar_dict (removed in 1.7) was a new dict of what the progress bar showed: the module's"
        " get_progress_bar_dict() (the running loss, the logger's version as v_num) and the metrics logged with"
        " prog_bar=True. 2.x's bar shows get_standard_metrics(trainer) (v_num) and trainer.progress_bar_metrics, which"
        " is what it becomes, as a new dict (progress_bar_metrics alone is the trainer's own dict: a pop() on it"
        " would change what the bar shows). 2.0 no longer shows the running loss: log it with prog_bar=True to keep"
        " it. Only where the owner is a Trainer (bound from a Trainer construction or annotation in this file, or named"
        " like a trainer) and is a name or an attribute chain (it is read twice); otherwise"
        " trainer-bar-dict-read.",
        kind="rewrite",
    ),
    Rule(
        "trainer-bar-dict-read",
        "gone: {{**get_standard_metrics(t), **t.progress_bar_metrics}} for trainer t",
        "Trainer.progress_bar_dict (removed in 1.7) read on an owner that is not a plain name or attribute chain (a"
        " call's result, a subscript): the rewrite trainer-progress-bar-dict reads its owner twice, so it is left"
        " for a person. Bind the trainer to a name t, then write {**get_standard_metrics(t), **t.progress_bar_metrics}"
        " (get_standard_metrics from lightning.pytorch.callbacks.progress.progress_bar): what 2.x's bar shows, as a"
        " new dict, as 1.x's property built one; 2.0 no longer shows the running loss (log it with prog_bar=True).",
    ),
    Rule(
        "trainer-resume-attribute",
        "gone: keep your path for fit(ckpt_path=) (None once fit restored it)",
        "Trainer.resume_from_checkpoint (deprecated in 1.5, removed in 2.0) was the path given to"
        " Trainer(resume_from_checkpoint=...) until fit had restored from it (None after that, and None where no path"
        " was given). 2.x's Trainer takes the path in fit(ckpt_path=...) and does not keep it before fit"
        " (trainer.ckpt_path is the checkpoint the last fit/validate/test/predict loaded, set from the start of that"
        " call and kept after it), so no attribute reads the same at every point: keep the path in a variable of your"
        " own (the one handed to fit's ckpt_path=) and read that where the script read trainer.resume_from_checkpoint,"
        " set to None where 1.x's fit had restored it.",
    ),
    Rule(
        "plugin-class",
        "a 1.x training-type plugin -> its 2.x strategy class (DDPPlugin -> DDPStrategy)",
        "Lightning's own plugins became strategies: DDPPlugin -> DDPStrategy, DDPSpawnPlugin -> DDPStrategy(...,"
        ' start_method="spawn"), DeepSpeedPlugin -> DeepSpeedStrategy, SingleDevicePlugin -> SingleDeviceStrategy,'
        " DDPFullyShardedPlugin -> FSDPStrategy (with the fsdp-plugin TODO).",
        kind="rewrite",
    ),
    Rule(
        "bundle-name",
        "a removed logger/callback -> the bundle's (NeptuneLogger, GPUStatsMonitor)",
        "NeptuneLogger and GPUStatsMonitor left Lightning; the bundle's NeptuneLogger and GPUUtilizationMonitor (from"
        " lightning_mgpu[.pl].loggers and .callbacks) take their place.",
        kind="rewrite",
    ),
    Rule(
        "renamed-name",
        "a renamed Lightning name (LightningLoggerBase -> Logger, ...)",
        "Names 2.x renamed in the same namespace: loggers' LightningLoggerBase -> Logger, callbacks' ProgressBarBase ->"
        " ProgressBar, core.memory's ModelSummary -> utilities.model_summary.ModelSummary.",
        kind="rewrite",
    ),
    Rule(
        "moved-module",
        "a removed module -> where its names live now (core.lightning -> the namespace, ...)",
        "Modules 2.x removed, their names kept: core.lightning -> the namespace itself, callbacks.base -> callbacks,"
        " utilities.seed -> the namespace, utilities.distributed -> utilities, profiler -> profilers, core.memory ->"
        " utilities.model_summary, loggers.base -> loggers.logger.",
        kind="rewrite",
    ),
    Rule(
        "metrics-import",
        "pytorch_lightning.metrics -> torchmetrics",
        "pytorch_lightning.metrics moved to the torchmetrics package (1.3-1.5): imports and attribute uses point there,"
        " with torchmetrics' new names (F1 -> F1Score, IoU -> JaccardIndex, ...).",
        kind="rewrite",
    ),
    Rule(
        "metrics-task",
        "torchmetrics' {name} needs task= since 0.11: the task 1.x read off the inputs",
        "pytorch_lightning.metrics moved to the torchmetrics package. Its classification metrics (Accuracy, F1Score,"
        ' AUROC, ...) need task= and, for multiclass, num_classes= (torchmetrics >= 0.11): Accuracy(task="multiclass",'
        " num_classes=10). Without them 1.x read the task off each update's inputs: (N,) scores or labels with 0/1"
        ' targets were binary (task="binary"), (N, C) scores beside (N,) labels multiclass (task="multiclass",'
        ' num_classes=C), (N, L) scores beside (N, L) 0/1 targets multilabel (task="multilabel", num_labels=L);'
        " pick the one your inputs have. The tool leaves this where the file names no class count and no stand-in"
        " reads the task as 1.x did: the probability curves (AUROC(), ROC(), AveragePrecision(),"
        " PrecisionRecallCurve(), whose 1.x class took any of the three) and keywords that decide the task"
        " (multiclass=False, subset_accuracy=True, ...). Lightning 0.8-0.9's AUROC()(pred=..., target=...), which no"
        " 1.x release had (1.2's AUROC took preds, not pred), was binary with label 1 positive, and read pred[:, 0]"
        " of scores with one more dimension than target: binary_auroc(pred, (target == 1).long()) from"
        " torchmetrics.functional.classification.",
    ),
    Rule(
        "metric-log-container",
        "2.x logs a Metric object only if it is a submodule: use nn.ModuleDict",
        "Up to 1.3, self.log(name, metric) took a torchmetrics Metric object wherever the module kept it and logged"
        " metric.compute() at the epoch's end (then reset it). Since 1.4, and in 2.x, self.log looks the Metric up"
        " among the LightningModule's submodules and raises MisconfigurationException (\"Could not find the"
        ' LightningModule attribute for the torchmetrics.Metric logged") where it is kept in a plain list, tuple or'
        " dict, which does not register it (nor move it to the module's device). Keep the metrics in an"
        ' nn.ModuleDict (self.metrics = nn.ModuleDict({"acc": Accuracy(...)}), iterated with .items()), or log'
        " metric.compute() yourself in the on_*_epoch_end hook and reset the metric there.",
    ),
    Rule(
        "test-tube-logger",
        "TestTubeLogger was removed: use TensorBoardLogger(save_dir, name, version)",
        "The test-tube package and its logger are gone. TensorBoardLogger takes the same save_dir, name and version;"
        " description, debug and create_git_tag have no equivalent. The tool rewrites a TestTubeLogger imported from"
        " Lightning itself; this TODO stays where test-tube's description is passed by position, or where the file"
        " calls TestTubeLogger without importing it (a test file missing its import, or one that gets it from a"
        " star import of another module): the name comes from somewhere the tool cannot see, or from nowhere (a"
        " NameError under 1.x too), so which class is meant is for a person to say. Import TensorBoardLogger from"
        " the Lightning package the file uses and call it with the same save_dir, name and version.",
    ),
    Rule(
        "gpu-stats-monitor",
        "GPUStatsMonitor({value}) became GPUUtilizationMonitor",
        "GPUStatsMonitor became lightning_mgpu's GPUUtilizationMonitor: it logs utilisation, memory, power and a"
        " diagnosis per rank; its arguments are log_every_n_steps, sample_interval_s, ... (docs/monitoring.md).",
    ),
    Rule(
        "fsdp-plugin",
        "{value}: FSDPStrategy is torch FSDP; its arguments differ",
        "Lightning 1.x's DDPFullyShardedPlugin wrapped FairScale's FSDP; 2.x's FSDPStrategy wraps torch's, with"
        " different arguments (auto_wrap_policy, ...). Or use this bundle's sharded_fsdp2 (torch FSDP2).",
    ),
    # -- hooks ------------------------------------------------------------------------------------------------------
    Rule(
        "optimizer-idx",
        "{hook} uses optimizer_idx: use manual optimization",
        "Lightning 2.x has one optimizer per step in automatic optimization. Set self.automatic_optimization = False"
        " in __init__, then in training_step: opt_g, opt_d = self.optimizers(); for each: loss = ...;"
        " opt.zero_grad(); self.manual_backward(loss); opt.step().",
    ),
    Rule(
        "manual-optimization",
        "training_step(..., optimizer_idx) over several optimizers -> manual optimization, stepped as 1.x did",
        "Lightning 2.0 removed automatic optimization with several optimizers. The class gets"
        " automatic_optimization = False, its step becomes _training_step_1x(self, batch, batch_idx,"
        " optimizer_index), unchanged but for the index's name, and a new training_step does per batch what 1.x's"
        ' automatic loop did: the active optimizers in order (all, or with "frequency" keys one, taking turns'
        " over consecutive batches), each with toggle_optimizer, zero_grad, the step with its index, its loss (a"
        " dict's \"loss\"), manual_backward, the Trainer's gradient clipping (moved here: 2.x refuses it under manual"
        " optimization; clipped before on_before_optimizer_step, where 1.x clipped after it), step and"
        " untoggle_optimizer; a step returning None skips its optimizer. The schedulers step after the batch as 1.x"
        ' stepped them (interval "step" every frequency batches, "epoch" after the last batch every frequency'
        " epochs). Subclasses in the file follow: their own 1.x step becomes their _training_step_1x, a step of one"
        " optimizer gets automatic_optimization = True back, and a configure_optimizers of theirs that repeats the"
        " base's frequencies loses the keys too. Frequencies the file does not spell out (a config's value, dicts"
        " updated in a loop) are read as the fit begins: the user's method is kept as _configure_optimizers_1x and a"
        " new configure_optimizers passes its result through"
        " lightning_mgpu.upgrade.legacy_optimizers.legacy_optimizer_frequencies (1.x's reading: a list of dicts,"
        " each with a frequency or none), unless the class calls configure_optimizers itself. A base's"
        " @abstractmethod step (a LightningModule is no ABC) is"
        " taken, the decorator staying on its helper; parameters after optimizer_idx are taken where each has a"
        " default and is not hiddens (1.x passed none of them, so each kept its default, as the helper's call"
        " does), and not where the file mentions truncated_bptt_steps. Where the file does not show all of it"
        " (ReduceLROnPlateau or a monitor, optimizer_step,"
        " optimizer_zero_grad or lr_scheduler_step overridden, accumulate_grad_batches, a Trainer's clipping the file"
        " does not spell out, truncated backprop) the optimizer-idx TODO stays, followed by the reason.",
        kind="rewrite",
    ),
    Rule(
        "step-end",
        "{hook} is never called in 2.x: move it to on_*_batch_end",
        "*_step_end hooks are gone. Under DDP-based strategies (ddp, sharded, horovod, ...) 1.x called them once per"
        " step with that step's output, so an EMA update, an all_gather or state stored there must move to"
        " on_train_batch_end(self, outputs, batch, batch_idx) (or on_validation_batch_end / on_test_batch_end)."
        " A value it returned replaced the step's output: return it from the step instead. Under this bundle's"
        " dp/ddp2, a body that combines the replicas' outputs goes into combine_replica_outputs(self, step_name,"
        " outputs) (docs/dp.md). The tool removes a hook that only means or sums the outputs (the bundle's dp"
        " reduces them). One that does more, called with the one output 1.x passed, is kept as _<step>_end_1x and"
        " the class gets lightning_mgpu.upgrade.step_ends.LegacyStepEnds as its last base: it runs the hook after"
        " the outermost step call a Trainer makes (on subclasses' steps too), keeping the step's output where the"
        " hook returns None, as 1.x's loops did; under dp/ddp2 its combine_replica_outputs applies the hook to the"
        " replicas' gathered outputs instead (a step without one: 1.9's DataParallel mean). Where the step collects"
        " its outputs for a converted epoch end, the step returns self._<step>_end_1x(X) instead (the list holds"
        " what the hook gave), only where the hook always returns a value, the file shows no dp/ddp2, the class is"
        " not abstract and no class of the file subclasses it. Where it cannot, an evaluation epoch end of the"
        " class's own (no base or subclass of it in the file, no on_<stage>_batch_end of its own) gets its outputs"
        " from on_validation_batch_end/on_test_batch_end instead, which 2.x calls with what the loop got (the"
        " hook's result under LegacyStepEnds); so does the epoch end of a reduce-only hook kept beside the mixin."
        " A step that predict_step calls gets no step end (1.x's predict loop called none). Elsewhere (a base's"
        " hook called through super(), several optimizers, other parameters) this TODO stays.",
    ),
    Rule(
        "epoch-end",
        "{hook}(outputs) is gone: collect outputs for {new}",
        "training_epoch_end/validation_epoch_end/test_epoch_end(outputs) became on_*_epoch_end(self) without outputs."
        " The tool collects the step's return value in self.<step>_outputs and hands it to the body as outputs"
        " (per dataloader where the step takes a dataloader index: a list per loader, as 1.x gave it), also where"
        " the hook and the step are in different classes of one file (a base's hook, a subclass's step; a"
        " super().<hook>(outputs) call hands the outputs on to the base's converted hook). A subclass's step that hands"
        " no reading hook anything (one that only raises, overriding a base's step of the file; or one whose class"
        " overrides the epoch end with one that reads nothing, with no reading subclass below it) collects nothing"
        " and does not stop the base's conversion. It leaves this TODO where"
        " no step of the class's family in the file returns its output, the step runs several optimizers, or a"
        " super() call to the hook is used as a value: collect the outputs by hand. An epoch end that only calls"
        " super().<hook>(outputs) (besides a docstring, pass and comments) in a class whose one base is"
        " LightningModule is removed: 1.x's LightningModule epoch ends did nothing, and 2.x's has none to call."
        " One written with self alone (def training_epoch_end(self):) becomes the 2.x hook with its body unchanged:"
        " 1.x (1.4 to 1.9) called an overridden epoch end with the outputs list (the training one once a batch had"
        " run, the evaluation ones always), so that signature raised TypeError and no 1.x run reached the body."
        " A validation/test epoch end whose step no class of its family in the file has (it is inherited from"
        " another file) gets on_validation_batch_end/on_test_batch_end collecting each step output into"
        " self.<stage>_batch_outputs per dataloader (a None output left out, a list per loader where there are"
        " several, as 1.x kept them), after the base's own hook; not in a Callback's or a DataModule's family, nor"
        " where the family has that hook already. A training epoch end in that shape keeps this TODO (1.x's list"
        " depended on optimizers the file does not show). The same batch-end collection serves an evaluation epoch"
        " end whose family's steps return nothing in the file (a base's raise NotImplementedError placeholder:"
        " the subclasses' steps give the outputs). A LightningModule's on_train_epoch_end(self, outputs) that"
        " reads outputs, in a class without training_epoch_end, converts the same way: 1.3 and 1.4 handed it (by"
        " the parameter's name) the list training_epoch_end would have got. An epoch end in a class that has its"
        " on_*_epoch_end hook already is kept as _<hook>_1x, converted, and that hook calls it first (1.x's order).",
    ),
    Rule(
        "epoch-end-optimizers",
        "{hook}(outputs), several optimizers: collect them as 1.x nested them",
        "With several optimizers (training_step(..., optimizer_idx)) 1.x handed training_epoch_end its outputs"
        " nested by optimizer and batch, in an order that changed: outputs[optimizer][batch] up to 1.5,"
        " outputs[batch][optimizer] from 1.6 (each entry the step's dict with its loss detached, {'loss': loss} for"
        " a bare tensor; a dimension of one squeezed away). Which one a body reads depends on the 1.x the script ran"
        " under, which the file does not say, so the tool does not collect them. training_step becomes manual"
        " optimization (rule manual-optimization), whose loop calls _training_step_1x once per optimizer: append"
        " recursive_detach(output) there in the layout the body indexes (self.training_step_outputs[optimizer_index]"
        " for 1.5's), read the list in on_train_epoch_end(self) and empty it. A body that reads the step's \"log\" or"
        ' "progress_bar" entries ran on 1.0-1.2 (outputs[optimizer][batch], each entry the step\'s whole dict):'
        " the log-returns rewrite moved those entries into self.log_dict, so collect them beside the output.",
    ),
    Rule(
        "progress-bar-dict",
        "get_progress_bar_dict is gone: override TQDMProgressBar.get_metrics",
        "Up to 1.6 the progress bar showed a LightningModule's get_progress_bar_dict() (1.x's default: the running"
        " loss as loss, the logger's version as v_num) with the prog_bar metrics over it; 2.x never calls it, and"
        " super().get_progress_bar_dict() raises. An override with 1.x's signature, def get_progress_bar_dict(self),"
        " stays as it is and the class gets lightning_mgpu.upgrade.progress_bar_dict.LegacyProgressBarDict as its"
        " last base: its super().get_progress_bar_dict() gives 1.x's default (loss, the mean of the last 20 training"
        " losses, from a callback the mixin puts first among the Trainer's callbacks; v_num), and Lightning's"
        " ProgressBar.get_metrics (TQDM's, Rich's, a subclass's super() call) shows {**module.get_progress_bar_dict(),"
        " **trainer.progress_bar_metrics} for that module, as 1.x's did, other modules unchanged. The mixin attaches"
        " in the module's setup, wrapped at class creation, so a setup without super() still runs it. A method of"
        " that name on a callback, a progress bar or a DataModule is the user's own and stays. Another signature or a"
        " decorator keeps this TODO; by hand in 2.x: class Bar(TQDMProgressBar): def get_metrics(self, trainer,"
        " pl_module): items = super().get_metrics(trainer, pl_module); ...; return items, and pass"
        " callbacks=[Bar()].",
    ),
    Rule(
        "log-returns",
        'returned "log"/"progress_bar" dicts -> self.log_dict(...)',
        'Lightning 1.0 logged the "log" and "progress_bar" entries of the dict a step or an epoch end returned; 2.x'
        " ignores them. They become self.log_dict(logs) and self.log_dict(bar, prog_bar=True) before the return; one"
        " dict in both entries becomes one self.log_dict(bar, prog_bar=True) (2.x raises where a hook logs a key twice"
        " with different arguments), and two dicts whose keys may overlap log bar with prog_bar=True and the other"
        ' keys of logs without. A dict the method returns through a local name (output = OrderedDict({"loss": loss,'
        ' "log": logs}), dict(...) or {...}, possibly given output["log"] = logs later, then return output) is'
        " followed: the calls go where the entries are put in, and the dict keeps its other keys.",
        kind="rewrite",
    ),
    Rule(
        "log-returns-unfollowed",
        '{name}: 2.x ignores its "log"/"progress_bar" entries',
        'The method returns a local dict with "log"/"progress_bar" entries (which Lightning 1.0 logged and 2.x'
        " ignores) but uses the name in a way log-returns does not follow: handed to a function, updated, aliased,"
        " read in a nested function, or given both entries by key. Log the entries with self.log_dict(logs) /"
        " self.log_dict(bar, prog_bar=True) where they are made, and drop them from the dict.",
    ),
    Rule(
        "renamed-hook",
        "a renamed hook (on_epoch_start -> on_train_epoch_start, ...)",
        "on_epoch_start/on_epoch_end became on_train_epoch_start/end, with on_validation_epoch_* and on_test_epoch_*"
        " as aliases (1.2.6-1.7 ran them in every loop's epochs; 1.8 refused them, so a file that has one is 1.7 or"
        " older); where the class has some of those hooks already (an epoch end converted from training_epoch_end),"
        " the old body becomes _on_epoch_start_1x/_on_epoch_end_1x, called first/last in each of them, as 1.x ran"
        " it. 1.0-1.1 ran both in training epochs only (1.2.0-1.2.5 ran on_epoch_start there only): a file that names"
        " TrainResult/EvalResult (1.0-1.1 only) gets on_train_epoch_start/end alone. A file whose text does not tell"
        ' its release is taken as 1.3-1.7 code, the releases most files were written for (returned "log" dicts do'
        " not tell: they stayed in files that pinned 1.4); for a 1.0-1.1 file of that kind, delete the"
        " on_validation_epoch_*/on_test_epoch_* aliases. on_pretrain_routine_start/end became on_fit_start;"
        " on_batch_start/end became on_train_batch_start/end with their 2.x parameters.",
        kind="rewrite",
    ),
    Rule(
        "super-removed-hook",
        "super().on_epoch_start()/on_epoch_end()/training_epoch_end(outputs) dropped: 1.x's did nothing",
        "1.x's LightningModule defined on_epoch_start, on_epoch_end and the training/validation/test epoch ends with"
        " an empty body (a docstring): a super() call to one in the method of the same name did nothing and gave"
        " None. 2.x's LightningModule has none of them, so the call raises AttributeError. Where the class has one"
        " base, LightningModule itself or a class of the file that has one base in turn up to LightningModule, and"
        " no class of the file on the way defines an epoch hook (1.x's or 2.x's on_*_epoch_start/end, or the"
        " _on_epoch_*_1x an earlier run made), the call goes: super().<hook>(...) as a statement is removed,"
        " return super().<hook>(...) becomes return (removed as the method's last statement), with arguments that"
        " are the method's own parameters only. The renamed-hook and epoch-end rewrites then see the method without"
        " it: an on_epoch_start/on_epoch_end beside the 2.x hooks merges into them, and an epoch end whose outputs"
        " only went to the call converts as one with unused outputs. A mixin or another file's base (the hook may"
        " be there), a base of the file with such a hook, or another use of the call (its value kept, other"
        " arguments) leaves the method as written, with its TODO.",
        kind="rewrite",
    ),
    Rule(
        "keyboard-interrupt",
        "on_keyboard_interrupt is gone: on_exception(trainer, pl_module, exception)",
        "on_keyboard_interrupt(trainer, pl_module) became on_exception(trainer, pl_module, exception); the tool renames"
        " it and runs the body under isinstance(exception, KeyboardInterrupt), as before. A hook that takes *args has"
        " no place for the exception parameter: rename it by hand.",
    ),
    Rule(
        "hook-conflict",
        "{hook} became {new}, already defined here: merge them",
        "A removed hook maps to a hook that the class already has. The tool merges them where 1.x's order is known"
        " and the merge is exact: on_epoch_start/on_epoch_end (rule renamed-hook: kept as _on_epoch_*_1x, called"
        " first/last by each loop's 2.x hook, before each bare return of an end hook too; a callback's hook may take"
        " extra parameters with defaults), and a 1.x epoch end beside its on_*_epoch_end (rule epoch-end: converted,"
        " kept as _<hook>_1x, and called first by the on_*_epoch_end hook, where that takes self alone). Elsewhere"
        " (another signature, a return with a value or under a finally clause, a private name taken, on_batch_*"
        " beside on_train_batch_*, on_keyboard_interrupt beside on_exception) merge them by hand: 1.x ran the epoch"
        " end, then on_*_epoch_end, then on_epoch_end; on_epoch_start before on_*_epoch_start.",
    ),
    Rule(
        "hook-param",
        "{hook} lost {param} in 2.x: drop its uses",
        "on_train_batch_start/on_train_batch_end lost dataloader_idx, and on_train_epoch_end lost outputs, in 2.0;"
        " training_step, optimizer_zero_grad, optimizer_step, backward, on_before_optimizer_step, lr_scheduler_step"
        " and configure_gradient_clipping lost optimizer_idx (optimizer_step also"
        " on_tpu, using_native_amp and using_lbfgs, backward its optimizer). The tool drops a parameter the body does"
        " not use; one it uses is left with this TODO (optimizer_idx in use: the optimizer-idx TODO; a module's"
        " on_train_epoch_end(self, outputs) whose step's outputs can be collected: rule epoch-end), but for"
        " lr_scheduler_step(self, scheduler, optimizer_idx, metric), whose body gets optimizer_idx ="
        " self.trainer.optimizers.index(scheduler.optimizer): what 1.x passed (the index of the scheduler's optimizer"
        " among configure_optimizers', matched with scheduler.optimizer). Likewise on_before_optimizer_step: a"
        " callback's (self, trainer, pl_module, optimizer, opt_idx), whatever the index's name, and a module's"
        " (self, optimizer, optimizer_idx) lose the index, a body that reads it getting opt_idx ="
        " trainer.optimizers.index(optimizer) (a module's: self.trainer.optimizers): 1.x passed the optimizer's index"
        " among the Trainer's, and 2.x passes the same optimizer object. So does configure_gradient_clipping(self,"
        " optimizer, optimizer_idx, gradient_clip_val, gradient_clip_algorithm), which 1.x called with the index"
        " second (whatever its name) and 2.x calls with the optimizer and the two values by keyword.",
    ),
    Rule(
        "finetune-function",
        "finetune_function: 2.x calls it (pl_module, current_epoch, optimizer)",
        "Lightning 2.0's BaseFinetuning calls finetune_function(pl_module, current_epoch, optimizer) once for each"
        " of trainer.optimizers; 1.x passed the optimizer's index as well, so a 1.x override (of a BaseFinetuning or"
        " BackboneFinetuning subclass, followed through the file's classes) raises TypeError. The tool drops the"
        " fifth parameter of finetune_function(self, pl_module, epoch, optimizer, idx) and its argument in"
        " super().finetune_function(...) calls; a body that reads it gets idx ="
        " pl_module.trainer.optimizers.index(optimizer), the index 1.x passed (1.x's loop enumerated"
        " trainer.optimizers). A file's own copy of 1.x's BaseFinetuning also calls"
        " self.finetune_function(pl_module, epoch, optimizer) and loops over enumerate(trainer.optimizers) instead of"
        " 1.x's private _get_active_optimizers(optimizers, frequencies, batch_idx), its import gone (2.x has no"
        " optimizer frequencies: every optimizer is active, as in 2.x's own BaseFinetuning). Another signature"
        " (*args, defaults, a decorator, a super() call passing another value) keeps this TODO: drop the index.",
    ),
    Rule(
        "init-hooks",
        "{hook} is never called in 2.x: call it by hand just before/after Trainer(...)",
        "A Callback's on_init_start(trainer)/on_init_end(trainer) ran inside Trainer(...) (1.x up to 1.7: on_init_start"
        " before the Trainer set itself up, on_init_end once it had), once per Trainer built with the callback; 2.x"
        " removed them and never calls them. Nothing in 2.x runs at that point: call the body yourself right before"
        " (on_init_start) or after (on_init_end) the Trainer(...) call that gets the callback, or move it to the"
        " callback's __init__ or setup(trainer, pl_module, stage) where running it later (at fit/validate/test start,"
        " once per stage) gives the same result.",
    ),
    Rule(
        "hparams-assign",
        "self.hparams = ... fails in 2.x: call self.save_hyperparameters(...)",
        "hparams is read-only in 2.x; self.save_hyperparameters(hparams) stores a Namespace or dict the same way.",
    ),
    # -- the tool itself -------------------------------------------------------------------------------------------
    Rule(
        "internal-error",
        "{node} not converted: the tool raised {error}; please report it",
        "lightning-mgpu upgrade raised an exception while rewriting this construct, so the construct was left as it"
        " was; the rest of the file was converted. Convert it by hand, and please report it with the construct's code"
        " and the exception the TODO names.",
    ),
    # -- notes ------------------------------------------------------------------------------------------------------
    Rule(
        "fairscale-checkpoint",
        "checkpoint_wrapper works; ActivationCheckpointing needs no model edit",
        "FairScale's checkpoint_wrapper keeps working under every strategy; lightning_mgpu's ActivationCheckpointing"
        " callback does the same without touching the model code and under every strategy.",
        kind="note",
    ),
)


def one_line(value: object, limit: int | None = None) -> str:
    """``value`` as text that fits on one comment line: every run of whitespace (line breaks included: a comment
    cannot hold one) becomes one space, and the result is cut to ``limit`` characters, ending in ``...``.

    Args:
        value: any value; its ``str()`` is used (the code of a node that may span several lines).
        limit: the most characters kept (None: all).
    """
    text = re.sub(r"([(\[{]) | ([)\]}])", r"\1\2", " ".join(str(value).split()))  # "(\n    x\n)" -> "(x)"
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 3, 0)] + "..."
    return text


def todo_text(rule_id: str, **values: object) -> str:
    """The comment text of a TODO (without the ``#``): the rule's short text with ``values`` on one line, each cut to
    24 characters.

    Raises:
        KeyError: an unknown rule, or a value the rule's text names is missing.
    """
    short = {k: one_line(v, 24) for k, v in values.items()}
    return one_line(f"{TODO_TAG}{rule_id}): {RULES[rule_id].todo.format(**short)}")


def explain(rule_id: str) -> str | None:
    """A rule's full text, headed by what it leaves in a file (None for an unknown rule): ``TODO(lightning-mgpu:ID):
    ...`` or ``NOTE(...)``, or ``ID (a rewrite): ...`` for a rule that only rewrites."""
    rule = RULES.get(rule_id)
    if rule is None:
        return None
    head = f"{rule.id} (a rewrite)" if rule.kind == "rewrite" else f"{rule.kind.upper()}(lightning-mgpu:{rule.id})"
    return f"{head}: {rule.todo}\n\n{rule.text}"


RULES_TABLE_HEADER = "| rule | kind | what it says |\n|---|---|---|"


def rules_markdown() -> str:
    """docs/upgrade.md's table of every rule, from the registry (``lightning-mgpu upgrade --rules-markdown``)."""
    rows = [f"| `{rule.id}` | {rule.kind} | {rule.text} |" for rule in RULES.values()]
    return "\n".join([RULES_TABLE_HEADER, *rows])


def rule_of(text: str) -> str:
    """The rule id a TODO's or a note's comment text names (``""`` where it names none)."""
    match = re.search(r"(?:TODO|NOTE)\(lightning-mgpu:([a-z0-9-]+)\)", text)
    return match.group(1) if match else ""


def note_text(rule_id: str) -> str:
    """The comment text of a note (advice on code that keeps working, or on what was dropped)."""
    return one_line(f"NOTE(lightning-mgpu:{rule_id}): {RULES[rule_id].todo}")


# -- issue 53: rules the real-code corpus asked for (benchmarks/bench_upgrade_real.py); their rewrites live in
# metrics.py, removed_names.py, ... ------------------------------------------------------------------------------------
RULES.update(
    _rules(
        Rule(
            "metrics-num-classes",
            'task="multiclass" and the class count this file names were added',
            "torchmetrics >= 0.11 needs task= where 1.x inferred binary or multiclass from the inputs. Where the file"
            " names the class count (num_classes in the call, a parameter or local of the enclosing function, a"
            " num_classes= (or pytorchvideo's model_num_class=) given to another call there or in a method it calls"
            " with the parameter that count is read off, self.num_classes or self.hparams.num_classes in the class, a"
            ' module constant NUM_CLASSES), the metric becomes Metric(task="multiclass", num_classes=N), as 1.x'
            " computed it for a multiclass model; AUROC/ROC/average precision, often binary per label, are left with"
            " the metrics-task TODO.",
            kind="rewrite",
        ),
        Rule(
            "metrics-inferred-task",
            "a stand-in that reads the task off the inputs as torchmetrics <= 0.10 did",
            "torchmetrics >= 0.11 needs task= where 1.x inferred binary, multiclass or multilabel from the inputs."
            " Where the file names no class count, Accuracy() becomes LegacyAccuracy(), accuracy(preds, target)"
            " legacy_accuracy(preds, target) and auroc(preds, target) legacy_auroc(preds, target), Precision(),"
            " Recall() and F1Score() (F1() before torchmetrics 0.7) LegacyPrecision(), LegacyRecall() and"
            " LegacyF1Score(), and their functions legacy_precision, legacy_recall and legacy_f1_score, from"
            " lightning_mgpu.upgrade.legacy_metrics: they read the inputs as torchmetrics 0.10.3 did and compute what"
            " it computed (micro accuracy, top_k= on multiclass scores included; micro precision, recall and F1:"
            " binary, multilabel, or multiclass where they equal the accuracy; binary AUROC, the only one 0.10 took"
            " without num_classes). Other keywords,"
            " and other metrics, keep the metrics-task TODO. To fix the task, pass task= to torchmetrics' own metric.",
            kind="rewrite",
        ),
        Rule(
            "trainer-splat-translated",
            "settings splatted into the Trainer are translated at run time by legacy_trainer_kwargs",
            "Trainer(**settings) where the settings come from somewhere this tool cannot read (a config file, a"
            " function's **kwargs, an attribute) becomes Trainer(**legacy_trainer_kwargs(settings)), from"
            " lightning_mgpu.upgrade.trainer_args: it translates the 1.x keys as 1.x's Trainer read them (gpus,"
            ' accelerator="ddp", precision=16, checkpoint_callback, progress_bar_refresh_rate, ...) and passes 2.x'
            " ones through, and refuses a key with no 2.x meaning (resume_from_checkpoint, auto_lr_find, ...) with"
            " a ValueError that names the 2.x way. The call's own callbacks= goes into the translation, so that a"
            " progress bar a 1.x key adds joins them. Two or more such splats are translated together,"
            " Trainer(**a, **b) -> Trainer(**legacy_trainer_kwargs(a, **b)): a 1.x key in one and its 2.x key in"
            " the other still meet, and a key given in both is refused (ValueError) where 1.x's call refused it"
            " (TypeError). The call's progress_bar_refresh_rate=, weights_summary=, terminate_on_nan= and"
            " stochastic_weight_avg= with values the tool cannot read go into the same translation as keywords,"
            " which reads them as 1.x's Trainer did (instead of their TODOs). A 1.x key written into settings that"
            " reach a Trainer only this way needs no TODO where"
            " the translation takes it (rule trainer-key-refused where it does not).",
            kind="rewrite",
        ),
        Rule(
            "metrics-legacy-args",
            "torchmetrics <= 0.10 keywords that task= now says were dropped",
            "torchmetrics 0.11 removed multiclass=, is_multiclass=, mdmc_average=, subset_accuracy= and"
            ' compute_on_step= (its metrics refuse them). Beside task="multiclass", multiclass=True,'
            ' mdmc_average="global" (multidim_average="global" is the default), subset_accuracy=False (the default)'
            " and compute_on_step= (False only made forward() return None instead of the batch's value) say nothing"
            " more and are dropped; compute_on_step= alone also goes beside the stand-in that reads the task off the"
            " inputs (rule metrics-inferred-task: Accuracy(compute_on_step=False) -> LegacyAccuracy()). Any other"
            " value decides the task (multiclass=False treated the inputs as binary): the metrics-task TODO stays.",
            kind="rewrite",
        ),
        Rule(
            "trainer-training-type-plugin",
            "trainer.training_type_plugin became trainer.strategy",
            "Trainer.training_type_plugin was renamed Trainer.strategy in 1.6 and removed in 2.0; the object is the"
            " same (its reduce, barrier, root_device, ... keep their names).",
            kind="rewrite",
        ),
        Rule(
            "trainer-root-gpu",
            "trainer.root_gpu became trainer.strategy.root_device.index",
            "Trainer.root_gpu (removed in 2.0) was the index of the process's GPU, or None off the GPU:"
            " trainer.strategy.root_device.index gives the same (None on the CPU).",
            kind="rewrite",
        ),
        Rule(
            "epoch-output-type",
            "EPOCH_OUTPUT became list[STEP_OUTPUT]",
            "pytorch_lightning.utilities.types.EPOCH_OUTPUT (List[STEP_OUTPUT]) was removed with the *_epoch_end"
            " hooks in 2.0: an annotation becomes list[STEP_OUTPUT], any other use STEP_OUTPUT.",
            kind="rewrite",
        ),
        Rule(
            "test-tube-logger-args",
            "TestTubeLogger became TensorBoardLogger",
            "TestTubeLogger wrote TensorBoard event files through the test-tube package, which 2.0 dropped:"
            " TensorBoardLogger writes the same files. Its save_dir, name, version, log_graph and prefix carry over;"
            ' name="default" (TestTube\'s default) is passed where the call gave none, so that the logs land where they'
            " did; description, debug and create_git_tag (test-tube's own) are dropped. A call with a third"
            " positional argument keeps the test-tube-logger TODO.",
            kind="rewrite",
        ),
        Rule(
            "trainer-conflict-resolved",
            "a default beside the 1.x argument that sets it was dropped",
            "1.x code often spelled a default next to the 1.x argument that 2.x moves into the same place:"
            " Trainer(gpus=2, accelerator=None) (None was no distributed mode; the device type comes from gpus),"
            ' Trainer(accelerator="ddp", strategy=None) or strategy="auto". The default goes and the 1.x argument'
            ' moves (otherwise a trainer-conflict TODO). accelerator="ddp", plugins="ddp_sharded" was 1.x\'s own'
            ' spelling of sharded training: strategy="ddp_sharded", as a plugin object wins over the string.',
            kind="rewrite",
        ),
        Rule(
            "tuner",
            "trainer.tuner.lr_find/scale_batch_size became Tuner(trainer).lr_find/scale_batch_size",
            "2.0 moved the tuner out of the Trainer: trainer.tuner.lr_find(model, ...) (and trainer.lr_find,"
            " scale_batch_size) is lightning.pytorch.tuner.Tuner(trainer).lr_find(model, ...), from the file's own"
            " namespace. 1.x's lr_find left the model's learning rate alone unless asked; 2.x sets it by default, so"
            " update_attr=False is passed where the call did not say. train_dataloader= became train_dataloaders=."
            " A call with more than three positional arguments is left as it is (2.x put dataloaders= before"
            " datamodule=).",
            kind="rewrite",
        ),
        Rule(
            "ddp-spawn-isinstance",
            "isinstance(s, (DDPStrategy, DDPSpawnStrategy)): the spawn class went from the tuple",
            '2.0 removed DDPSpawnStrategy (and 1.5\'s DDPSpawnPlugin): ddp_spawn is DDPStrategy(start_method="spawn")'
            " in 2.x. In an isinstance() tuple that also holds the class it became (DDPStrategy, or DDPPlugin renamed"
            " to it), the spawn class goes: the tuple matches ddp and ddp_spawn as it did. Alone, isinstance(s,"
            " DDPSpawnStrategy) has no 2.x class to name: rule spawn-isinstance.",
            kind="rewrite",
        ),
        Rule(
            "spawn-isinstance",
            "isinstance(s, DDPSpawnStrategy) -> legacy_is_ddp_spawn(s), what 1.x's check said",
            "1.x's DDPSpawnStrategy (DDPSpawnPlugin up to 1.5) served ddp_spawn, and from 1.7 ddp_fork and"
            " ddp_notebook; its subclasses the sharded spawn strategy and TPUs. 2.x serves them with DDPStrategy"
            " started by spawn/fork/forkserver (XLAStrategy and the bundle's sharded strategies subclass it), plain"
            " ddp and DeepSpeed with popen. isinstance(s, DDPSpawnStrategy) becomes"
            " lightning_mgpu.upgrade.legacy_spawn.legacy_is_ddp_spawn(s), true for exactly those; in a tuple without"
            " DDPStrategy, (isinstance(s, (others,)) or legacy_is_ddp_spawn(s)), where s is a name or an attribute"
            " chain; DDPSpawnStrategy.__name__ becomes the string 'DDPSpawnStrategy'. A 1.x ddp_cpu run (a spawn"
            " strategy in 1.x) is converted to popen ddp (note ddp-cpu-gradient-mean), where the check says False.",
            kind="rewrite",
        ),
        Rule(
            "checkpoint-prefix-moved",
            'ModelCheckpoint(prefix=P) became filename="P-..." (and CHECKPOINT_NAME_LAST = "P-last")',
            '1.0-1.2\'s ModelCheckpoint(prefix=P) joined P and "-" in front of the formatted filename, and of'
            ' "last" when save_last was on. 2.x: filename="P-<the filename>", and name.CHECKPOINT_NAME_LAST ='
            ' "P-last" after the callback is built, where save_last may be on. Where the prefix and the filename are'
            " literals and the prefix holds no brace; an empty prefix changed nothing and goes. Without filename= the"
            ' default name depended on the release (1.0 "{epoch}", 1.1-1.2 "{epoch}-{step}"); that, a callback with'
            " save_last that is not assigned to a name, or a prefix or filename this tool cannot read keeps the"
            " checkpoint-prefix TODO. Beside a filepath (1.0-1.1) whose name the literal rewrite cannot fold,"
            " prefix=P goes into **legacy_checkpoint_filepath(X, prefix=P), which joins it when the callback is"
            " built, as 1.x did (the default pattern written out where the path is a folder), and refuses a prefix"
            " with braces, which 2.x would format; save_last beside it, a ** splat or a literal prefix with braces"
            " keeps the TODO.",
            kind="rewrite",
        ),
        Rule(
            "tuner-flags",
            "auto_lr_find=/auto_scale_batch_size= and trainer.tune() became Tuner(trainer) calls",
            "1.x's trainer.tune(model, ...) ran the batch-size scaling that Trainer(auto_scale_batch_size=) asked for,"
            " then the learning-rate finder of auto_lr_find= (which set the model's lr or learning_rate, or the"
            " attribute a string named). 2.x: Tuner(trainer).scale_batch_size(model, ..., mode=...) and"
            " Tuner(trainer).lr_find(model, ..., attr_name=...), from the file's namespace; a flag that is off runs"
            " nothing, and one this tool cannot read runs under if flag:. Where the Trainer is assigned once to a"
            " local name whose one tune() call is a statement of its own (tune()'s dataloaders and datamodule carry"
            " over; scale_batch_size_kwargs=, lr_find_kwargs= or four positional arguments keep the trainer-tune"
            " TODO). 1.7-1.9 ran tune() under isolate_rng(): 2.x's lr_find restores the random state too,"
            " scale_batch_size does not. Power scaling with no out-of-memory error: 1.9 capped the size at the"
            " training set's length, 2.x stops at the first power of two at or past it (200 samples: 1.9.5 found"
            " 200, 2.x 256; one batch either way; tests/helpers/upgrade_equivalence/auto_scale_batch_size.py).",
            kind="rewrite",
        ),
        Rule(
            "tuner-tune-result",
            'result = trainer.tune(...) read as result["lr_find"] became a dict of the Tuner calls',
            '1.x\'s trainer.tune(model, ...) returned a dict with a key for each tuner it ran: "scale_batch_size"'
            ' (the size found) and "lr_find" (the finder object, with .suggestion()). Where the Trainer\'s flags are'
            " not in this file (a config splatted into it) but the result is assigned once to a local name that is"
            ' only read as result["lr_find"] / result["scale_batch_size"], those keys say which tuners ran, and the'
            ' call becomes {"scale_batch_size": Tuner(trainer).scale_batch_size(...), "lr_find":'
            " Tuner(trainer).lr_find(...)} (the keys read, in 1.x's order), so each lookup works as before."
            " lr_find keeps 2.x's update_attr=True: 1.x's tune() set the learning rate it found too, on lr or"
            " learning_rate (a string auto_lr_find named another attribute, which 2.x's attr_name= takes: with"
            " neither attribute 2.x's finder raises). A tuner whose key is never read is taken to have been off;"
            " tune()'s dataloaders and datamodule carry over as for tuner-flags, and any other use of the result"
            " keeps the trainer-tune TODO.",
            kind="rewrite",
        ),
        Rule(
            "tuner-flags-read",
            "trainer.tune() became legacy_tune(trainer, ...), which runs the tuners the parsed flags turned on",
            "trainer = Trainer.from_argparse_args(args, ...) took auto_lr_find/auto_scale_batch_size from the command"
            " line, and trainer.tune(model, ...) ran the tuners they turned on. The converted from_argparse_args"
            " (lightning_mgpu.upgrade.trainer_args) keeps the two flags on the Trainer (2.x's takes neither), and"
            " trainer.tune(...) becomes legacy_tune(trainer, ...) (lightning_mgpu.upgrade.tuning): as 1.9's tune(),"
            " Tuner(trainer).scale_batch_size(..., mode=the flag's string or 'power') then"
            " Tuner(trainer).lr_find(..., update_attr=True, attr_name=the flag's string), for the flags that are on,"
            " returning 1.x's dict of their results; with both off it runs nothing. Where the trainer's name is only"
            " ever assigned such a call (no flag written in it) in the tune() call's scope and only ever used as"
            " trainer.<attribute> there; tune()'s loaders, datamodule, scale_batch_size_kwargs= and lr_find_kwargs="
            " carry over. What tuner-flags says of 2.x's Tuner holds here too.",
            kind="rewrite",
        ),
        Rule(
            "tuner-flags-unused",
            "auto_lr_find/auto_scale_batch_size dropped: only tune() read them",
            "Since 1.0 only trainer.tune() read auto_lr_find= and auto_scale_batch_size= (fit() did not). They are"
            " dropped, with this note, where they are off (False, None) or where the Trainer is a local name of a"
            " function (or of a script that runs it at module level: trainer.fit/validate/test/predict) that never"
            " calls its tune() and never hands the trainer on (not returned, passed or stored; the name may be"
            " assigned a Trainer in several plain assignments, one per branch of an if; in a notebook, a"
            " module-level trainer that no cell tunes or hands on, read over every cell at once):"
            " nothing could run them (a Trainer(...) call, or Trainer.from_argparse_args(args, ...)'s own keywords:"
            " a flag the parsed arguments hold is left to the run-time translation)."
            " trainer.tuner.lr_find(...) (Tuner(trainer).lr_find now) ran the finder"
            " whatever the flag said.",
            kind="note",
        ),
        Rule(
            "trainer-args-translated",
            "settings this tool cannot read are translated at run time by legacy_trainer_kwargs",
            "Trainer(accelerator=args.accelerator, gpus=args.gpus, progress_bar_refresh_rate=args.rate, ...): values"
            ' from a command line or a config, which 1.x read by what they held (accelerator="ddp" was a strategy,'
            ' "gpu" a device type; a refresh rate of 0 hid the bar). The settings that decide the devices, the'
            " strategy, the progress bar and the model summary (accelerator, distributed_backend, strategy, gpus,"
            " num_processes, tpu_cores, ipus, devices, progress_bar_refresh_rate, enable_progress_bar,"
            " weights_summary, enable_model_summary, and the flags that became one of the bundle's callbacks:"
            " terminate_on_nan, stochastic_weight_avg, whose callback is added when the value is true) move together"
            " into **legacy_trainer_kwargs(...), with the call's callbacks=, from lightning_mgpu.upgrade.trainer_args:"
            " it translates them as 1.x's Trainer read them when"
            " the Trainer is built, and refuses a value with no 2.x meaning with a ValueError. Only where each TODO the"
            " call would get is trainer-accelerator-unknown, trainer-accelerator-unread, trainer-conflict,"
            " trainer-progress-bar or trainer-weights-summary and one comes from a value the tool cannot read; two"
            " literals that disagree stay a trainer-conflict TODO, and a call with a splat of its own is left to the"
            " other rules. plugins="
            " stays out of the translation: where it is a training-type plugin the strategy rewrite turns into"
            " strategy=DDPStrategy(...), that strategy moves with the rest (the translation keeps a strategy object"
            ' beside accelerator="ddp"/"ddp_spawn", as 1.x let the plugin refine the backend string); except'
            " plugins=NAME where some assignment of NAME in its scope (or a branch or list element of one) builds a"
            " 1.x plugin or a strategy and others may not (DDPPlugin(...) in one branch, None or opt.plugins in"
            " others): plugins= moves into the translation with those settings, whatever the call's other values,"
            " and legacy_trainer_kwargs moves a strategy it holds (an object, alone or in a list or tuple, or a 1.x"
            " or registered strategy name) to strategy=, as 1.x's accelerator connector took it (a different"
            " strategy= beside it, or two strategies, is a ValueError); any other plugins= leaves the call to the"
            " other rules.",
            kind="rewrite",
        ),
        Rule(
            "trainer-gpus-beside-accelerator",
            'gpus=X beside accelerator="gpu" became devices=X or "auto"',
            'Trainer(accelerator="gpu", gpus=X) with X a value this tool cannot read (torch.cuda.device_count(), a'
            " flag): 1.5-1.9 kept the GPU accelerator the call named and took X devices, or every GPU where X was 0"
            ' or None (devices left unset meant all of them). 2.x: accelerator="gpu", devices=X or "auto". Without'
            ' accelerator="gpu" a gpus= that may be 0 keeps its CPU path (trainer-devices).',
            kind="rewrite",
        ),
        Rule(
            "track-grad-norm-callback",
            "track_grad_norm became the bundle's TrackGradNorm callback",
            "Trainer(track_grad_norm=p) logged the gradients' p-norms before each step of the first optimizer (after"
            " the backward, before clipping), through the module's log_grad_norm (default: log_dict(norms,"
            " on_step=True, on_epoch=True)). The tool writes callbacks=[TrackGradNorm(p)] (lightning_mgpu.callbacks, or"
            " lightning_mgpu.pl.callbacks under pytorch_lightning), which does what 1.6-1.9 did: 1.9's norms (floats"
            " rounded to 4 decimals, keys joined by the one logger's group separator), logged by the module's own"
            " log_grad_norm where it defines one. A hook in the module logging 2.x's grad_norm(self, p) would"
            " differ (on step only, no _epoch mean, for every optimizer, past the module's log_grad_norm), so the"
            " callback serves every file, the module in it or not. 1.4 computed them only every log_every_n_steps"
            " steps (its epoch mean covers those steps) and 1.4-1.5 showed them in the progress bar too."
            " track_grad_norm=-1 (off) is removed; a value the tool cannot read goes to the callback, which refuses"
            " what 1.x refused. A literal 1.x refused, or callbacks= the tool cannot extend, keeps the"
            " trainer-track-grad-norm TODO.",
            kind="rewrite",
        ),
    )
)
RENAMED_NAMES.update(
    {
        ("loggers", "TestTubeLogger"): ("loggers", "TensorBoardLogger"),
        ("loggers.test_tube", "TestTubeLogger"): ("loggers", "TensorBoardLogger"),
        ("utilities.types", "EPOCH_OUTPUT"): ("utilities.types", "STEP_OUTPUT"),
    }
)
# log_gpu_memory only logged nvidia-smi's memory figures: dropped with a NOTE that names the 2.x monitors.
DROPPED_ARGS["log_gpu_memory"] = "trainer-log-gpu-memory"
RULES["trainer-log-gpu-memory"] = Rule(
    "trainer-log-gpu-memory",
    "log_gpu_memory dropped: add DeviceStatsMonitor or GPUUtilizationMonitor",
    "log_gpu_memory logged nvidia-smi's memory figures; 2.x removed it. Dropped, with this note: it changed nothing a"
    " run computes. To keep the figures: callbacks=[DeviceStatsMonitor()], or this bundle's GPUUtilizationMonitor"
    " (lightning_mgpu.callbacks: utilisation, memory, power and a diagnosis per rank).",
    kind="note",
)

#: Keys of a settings dict that only a 1.x Trainer took: a dict or config that still holds one after the rewrite (one
#: the tool does not follow into a Trainer) gets the trainer-key-unfollowed TODO.
LEGACY_SETTINGS_KEYS = frozenset(
    {
        "gpus",
        "num_processes",
        "distributed_backend",
        "checkpoint_callback",
        "weights_summary",
        "replace_sampler_ddp",
        "resume_from_checkpoint",
        "progress_bar_refresh_rate",
        "amp_backend",
        "amp_level",
        "auto_select_gpus",
        "reload_dataloaders_every_epoch",
    }
)
#: The keys of LEGACY_SETTINGS_KEYS that trainer_args.legacy_trainer_kwargs (which from_argparse_args calls too)
#: translates as 1.x's Trainer read them -> the literal values it takes (None: any value, literal or not). A key whose
#: value is not among them (resume_from_checkpoint=path, checkpoint_callback=ModelCheckpoint(...), a value the tool
#: cannot read where only some are taken) is refused there with a ValueError: settings that reach a Trainer only
#: through that translation still need a person for it (rule trainer-key-refused). tests/unit/upgrade checks each
#: entry against legacy_trainer_kwargs itself.
RUN_TIME_KEYS: dict[str, tuple[object, ...] | None] = {
    "gpus": None,
    "num_processes": None,
    "replace_sampler_ddp": None,
    "reload_dataloaders_every_epoch": None,
    "progress_bar_refresh_rate": None,
    "auto_select_gpus": None,
    "distributed_backend": (None, "", *STRATEGY_STRINGS),
    "checkpoint_callback": (None, True, False),
    "weights_summary": (None, "top", "full"),
    "amp_backend": (None, "native"),
    "amp_level": None,
    "resume_from_checkpoint": (None,),
}


def translated_at_run_time(key: str, value: object) -> bool:
    """Whether legacy_trainer_kwargs translates the 1.x settings key ``key`` holding ``value`` (a literal's value, or
    ``...`` where the value is no literal) without refusing it (:data:`RUN_TIME_KEYS`). ``True`` is not taken for
    ``1`` (legacy_trainer_kwargs checks checkpoint_callback's type)."""
    if key not in RUN_TIME_KEYS:
        return False
    taken = RUN_TIME_KEYS[key]
    return taken is None or (value is not ... and any(type(value) is type(t) and value == t for t in taken))


#: The evaluation hooks 1.x never passed an ``optimizer_idx`` to (a parameter of theirs always held its default).
EVAL_STEP_HOOKS = ("validation_step", "test_step", "predict_step")
RULES.update(
    _rules(
        Rule(
            "trainer-key-unfollowed",
            "1.x Trainer key {value}, in settings not followed into a Trainer",
            "A 1.x Trainer key (gpus, distributed_backend, checkpoint_callback, ...) is written into a dict or a config"
            ' object (settings["gpus"] = n, {"checkpoint_callback": ...}, dict(gpus=...)) that this tool cannot follow'
            " into a Trainer, so it was left as it was. If the settings reach Trainer(**settings) or"
            " from_argparse_args(Trainer, ...) from lightning_mgpu.upgrade.trainer_args, they are translated at run"
            ' time as 1.x read them; any other path needs the 2.x key: gpus=N -> accelerator="gpu", devices=N (0 or'
            ' None: accelerator="cpu"); distributed_backend=X -> strategy=X; checkpoint_callback=True/False ->'
            " enable_checkpointing=, a ModelCheckpoint -> callbacks=[...]; weights_summary=None ->"
            " enable_model_summary=False; replace_sampler_ddp -> use_distributed_sampler; resume_from_checkpoint ->"
            " trainer.fit(..., ckpt_path=); progress_bar_refresh_rate -> TQDMProgressBar(refresh_rate=) or"
            " enable_progress_bar=False. Where the key only names something of the script's own (a callback's label in"
            " a config, a value the script reads back itself by that key), nothing needs to change: drop the TODO. The"
            " TODO is not written where the settings go into a named holder (H = {...}, H = dict(...), H ="
            ' Munch({...}) or another mapping class around one dict, H["gpus"] = n; not a class attribute, not a dict'
            " handed straight to some other call) that nothing in the file may hand to a Trainer whole: H, a path"
            " holding it or one inside it (self.H also as obj.H) is never splatted, given positionally to a call"
            " named ...Trainer or Namespace, given in any way to from_argparse_args or instantiate, given to a keyword"
            " with trainer in its name (LightningCLI(trainer_defaults=H)), returned from a"
            " function the file does not call itself (or whose result reaches a Trainer), handed to a parameter of a"
            " function of the file that reaches one, or handed to a call whose result is a trainer (a name with"
            " trainer in it, one annotated Trainer, one whose fit is called, or build(H).fit(...)); what H flows"
            " into (an alias, {**H},"
            " d[k] = H, a loop over H, a method's result) is followed the same way. The script then reads its fields"
            " itself (gpus=config.trainer.gpus in a Trainer call, which that call's rewrite converts) or hands it to"
            " a model. Settings that reach a Trainer only through this bundle's translation at run time (a splat the"
            " tool hands to legacy_trainer_kwargs, Trainer.from_argparse_args, Namespace(**H) given to it) need no"
            " TODO for a key that translation takes; a key or value it refuses gets trainer-key-refused instead. The"
            " leftover scan decides the same independently and names a key it finds reaching with no TODO.",
        ),
        Rule(
            "trainer-foreign-class",
            "{name}: 1.x Trainer keys {keys}: rewrite if it is Lightning's",
            "A class named like a Trainer that the tool does not rewrite as Lightning's (a library's Trainer"
            " subclass, such as baal's BaalTrainer, or a subclass in this file whose __init__ the tool does not"
            " follow) is called with keywords"
            " only a 1.x Lightning Trainer took (gpus=, distributed_backend=, progress_bar_refresh_rate=, ...). If the"
            " class hands them on to Lightning's Trainer, write the 2.x ones as for Trainer(...): gpus=N ->"
            ' accelerator="gpu", devices=N; distributed_backend=X -> strategy=X; or pass them through'
            " **legacy_trainer_kwargs(...) from lightning_mgpu.upgrade.trainer_args, which translates them as 1.x read"
            " them. The tool does not rewrite them itself: which Trainer the class builds, and whether the library has"
            " a 2.x release, only its package says.",
        ),
        Rule(
            "trainer-key-refused",
            "1.x Trainer key {value} reaches legacy_trainer_kwargs, which refuses it",
            "A 1.x Trainer key is written into settings that reach a Trainer only through this bundle's run-time"
            " translation (Trainer(**legacy_trainer_kwargs(settings)), from_argparse_args(Trainer, ...), what the"
            " tool writes for Trainer(**settings) and Trainer.from_argparse_args), which translates most 1.x keys as"
            " 1.x read them (the settings then need nothing: no TODO) but refuses this one, or this value, with a"
            " ValueError, because 2.x has no Trainer argument for it. Take it out of the settings and pass it the"
            " 2.x way: resume_from_checkpoint=path -> legacy_resume(Trainer(...), path) around the Trainer built"
            " from the settings (lightning_mgpu.upgrade.legacy_resume: its next fit resumes, once, as 1.4-1.9's"
            " did), or trainer.fit(..., ckpt_path=path) on its fit; checkpoint_callback=<a ModelCheckpoint>"
            " -> callbacks=[..., checkpoint]; distributed_backend=X that is no 1.x backend name -> strategy=X;"
            ' weights_summary= other than "top", "full" or None -> ModelSummary(max_depth=...);'
            ' amp_backend="apex" -> 2.x has no apex: precision="16-mixed" is native AMP (the numbers differ from'
            " apex's O1/O2). Where the value the tool could not read is one the translation takes"
            ' (checkpoint_callback=flag holding True or False, distributed_backend=name holding "ddp"), nothing needs'
            " to change: drop the TODO.",
        ),
        Rule(
            "trainer-accelerator-connector",
            "gone: read trainer.strategy, .accelerator, .num_devices",
            "Trainer.accelerator_connector (1.x, public) became the private Trainer._accelerator_connector in 2.0, with"
            " other attributes: use_ddp, use_ddp2, use_dp, num_gpus, parallel_device_ids, ... are gone. Read the"
            " public Trainer instead: isinstance(trainer.strategy, DDPStrategy) (lightning's strategies; 1.x's use_ddp"
            " also covered ddp_spawn, ddp_sharded and DeepSpeed, all DDPStrategy subclasses or siblings: check which"
            " the code meant), trainer.strategy is this bundle's DataParallelStrategy / DDP2Strategy for use_dp /"
            " use_ddp2, trainer.accelerator (the device type), trainer.num_devices, trainer.device_ids,"
            " trainer.world_size.",
        ),
        Rule(
            "result-object",
            "{name} is gone: self.log in the step; return loss or what epoch ends read",
            "Lightning 1.0's TrainResult and EvalResult were deprecated in 1.0 and removed in 1.1. In 2.x: call"
            " self.log(name, value, prog_bar=..., on_step=..., on_epoch=...) and self.log_dict(...) in the step"
            " instead of result.log/log_dict; a training step returns the loss (TrainResult(minimize=loss)) or a dict"
            ' with "loss"; checkpoint_on=/early_stop_on= become ModelCheckpoint(monitor=...) and'
            " EarlyStopping(monitor=...) on a logged name; an evaluation step returns what its epoch end needs, or"
            " nothing. The tool does this itself (result-object-log) where a hook builds the object, logs through it"
            " and returns it; this TODO stays where the object is used otherwise: passed on, an attribute read,"
            " hiddens=, 1.0-only log keywords (sync_dist_op, tbptt_*), or a step whose outputs a *_step_end or"
            " *_epoch_end reads. 1.0 handed an epoch end one object whose attribute for a logged name held every"
            " step's value (outputs.val_loss: scalar tensors stacked, tensors of one trailing shape concatenated,"
            " anything else a list): have the step return {name: value} (collected for on_*_epoch_end) and read"
            " torch.stack/torch.cat or [o[name] for o in outputs] there, as 1.0 combined them.",
        ),
        Rule(
            "result-object-log",
            "TrainResult/EvalResult -> self.log(...), the step returns its loss",
            "Lightning 1.0's result objects (core/step_result.py, 0.9.0 to 1.0.8), where a hook of a Lightning module"
            " builds one (result = pl.TrainResult(loss), TrainResult(minimize=loss), EvalResult(checkpoint_on=x),"
            " EvalResult(x) whose first parameter is early_stop_on, a bare EvalResult()), logs through it and returns"
            " it: result.log(...) -> self.log(...) and result.log_dict(...) -> self.log_dict(...), with 1.0's on_step"
            " and on_epoch written out where they differ from 2.x's defaults for the hook and the call did not give"
            " them (TrainResult.log: on_step=True, on_epoch=False; TrainResult.log_dict, EvalResult.log and"
            " EvalResult.log_dict: on_step=False, on_epoch=True; 2.x: on_step=True, on_epoch=False in training_step,"
            " on_step=False, on_epoch=True in the evaluation steps and the epoch ends; prog_bar=False, logger=True"
            " and reduce_fx=mean agree). result = TrainResult(minimize=loss) becomes result = loss (the step returns"
            " its loss); an object without minimize is dropped and the hook returns None. checkpoint_on=x and"
            ' early_stop_on=x become self.log("checkpoint_on", x) / self.log("early_stop_on", x), averaged over the'
            " epoch as 1.0 did (on_step=False, on_epoch=True in a training step), with the note"
            " result-object-monitor. The TrainResult/EvalResult import goes where every use of the names converts.",
            kind="rewrite",
        ),
        Rule(
            "result-object-monitor",
            'ModelCheckpoint/EarlyStopping must name it: monitor="checkpoint_on"',
            "Lightning 1.0's ModelCheckpoint with no monitor= monitored the logged val_loss, else checkpoint_on (and"
            " kept the best, save_top_k=1), and its EarlyStopping's default monitor was early_stop_on; 2.x's"
            " ModelCheckpoint keeps the last epoch unless told, and EarlyStopping needs monitor=. To keep 1.0's"
            ' behaviour pass ModelCheckpoint(monitor="checkpoint_on") / EarlyStopping(monitor="early_stop_on") to'
            " the Trainer (the names the converted hook logs). A TrainResult(minimize=loss) without checkpoint_on"
            " also had 1.0's ModelCheckpoint keep the best epoch by the training loss; 2.x keeps the last.",
            kind="note",
        ),
        Rule(
            "eval-step-optimizer-idx",
            "1.x never passed optimizer_idx to {hook}: remove it",
            "Lightning 1.x passed optimizer_idx to training_step only: a validation_step, test_step or predict_step"
            " parameter optimizer_idx=D always held its default D (where there were several loaders, 1.x and 2.x"
            " pass dataloader_idx in that place). The parameter goes, so that 2.x's dataloader_idx cannot land in it,"
            " and each use in the body reads D. A parameter without a default (or a default that is not a literal), or"
            " one the body assigns, is left with this TODO: remove it, and read what the body needs another way.",
        ),
    )
)
