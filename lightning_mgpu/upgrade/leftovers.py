"""Lightning 1.x spellings left in a converted file that no TODO marks: what a user reading the result would trip over.

Independent of the transformer: it reads the *output* with :mod:`ast` and its own tables (it imports nothing from the
rest of :mod:`lightning_mgpu.upgrade` but :mod:`~lightning_mgpu.upgrade.leftover_reach`, the scan's own reading of
where settings go, and :mod:`~lightning_mgpu.upgrade.leftover_trainers`, its own reading of which names hold a Trainer,
which shares only :mod:`~lightning_mgpu.upgrade.trainer_names` with the tool), so it can catch what the tool missed.
The unit tests, the corpus tests and ``benchmarks/bench_upgrade_real.py`` all measure with it.

Example::

    from lightning_mgpu.upgrade.leftovers import unmarked

    unmarked(converted_source)  # [(12, "Trainer(gpus=...)"), ...]: 1.x left with no TODO above it
"""

from __future__ import annotations

import ast

from lightning_mgpu.upgrade.leftover_reach import KeyReach
from lightning_mgpu.upgrade.leftover_trainers import TrainerOwners

#: Trainer keywords Lightning 2.0 removed.
REMOVED_TRAINER_KEYWORDS = frozenset(
    {
        "gpus",
        "num_processes",
        "tpu_cores",
        "ipus",
        "distributed_backend",
        "amp_backend",
        "amp_level",
        "checkpoint_callback",
        "weights_summary",
        "replace_sampler_ddp",
        "resume_from_checkpoint",
        "progress_bar_refresh_rate",
        "reload_dataloaders_every_epoch",
        "auto_select_gpus",
        "terminate_on_nan",
        "track_grad_norm",
        "auto_lr_find",
        "auto_scale_batch_size",
        "stochastic_weight_avg",
        "move_metrics_to_cpu",
        "multiple_trainloader_mode",
        "prepare_data_per_node",
        "flush_logs_every_n_steps",
        "log_gpu_memory",
        "weights_save_path",
        "max_nb_epochs",
        "min_nb_epochs",
        "default_save_path",
        "nb_sanity_val_steps",
        "nb_gpu_nodes",
        "train_percent_check",
        "val_percent_check",
        "test_percent_check",
        "early_stop_callback",
        "truncated_bptt_steps",
        "row_log_interval",
        "log_save_interval",
        "process_position",
    }
)
#: Keys of a settings dict that only a 1.x Trainer took (a dict holding them is a Trainer's, in real code).
DICT_KEYS = frozenset(
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
#: 1.x strategy names that are not device types (accelerator="ddp" and friends).
STRATEGY_NAMES = frozenset({"dp", "ddp", "ddp_spawn", "ddp2", "horovod", "ddp_cpu", "ddp_sharded", "ddp_sharded_spawn"})
#: ModelCheckpoint keywords 2.0 no longer takes.
CHECKPOINT_KEYWORDS = frozenset({"filepath", "period", "every_n_val_epochs", "prefix", "save_best_only"})
#: Loop keywords 2.0 renamed.
REMOVED_LOOP_KEYWORDS = {
    "fit": {"train_dataloader", "val_dataloader"},
    "test": {"test_dataloaders"},
    "validate": {"val_dataloaders"},
}
#: Modules (below pytorch_lightning / lightning.pytorch) 2.0 removed.
REMOVED_MODULES = (
    "metrics",
    "core.lightning",
    "callbacks.base",
    "loggers.base",
    "utilities.seed",
    "utilities.distributed",
    "profiler",
    "core.memory",
    "plugins.training_type",
    "utilities.argparse",
)
#: Names 2.0 removed.
REMOVED_NAMES = frozenset(
    {
        "DDPPlugin",
        "DDPSpawnPlugin",
        "DeepSpeedPlugin",
        "DDPShardedPlugin",
        "DDPSpawnShardedPlugin",
        "HorovodPlugin",
        "DataParallelPlugin",
        "DDP2Plugin",
        "LightningLoggerBase",
        "TestTubeLogger",
        "GPUStatsMonitor",
        "DDPSpawnStrategy",
        "DDPFullyShardedPlugin",
        "ProgressBarBase",
        "auto_move_data",
        "EPOCH_OUTPUT",
        "TrainResult",
        "EvalResult",
    }
)
#: Trainer attributes 2.0 removed (``trainer.root_gpu``, ``trainer.training_type_plugin``, ``trainer.tuner``).
REMOVED_TRAINER_ATTRIBUTES = frozenset(
    {
        "root_gpu",
        "training_type_plugin",
        "tuner",
        "accelerator_connector",
        "resume_from_checkpoint",
        "progress_bar_dict",
    }
)
#: Trainer methods 2.0 removed (the tuner's entry points).
REMOVED_TRAINER_METHODS = frozenset({"tune", "lr_find", "scale_batch_size"})
#: torchmetrics classes that raise without ``task=`` since torchmetrics 0.11 (the binary/multiclass split).
TASK_METRICS = frozenset(
    {
        "Accuracy",
        "Precision",
        "Recall",
        "F1Score",
        "F1",
        "FBetaScore",
        "FBeta",
        "AUROC",
        "AveragePrecision",
        "ConfusionMatrix",
        "ROC",
        "PrecisionRecallCurve",
        "StatScores",
        "Specificity",
        "JaccardIndex",
        "IoU",
        "HammingDistance",
        "CohenKappa",
        "MatthewsCorrCoef",
    }
)
#: Hooks 2.0 removed.
REMOVED_HOOKS = frozenset(
    {
        "training_epoch_end",
        "validation_epoch_end",
        "test_epoch_end",
        "validation_step_end",
        "test_step_end",
        "on_epoch_start",
        "on_epoch_end",
        "on_pretrain_routine_start",
        "on_pretrain_routine_end",
        "on_keyboard_interrupt",
        "on_init_start",
        "on_init_end",
        "get_progress_bar_dict",
        "on_batch_start",
        "on_batch_end",
    }
)
NAMESPACES = ("pytorch_lightning", "lightning.pytorch")
#: The hooks whose returned dict Lightning 1.0 read "log"/"progress_bar" entries from (and a step turned into manual
#: optimization's helper). Not on_*_epoch_end: a file of 1.3 or later that returns such a dict there (a tutorial of
#: the held-out sample did) returned it to nobody in 1.x already, and the tool converts an epoch end's dict before it
#: renames the hook.
LOG_RETURN_HOOKS = frozenset(
    {
        "training_step",
        "validation_step",
        "test_step",
        "training_epoch_end",
        "validation_epoch_end",
        "test_epoch_end",
        "_training_step_1x",
    }
)
#: The entries of a returned dict that 1.0 logged and 2.x ignores.
LOG_RETURN_KEYS = frozenset({"log", "progress_bar"})


def _removed_module(module: str) -> bool:
    for namespace in NAMESPACES:
        if module == namespace or not module.startswith(namespace + "."):
            continue
        below = module[len(namespace) + 1 :]
        if any(below == m or below.startswith(m + ".") for m in REMOVED_MODULES):
            return True
    return False


def _metric_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The local names of torchmetrics classes (``from torchmetrics import Accuracy``) and of the torchmetrics
    module itself (``import torchmetrics as tm``) in a file."""
    classes: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torchmetrics":
            classes |= {alias.asname or alias.name for alias in node.names if alias.name in TASK_METRICS}
        elif isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name == "torchmetrics"}
    return classes, modules


#: The methods 1.x's LightningModule, Callback and BaseFinetuning were called with an optimizer index (1.9's
#: signatures), and the evaluation steps, where 1.x code took one that 2.x no longer passes.
OPTIMIZER_INDEX_HOOKS = frozenset(
    {
        "training_step",
        "validation_step",
        "test_step",
        "predict_step",
        "optimizer_step",
        "optimizer_zero_grad",
        "backward",
        "on_before_optimizer_step",
        "lr_scheduler_step",
        "configure_gradient_clipping",
        "toggle_optimizer",
        "untoggle_optimizer",
        "finetune_function",
    }
)


def _own_methods_under_hook_names(tree: ast.AST) -> set[int]:
    """The ids of ``on_epoch_start``/``on_epoch_end``/``on_pretrain_routine_*`` definitions that 1.x could not have
    called: 1.x passed a module's hook nothing and a callback's (trainer, pl_module), so one that needs more than two
    arguments, or any in a class whose base is a LightningModule, is the user's own method."""
    hooks = {"on_epoch_start", "on_epoch_end", "on_pretrain_routine_start", "on_pretrain_routine_end"}
    found: set[int] = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        module = any(_owner_name(base).endswith("LightningModule") for base in cls.bases)
        for func in cls.body:
            if not isinstance(func, ast.FunctionDef) or func.name not in hooks:
                continue
            positional = func.args.posonlyargs + func.args.args
            needed = len(positional) - 1 - len(func.args.defaults)  # self not counted
            needed += sum(default is None for default in func.args.kw_defaults)
            if needed > 2 or (module and needed > 0):
                found.add(id(func))
    return found


def _owner_name(node: ast.expr) -> str:
    """The last name of an attribute's owner: ``self.trainer`` -> ``trainer``, ``trainer`` -> ``trainer``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


#: The command-line classmethods 2.0 removed from the Trainer and a LightningDataModule (calls.py's ARGPARSE_METHODS).
ARGPARSE_CLASSMETHODS = ("add_argparse_args", "from_argparse_args", "parse_argparser", "get_init_arguments_and_types")


def _argparse_class(node: ast.expr, tree: ast.AST) -> bool:
    """Whether an argparse classmethod's receiver is a Trainer or a LightningDataModule: named ``...Trainer`` or
    ``...DataModule``, or a class of this file with such a base."""
    name = _owner_name(node)
    if name.endswith(("Trainer", "DataModule")):
        return True
    return any(
        isinstance(c, ast.ClassDef)
        and c.name == name
        and any(_owner_name(base).endswith(("Trainer", "DataModule")) for base in c.bases)
        for c in ast.walk(tree)
    )


def _subclass_trainer_calls(tree: ast.AST) -> set[int]:
    """The ids of the calls that build a Trainer under another name: ``cls(...)`` in a classmethod, and
    ``super().__init__(...)`` in ``__init__``, of a class whose base is named ``...Trainer`` (or is such a class of
    this file)."""
    trainers: set[str] = set()
    calls: set[int] = set()
    classes = sorted((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)), key=lambda n: n.lineno)
    for cls in classes:
        bases = [b.attr if isinstance(b, ast.Attribute) else b.id if isinstance(b, ast.Name) else "" for b in cls.bases]
        if not any(b.endswith("Trainer") or b in trainers for b in bases):
            continue
        trainers.add(cls.name)
        for method in cls.body:
            if not isinstance(method, ast.FunctionDef):
                continue
            first = method.args.args[0].arg if method.args.args else None
            is_classmethod = any(isinstance(d, ast.Name) and d.id == "classmethod" for d in method.decorator_list)
            for node in ast.walk(method):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                if is_classmethod and isinstance(func, ast.Name) and func.id == first:
                    calls.add(id(node))
                if (
                    method.name == "__init__"
                    and isinstance(func, ast.Attribute)
                    and func.attr == "__init__"
                    and isinstance(func.value, ast.Call)
                    and isinstance(func.value.func, ast.Name)
                    and func.value.func.id == "super"
                ):
                    calls.add(id(node))
    return calls


#: Bases that make a class a plain one: no LightningModule (or subclass of one) can derive from these alone.
PLAIN_BASES = frozenset({"object", "nn.Module", "Module", "torch.nn.Module"})


def _plain_class_nodes(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside classes with no base or only :data:`PLAIN_BASES` (a user's own ``class
    Trainer():`` that sets ``self.hparams``): such a class is no LightningModule, so its attributes are its own."""
    found: set[int] = set()
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and all(ast.unparse(b) in PLAIN_BASES for b in cls.bases):
            found |= {id(node) for node in ast.walk(cls)}
    return found


def _kept_progress_bar_dicts(tree: ast.AST) -> set[int]:
    """ids of the ``def get_progress_bar_dict`` that are no 1.x leftover: in a class with LegacyProgressBarDict among
    its bases (the converted hook, shown at run time), or in a callback's, a progress bar's or a DataModule's class
    (the user's own method: 1.x called the hook on LightningModules only)."""
    kept: set[int] = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in cls.bases}
        if "LegacyProgressBarDict" in bases or any(
            part in base for base in bases for part in ("Callback", "ProgressBar", "DataModule")
        ):
            kept |= {id(s) for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "get_progress_bar_dict"}
    return kept


