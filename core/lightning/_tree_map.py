"""What each name of Lightning's module tree (``_tree.py``) becomes under ``core.lightning``.

A name resolves, most specific first, through :data:`NAMED` (one module's name), the table of its area
(:data:`AREAS`: the names of ``lightning.pytorch.callbacks`` answer in every module below it too), and
:data:`EVERYWHERE` (``Trainer``, ``LightningModule``, ... wherever Lightning defines or re-exports them).
A name none of them maps is refused with its area's reason (:data:`REASONS`, longest prefix first).

A module imports when it offers at least one mapped name or has a child that imports; a module with nothing
to offer refuses the ``import`` itself, with the reason its names share (or its area's).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Final

from core.lightning import _tables
from core.lightning._entries import Entry, Target, Unsupported
from core.lightning._tree import MODULES

_H: Final = "core.lightning._helpers"
_T: Final = "core.lightning._types"
_DEMOS: Final = "core.lightning.pytorch.demos"
_CLI: Final = "core.lightning.pytorch.cli"
_C: Final = "core.lightning._compat"
_FD: Final = "core.lightning.fabric._data"
_STATES: Final = ("RunningStage", "TrainerFn", "TrainerState", "TrainerStatus")
_SAVING: Final = ("convert", "load_hparams_from_tags_csv", "load_hparams_from_yaml", "save_hparams_to_tags_csv",
                  "save_hparams_to_yaml", "update_hparams")

EVERYWHERE: Final[dict[str, Entry]] = {
    "Fabric": Target("core.lite", "Lite"),
    "LightningModule": Target("core.module", "Module"),
    "LightningDataModule": Target("core.module", "DataModule"),
    "Trainer": Target("core.lightning._trainer", "Trainer"),  # Lightning's logger and layout
    "Callback": Target("core.callbacks", "Callback"),
    "seed_everything": Target(_C, "seed_everything"),  # Lightning's PL_GLOBAL_SEED over core's
    "AttributeDict": Target("core.module", "AttributeDict"),
}
"""Names that mean the same object in every Lightning module that defines or re-exports them."""

AREAS: Final[tuple[tuple[str, Mapping[str, Entry]], ...]] = (
    ("pytorch.callbacks", _tables.CALLBACKS),
    ("pytorch.loggers", _tables.LOGGERS),
    ("fabric.loggers", _tables.FABRIC_LOGGERS),
    ("pytorch.strategies", _tables.STRATEGIES),
    ("fabric.strategies", _tables.STRATEGIES),
    ("pytorch.accelerators", _tables.ACCELERATORS),
    ("fabric.accelerators", _tables.ACCELERATORS),
    ("pytorch.plugins.environments", _tables.ENVIRONMENTS),
    ("fabric.plugins.environments", _tables.ENVIRONMENTS),
    ("pytorch.plugins", _tables.PLUGINS),
    ("fabric.plugins", _tables.PLUGINS),
    ("pytorch.profilers", _tables.PROFILERS),
    ("pytorch.tuner", _tables.TUNER),
    ("pytorch.utilities", _tables.UTILITIES),
    ("fabric.utilities", _tables.UTILITIES),
)
"""A Lightning package and the hand-written table (core/lightning/_tables.py) for it and every module below it."""

NAMED: Final[dict[str, dict[str, Entry]]] = {
    "pytorch": {"cli_lightning_logo": Target(_H, "cli_lightning_logo"), "LIGHTNING_LOGO": Target(_H, "LIGHTNING_LOGO")},
    "fabric": {"is_wrapped": Target(_H, "is_wrapped")},
    "fabric.wrappers": {"is_wrapped": Target(_H, "is_wrapped"), "_unwrap_objects": Target(_H, "_unwrap_objects")},
    "pytorch.utilities.model_helpers": {
        "is_overridden": Target(_H, "is_overridden"),
        "get_torchvision_model": Target(_H, "get_torchvision_model"),
    },
    "pytorch.utilities": {
        "grad_norm": Target(_H, "grad_norm"),
        "GradClipAlgorithmType": Target(_C, "GradClipAlgorithmType"),
        "suggested_max_num_workers": Target(_FD, "suggested_max_num_workers"),
    },
    "fabric.utilities": {"suggested_max_num_workers": Target(_FD, "suggested_max_num_workers")},
    "fabric.utilities.data": {
        name: Target(_FD, name)
        for name in ("has_iterable_dataset", "has_len", "sized_len", "suggested_max_num_workers")
    },
    "fabric.utilities.types": {
        name: Target(_T, name)
        for name in ("CollectibleGroup", "LRScheduler", "Optimizable", "ProcessGroup", "RedOpType",
                     "ReduceLROnPlateau", "ReduceOp", "Steppable", "UntypedStorage")
    },
    "pytorch.utilities.types": {
        name: Target(_T, name)
        for name in ("DistributedDataParallel", "EVAL_DATALOADERS", "LRSchedulerConfig", "LRSchedulerConfigType",
                     "LRSchedulerPLType", "LRSchedulerType", "LRSchedulerTypeTuple", "LRSchedulerTypeUnion",
                     "OptimizerConfig", "OptimizerLRScheduler", "OptimizerLRSchedulerConfig", "STEP_OUTPUT",
                     "TRAIN_DATALOADERS")
    },
    "pytorch.utilities.enums": {"GradClipAlgorithmType": Target(_C, "GradClipAlgorithmType")},
    "pytorch.utilities.grads": {"grad_norm": Target(_H, "grad_norm")},
    # Lightning-private helpers that downstream programs (litgpt) import anyway, mapped to core's public ones.
    "fabric.utilities.load": {
        "_lazy_load": Target("core.toolkit.checkpoint", "lazy_load"),
        "_NotYetLoadedTensor": Target("core.toolkit.checkpoint", "NotYetLoadedTensor"),
        "_materialize_tensors": Target("core.toolkit.checkpoint", "materialize_tensors"),
    },
    "fabric.utilities.init": {
        "_EmptyInit": Target("core.toolkit.tensors", "EmptyInit"),
        "_materialize_meta_tensors": Target("core.toolkit.tensors", "materialize_meta_tensors"),
    },
    "pytorch.utilities.imports": {
        name: Target(_H, name) for name in ("_TORCHVISION_AVAILABLE", "_RICH_AVAILABLE", "_OMEGACONF_AVAILABLE",
                                            "_TORCHMETRICS_GREATER_EQUAL_0_11")
    },
    "fabric.loggers.tensorboard": {
        "_TENSORBOARD_AVAILABLE": Target(_H, "_TENSORBOARD_AVAILABLE"),
        "_TENSORBOARDX_AVAILABLE": Target(_H, "_TENSORBOARDX_AVAILABLE"),
    },
    "pytorch.loggers.wandb": {"_WANDB_AVAILABLE": Target(_H, "_WANDB_AVAILABLE")},
    "pytorch.loggers.mlflow": {"_MLFLOW_AVAILABLE": Target(_H, "_MLFLOW_AVAILABLE")},
    "pytorch.loggers.comet": {"_COMET_AVAILABLE": Target(_H, "_COMET_AVAILABLE")},
    "pytorch.loggers.litlogger": {"_LITLOGGER_AVAILABLE": Target(_H, "_LITLOGGER_AVAILABLE")},
    "pytorch.cli": {
        name: Target(_CLI, name)
        for name in (
            "ArgsType", "LRSchedulerCallable", "LRSchedulerType", "LRSchedulerTypeTuple", "LRSchedulerTypeUnion",
            "LightningArgumentParser", "LightningCLI", "ModuleType", "OptimizerCallable", "ReduceLROnPlateau",
            "SaveConfigCallback", "_JSONARGPARSE_SIGNATURES_AVAILABLE", "instantiate_class", "instantiate_module",
        )
    },
    # the small public names of core/lightning/_compat.py
    "fabric.utilities.exceptions": {"MisconfigurationException": Target(_C, "MisconfigurationException")},
    "pytorch.utilities.exceptions": {"MisconfigurationException": Target(_C, "MisconfigurationException")},
    "fabric.utilities.warnings": {"PossibleUserWarning": Target(_C, "PossibleUserWarning")},
    "pytorch.utilities.warnings": {"PossibleUserWarning": Target(_C, "PossibleUserWarning")},
    "pytorch.trainer.states": {name: Target(_C, name) for name in _STATES},
    "pytorch.loggers.logger": {name: Target(_C, name) for name in ("DummyLogger", "DummyExperiment")},
    "pytorch.loggers.csv_logs": {"ExperimentWriter": Target(_C, "ExperimentWriter")},
    # Lightning re-exports these from lightning_utilities, so its tree lists no names for the module
    **{module: {name: Target("core.lightning._rank_zero", name)
                for name in ("rank_zero_only", "rank_zero_info", "rank_zero_warn")}
       for module in ("pytorch.utilities.rank_zero", "fabric.utilities.rank_zero")},
    "pytorch.callbacks.early_stopping": {"EarlyStoppingReason": Target(_C, "EarlyStoppingReason")},
    **{module: {"Precision": Target("core.lightning._bases", "Precision")}
       for module in ("fabric.plugins", "fabric.plugins.precision", "fabric.plugins.precision.precision",
                      "pytorch.plugins", "pytorch.plugins.precision", "pytorch.plugins.precision.precision")},
    "fabric.utilities.apply_func": {
        name: Target(_C, name) for name in ("convert_tensors_to_scalars", "convert_to_tensors", "move_data_to_device")
    },
    "pytorch.core.saving": {name: Target(_C, name) for name in _SAVING},
    "fabric.utilities.seed": {
        name: Target(_C, name) for name in ("pl_worker_init_function", "reset_seed", "seed_everything")
    },
}
"""Names of one Lightning module (path without ``lightning.``) that no area table covers."""

_REASONS: Final[dict[str, Unsupported]] = {
    "": Unsupported(
        "it is part of Lightning's internals and has no counterpart in core.",
        "core.Trainer, core.Lite, core.Module and core.callbacks (docs/migrating-from-lightning.md).",
    ),
    "fabric.cli": Unsupported(
        "the `fabric run` launcher is Lightning's command line.", "core-run (python -m core.run) launches a script."
    ),
    "fabric.connector": Unsupported(
        "Lightning's connector is internal; core resolves plugins by alias.",
        "core.resolve(accelerator=..., strategy=..., devices=...) returns the active plugins.",
    ),
    "fabric.fabric": Unsupported("only Fabric itself is public here.", "core.Lite's methods."),
    "fabric.wrappers": Unsupported(
        "Fabric's wrapper classes are internal.", "core.lite.LiteModule, LiteOptimizer and LiteDataLoader."
    ),
    "fabric.accelerators": Unsupported(
        "accelerators are plugins selected by alias.", "accelerator='cpu'|'cuda'|'mps'|'tpu' (python -m core.plugins)."
    ),
    "pytorch.accelerators": Unsupported(
        "accelerators are plugins selected by alias.", "accelerator='cpu'|'cuda'|'mps'|'tpu' (python -m core.plugins)."
    ),
    "fabric.strategies": Unsupported("strategy internals are not public here.", _tables._PLUGIN_CLASS),
    "pytorch.strategies": Unsupported("strategy internals are not public here.", _tables._PLUGIN_CLASS),
    "fabric.strategies.launchers": Unsupported(
        "each strategy plugin launches its own processes.", "devices=N with a strategy alias, or core-run for a script."
    ),
    "pytorch.strategies.launchers": Unsupported(
        "each strategy plugin launches its own processes.", "devices=N with a strategy alias, or core-run for a script."
    ),
    "fabric.plugins": Unsupported("plugins are chosen by alias, not constructed.", _tables._ALIASES),
    "pytorch.plugins": Unsupported("plugins are chosen by alias, not constructed.", _tables._ALIASES),
    "fabric.plugins.collectives": Unsupported(
        "Lightning's collectives wrapper is not provided.",
        "torch.distributed's functions, or Lite.all_reduce/all_gather/broadcast."
    ),
    "pytorch.plugins.layer_sync": Unsupported(
        "layer sync is a Trainer flag.",
        "Trainer(sync_batchnorm=True) or torch.nn.SyncBatchNorm.convert_sync_batchnorm."
    ),
    "fabric.loggers": Unsupported("this logger helper is not provided.", "core.loggers.Logger and its subclasses."),
    "pytorch.loggers": Unsupported(
        "this logger is not implemented.",
        "CSVLogger, TensorBoardLogger, MLFlowLogger, WandbLogger, or a core.loggers.Logger subclass."
    ),
    "pytorch.callbacks": Unsupported("this helper is not provided.", _tables._NEW_CALLBACK),
    "pytorch.profilers": Unsupported(
        "this profiler helper is not provided.",
        "profiler='simple'|'advanced'|'pytorch'.",
    ),
    "pytorch.tuner": Unsupported(
        "the tuner's internals are not public.", "core.tuner.Tuner(trainer).lr_find(model) / .scale_batch_size(model)."
    ),
    "fabric.utilities": Unsupported(
        "this Fabric utility has no counterpart in core.", "the torch function it wraps, or core.Lite's methods."
    ),
    "pytorch.utilities": Unsupported(
        "this utility has no counterpart in core.", "the torch function it wraps, or core.Module/Trainer's methods."
    ),
    "pytorch.utilities.migration": Unsupported(
        "Lightning's checkpoint migration applies to Lightning's checkpoint format.",
        "core.Module.load_from_checkpoint."
    ),
    "pytorch.utilities.upgrade_checkpoint": Unsupported(
        "Lightning's checkpoint upgrade applies to Lightning's checkpoint format.", "core.Module.load_from_checkpoint."
    ),
    "pytorch.core": Unsupported(
        "Lightning's hook and mixin classes are merged into core.Module.",
        "core.Module (lightning.pytorch.LightningModule)."
    ),
    "pytorch.trainer": Unsupported(
        "the Trainer's connectors, state objects and call helpers are internal.",
        "core.Trainer's properties (docs/trainer.md)."
    ),
    "pytorch.loops": Unsupported(
        "Lightning's loop objects are internals of its Trainer; core.Trainer runs its own loops.",
        "hooks on the Module and callbacks (docs/hooks.md), or core.Lite for a loop of your own.",
    ),
    "pytorch.overrides": Unsupported(
        "Lightning's module wrappers are internal.",
        "the strategy alias wraps the module.",
    ),
    "pytorch.serve": Unsupported(
        "model serving is outside a training toolkit.", "torch.export or a serving framework after training."
    ),
    "pytorch.cli": Unsupported(
        "this helper of Lightning's CLI is not provided.",
        "core.lightning.pytorch.cli.LightningCLI.",
    ),
}
"""Why an unmapped name of a module under each prefix is refused, and what to use instead."""


def reason(module: str) -> Unsupported:
    """The refusal for an unmapped name of ``module``: the longest prefix of :data:`_REASONS`."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        found = _REASONS.get(".".join(parts[:end]))
        if found is not None:
            return found
    return _REASONS[""]


def _area(module: str) -> Mapping[str, Entry]:
    for prefix, table in AREAS:
        if module == prefix or module.startswith(prefix + "."):
            return table
    return {}


@functools.cache
def table(module: str) -> dict[str, Entry]:
    """Every name Lightning's ``module`` offers (path without ``lightning.``), and what it is here."""
    if module == "pytorch.demos" or module.startswith("pytorch.demos."):
        # core.lightning.pytorch.demos is a real package with Lightning's module layout and every name.
        return {name: Target(f"core.lightning.{module}", name) for name in MODULES[module]}
    named, area, fallback = NAMED.get(module, {}), _area(module), reason(module)
    entries = {
        name: named.get(name) or area.get(name) or EVERYWHERE.get(name) or fallback
        for name in MODULES.get(module, ())
    }
    # NAMED may keep a name Lightning dropped that its own examples still use (fabric.utilities.types.LRScheduler).
    return {**entries, **{name: entry for name, entry in named.items() if name not in entries}}


def children(module: str) -> tuple[str, ...]:
    """The direct submodules of ``module`` in Lightning's tree (their last path part)."""
    prefix = module + "."
    return tuple(sorted({m[len(prefix):].split(".")[0] for m in MODULES if m.startswith(prefix)}))


@functools.cache
def refusal(module: str) -> Unsupported | None:
    """Why ``import`` of ``module`` fails, or None when it imports (it or a child offers something)."""
    entries = table(module)
    if any(isinstance(entry, Target) for entry in entries.values()):
        return None
    if any(refusal(f"{module}.{child}") is None for child in children(module)):
        return None
    shared = {entry for entry in entries.values() if isinstance(entry, Unsupported)}
    return shared.pop() if len(shared) == 1 else reason(module)