def _log_keyed(value: ast.expr | None) -> bool:
    """Whether ``value`` builds a dict with a "log"/"progress_bar" entry: ``{...}``, ``dict(...)`` or
    ``OrderedDict(...)`` (its ``{...}`` or its keywords)."""
    if isinstance(value, ast.Dict):
        return any(isinstance(k, ast.Constant) and k.value in LOG_RETURN_KEYS for k in value.keys)
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("dict", "OrderedDict"):
            return any(k.arg in LOG_RETURN_KEYS for k in value.keywords) or any(_log_keyed(a) for a in value.args)
    return False


def _own_nodes(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of ``func``'s own body (not of the functions, lambdas and classes nested in it)."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = list(func.body)
    while todo:
        node = todo.pop()
        found.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return found


def _log_returns(tree: ast.AST) -> list[tuple[int, str]]:
    """``return`` statements of a Lightning module's hooks that hand back a dict with "log"/"progress_bar" entries
    (1.0 logged them, 2.x ignores them): the dict written there, or a local name the hook builds such a dict in (or
    sets ``name["log"] = ...`` on). A class deriving from nn.Module only is a plain module: its methods are its own."""
    found: list[tuple[int, str]] = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef) or all(ast.unparse(b) in PLAIN_BASES for b in cls.bases):
            continue
        for func in cls.body:
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.name not in LOG_RETURN_HOOKS:
                continue
            own = _own_nodes(func)
            keyed: set[str] = set()
            for node in own:
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name) and _log_keyed(node.value):
                            keyed.add(target.id)
                        if (
                            isinstance(target, ast.Subscript)
                            and isinstance(target.value, ast.Name)
                            and isinstance(target.slice, ast.Constant)
                            and target.slice.value in LOG_RETURN_KEYS
                        ):
                            keyed.add(target.value.id)
            for node in own:
                if not isinstance(node, ast.Return):
                    continue
                if _log_keyed(node.value) or (isinstance(node.value, ast.Name) and node.value.id in keyed):
                    found.append((node.lineno, f'{func.name} returns "log"/"progress_bar"'))
    return found


def leftovers(source: str) -> list[tuple[int, str]]:
    """Each 1.x spelling in ``source``, marked or not.

    Args:
        source: Python source (a converted file).

    Returns:
        ``(line, what)`` pairs, sorted; ``what`` names the kind (``"Trainer(gpus=...)"``, ``".root_gpu"``, ...).

    Raises:
        SyntaxError: ``source`` does not parse.
    """
    tree = ast.parse(source)
    metric_classes, metric_modules = _metric_names(tree)
    subclass_calls = _subclass_trainer_calls(tree)  # cls(...) / super().__init__(...) of a Trainer subclass
    plain = _plain_class_nodes(tree)  # self.hparams = ... in a class that cannot be a LightningModule is its own
    kept_bar_dicts = _kept_progress_bar_dicts(tree)  # get_progress_bar_dict that is no 1.x leftover
    own_methods = _own_methods_under_hook_names(tree)  # on_epoch_end(self, outputs, phase): not the hook
    # A 1.x key in settings that nothing in the file may hand to a Trainer whole is the script's own key (a config
    # whose fields a Trainer call reads one by one, a model's hyperparameters): leftover_reach decides it by itself.
    reach = KeyReach(tree)
    # t.root_gpu, t.tune(...): only where t is a Trainer (bound from one, or named like one), by the scan's own walk.
    owners = TrainerOwners(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            # legacy_trainer_kwargs(accelerator="ddp", ...) takes the 1.x spelling: it translates it at run time.
            translation = name == "legacy_trainer_kwargs"
            for keyword in node.keywords:
                trainer = name.endswith("Trainer") or id(node) in subclass_calls
                if trainer and keyword.arg in REMOVED_TRAINER_KEYWORDS:
                    found.append((node.lineno, f"Trainer({keyword.arg}=...)"))
                if (
                    keyword.arg in ("accelerator", "plugins")
                    and isinstance(keyword.value, ast.Constant)
                    and not translation
                ):
                    if keyword.value.value in STRATEGY_NAMES:
                        found.append((node.lineno, f"{keyword.arg}={keyword.value.value!r}"))
                if keyword.arg in REMOVED_LOOP_KEYWORDS.get(name, ()):
                    found.append((node.lineno, f"{name}({keyword.arg}=...)"))
            if name == "dict":
                found += [
                    (node.lineno, f"dict({k.arg}=...)")
                    for k in node.keywords
                    if k.arg in DICT_KEYS and reach.may_reach_trainer(node, k.arg, k.value)
                ]
            if name == "ModelCheckpoint":
                found += [
                    (node.lineno, f"ModelCheckpoint({k.arg}=...)")
                    for k in node.keywords
                    if k.arg in CHECKPOINT_KEYWORDS
                ]
            if name in ARGPARSE_CLASSMETHODS and isinstance(func, ast.Attribute) and _argparse_class(func.value, tree):
                # Only on a Trainer or a LightningDataModule, the classes whose method 2.0 removed, as calls.py's
                # argparse_owner reads them (by name, or a DataModule class of this file): what the tool converts.
                # A receiver it cannot resolve (model_cls = get_class(...)) is most likely a LightningModule, which
                # had no from_argparse_args in 1.x: the user's own classmethod, left as it is, and not a leftover.
                found.append((node.lineno, f".{name}(...)"))
            if isinstance(func, ast.Attribute) and name in REMOVED_TRAINER_METHODS and owners.is_trainer(func.value):
                found.append((node.lineno, f"trainer.{name}(...)"))
            is_metric = (isinstance(func, ast.Name) and name in metric_classes) or (
                isinstance(func, ast.Attribute)
                and name in TASK_METRICS
                and isinstance(func.value, ast.Name)
                and func.value.id in metric_modules
            )
            # torchmetrics >= 0.11 also takes the task as the first positional argument: Accuracy("binary").
            task_by_position = (
                bool(node.args) and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            )
            if is_metric and not task_by_position and not any(k.arg == "task" or k.arg is None for k in node.keywords):
                found.append((node.lineno, "torchmetrics metric without task="))
        elif isinstance(node, ast.Dict):
            found += [
                (key.lineno, f"{{{key.value!r}: ...}}")
                for key, value in zip(node.keys, node.values)
                if isinstance(key, ast.Constant)
                and key.value in DICT_KEYS
                and reach.may_reach_trainer(node, key.value, value)
            ]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if isinstance(node.slice, ast.Constant) and node.slice.value in DICT_KEYS:
                if reach.may_reach_trainer(node, node.slice.value):
                    found.append((node.lineno, f"[{node.slice.value!r}] = ..."))
        elif isinstance(node, ast.ImportFrom) and node.module and _removed_module(node.module):
            found.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            for alias in node.names:
                if alias.name.rsplit(".", 1)[-1] in REMOVED_NAMES:
                    found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.Attribute) and node.attr in REMOVED_NAMES:
            found.append((node.lineno, f".{node.attr}"))
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in REMOVED_TRAINER_ATTRIBUTES
            and owners.is_trainer(node.value)
        ):
            found.append((node.lineno, f"trainer.{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in REMOVED_NAMES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.FunctionDef):
            params = [a.arg for a in node.args.args]
            if node.name in REMOVED_HOOKS and id(node) not in kept_bar_dicts and id(node) not in own_methods:
                found.append((node.lineno, f"def {node.name}"))
            if "optimizer_idx" in params and node.name in OPTIMIZER_INDEX_HOOKS:
                # Only where Lightning calls the function: a user's own helper (a GAN's inner step under manual
                # optimization, a method no Lightning release calls) may take the index as it likes.
                found.append((node.lineno, f"def {node.name}(..., optimizer_idx)"))
            if node.name == "on_train_epoch_end" and "outputs" in params:
                found.append((node.lineno, "def on_train_epoch_end(..., outputs)"))
        elif isinstance(node, ast.Assign) and id(node) not in plain:
            for target in node.targets:
                if ast.unparse(target) == "self.hparams":
                    found.append((node.lineno, "self.hparams = ..."))
    found += _log_returns(tree)
    return sorted(set(found))


def marked_lines(source: str) -> set[int]:
    """The lines a ``# TODO(lightning-mgpu:...)`` marks: a TODO marks the statement right below it (its whole extent,
    a class or function included), through any comments between them.

    Raises:
        SyntaxError: ``source`` does not parse.
    """
    lines = source.splitlines()
    marked: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt):
            continue
        first = min([node.lineno, *[d.lineno for d in getattr(node, "decorator_list", [])]])
        above = first - 2
        while above >= 0 and lines[above].strip().startswith("#"):
            if "TODO(lightning-mgpu:" in lines[above]:
                marked.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
                break
            above -= 1
    return marked


def unmarked(source: str) -> list[tuple[int, str]]:
    """The leftovers that no ``# TODO(lightning-mgpu:...)`` marks.

    Args:
        source: Python source (a converted file).

    Returns:
        ``(line, what)`` pairs, sorted, as :func:`leftovers` gives them.

    Raises:
        SyntaxError: ``source`` does not parse.
    """
    marked = marked_lines(source)
    return [(line, what) for line, what in leftovers(source) if line not in marked]
