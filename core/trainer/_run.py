"""One run of a Trainer entry point, as it happens in every process of a ``Lite`` launch.

:func:`run_stage` is what ``Trainer.fit`` (``validate``, ``test``, ``predict``) hands to ``Lite.launch``:
attach the Module and DataModule, prepare and set up the data, set the model and optimizers up through
Lite, restore a checkpoint, run the loop, and tear down in ``finally``. When the strategy ran it in other
processes (``ddp_spawn``), rank 0 sends an :class:`Outcome` back so that the caller's model and trainer
hold the trained weights and the metrics.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import torch

from core._errors import ConfigurationError, CoreWarning
from core.callbacks import EarlyStopping, ModelCheckpoint
from core.callbacks._callback import Callback, CallbackHooks
from core.lite import LiteOptimizer
from core.module import StepModule
from core.module._optimizers import parse_optimizers
from core.trainer._checkpoint import (
    CheckpointNotFoundError,
    find_last,
    hpc_resume_path,
    restore_checkpoint_state,
    saved_checkpoint_state,
)
from core.trainer._config import check_sync_batchnorm
from core.trainer._data import find_loaders, overrides, prepare_eval_loader, prepare_train_loader, sequential
from core.trainer._logging import MetricStore
from core.trainer._requeue import AutoRequeue, Requeueable
from core.trainer._stages import EVAL_LOOP_OF_STAGE
from core.trainer._state import FitProgress

if TYPE_CHECKING:
    from core.lite import Lite
    from core.module import DataModule, Module
    from core.profilers import Profiler
    from core.trainer._view import LoopView as Trainer  # the protocol: the Trainer's class imports this module


@attrs.frozen
class Outcome:
    """What rank 0 of a run in other processes sends back to the process that called the entry point."""

    result: Any
    module_state: dict[str, Any]
    progress: dict[str, Any]
    callback_states: dict[str, Any]
    callback_metrics: dict[str, float]
    logged_metrics: dict[str, float]
    logger_versions: list[Any]

    def apply(self, trainer: Trainer, module: Module) -> Any:
        module.load_state_dict(self.module_state)
        module.trainer = trainer  # the caller's module keeps the Trainer that ran it, as after a run in this process
        module._end_run()
        trainer.run_state.progress = FitProgress.from_dict(self.progress)
        for callback in trainer.callbacks:
            if callback.state_key in self.callback_states:
                callback.load_state_dict(self.callback_states[callback.state_key])
        state = trainer.run_state
        state.callback_metrics = {name: torch.tensor(value) for name, value in self.callback_metrics.items()}
        state.logged_metrics = dict(self.logged_metrics)
        for logger, version in zip(trainer.loggers, self.logger_versions, strict=False):
            logger.use_version(version)
        return self.result


def _outcome(trainer: Trainer, module: Module, result: Any) -> Outcome:
    return Outcome(
        result=result,
        module_state={name: tensor.detach().cpu() for name, tensor in module.state_dict().items()},
        progress=trainer.run_state.progress.as_dict(),
        callback_states={
            callback.state_key: saved for callback in trainer.callbacks if (saved := callback.state_dict())
        },
        callback_metrics={name: float(value) for name, value in trainer.callback_metrics.items()},
        logged_metrics=dict(trainer.run_state.logged_metrics),
        logger_versions=[logger.version_if_chosen for logger in trainer.loggers],
    )


def _prepare_data(lite: Lite, datamodule: DataModule | None, module: Module) -> None:
    """``prepare_data`` on local rank 0 of each node (global rank 0 if not per node); the others wait."""
    per_node = datamodule.prepare_data_per_node if datamodule is not None else True
    if (lite.local_rank if per_node else lite.global_rank) == 0:
        if datamodule is not None:
            datamodule.prepare_data()
        module.prepare_data()
    lite.barrier("prepare_data")


def _check_optimization_flags(trainer: Trainer, module: Module) -> None:
    if module.automatic_optimization:
        return
    if trainer.accumulate_grad_batches != 1 or trainer.config.gradient_clip_val:
        raise ConfigurationError(
            "With automatic_optimization=False you step the optimizers yourself, so the Trainer cannot accumulate "
            "or clip for you: drop accumulate_grad_batches / gradient_clip_val and call "
            "self.clip_gradients(...) in training_step."
        )


def _set_up_model_and_optimizers(trainer: Trainer, lite: Lite, module: Module) -> None:
    """``configure_optimizers``, then ``Lite.setup`` of the module with them, in one call.

    One call lets a strategy that owns both (DeepSpeed's engine) take them together; a sharding strategy points
    the optimizers at the shards that replace the parameters.
    """
    optimizers, schedulers = parse_optimizers(module.configure_optimizers())
    step_module, *set_up = lite.setup(StepModule(module), *optimizers)
    trainer.run_state.step_module = step_module
    trainer.run_state.configured_optimizers = list(optimizers)
    trainer.optimizers = set_up
    trainer.lr_scheduler_configs = schedulers


def _resolve_ckpt_path(trainer: Trainer, ckpt_path: Any, stage: str) -> str | None:
    """The checkpoint to load, decided on global rank 0 and sent to every rank."""
    if ckpt_path is None and stage == "fit":
        # A callback may choose where fit resumes (FaultTolerance: its newest complete checkpoint; collective).
        for chooser in trainer.callbacks:
            if type(chooser).resume_checkpoint_path is not Callback.resume_checkpoint_path:
                path = chooser.resume_checkpoint_path(trainer)
                if path is not None:
                    return path
        return None
    if ckpt_path is None:
        return None
    chosen: str | None = None
    refusal: str | None = None  # decided on rank 0, raised on every rank after the broadcast (no rank left waiting)
    if trainer.is_global_zero:
        if ckpt_path == "last":
            callbacks = trainer.checkpoint_callbacks
            chosen = find_last(
                [callback.dirpath for callback in callbacks if callback.dirpath],
                [callback.last_model_path for callback in callbacks if callback.last_model_path],
            )
            if chosen is None:
                warnings.warn(
                    f"{stage}(ckpt_path='last') is set, but there is no last checkpoint in "
                    f"{[callback.dirpath for callback in callbacks]}. No checkpoint will be loaded (save one with "
                    f"ModelCheckpoint(save_last=True)).",
                    CoreWarning,
                    stacklevel=2,
                )
        elif ckpt_path == "hpc":  # Lightning's name for the newest requeue checkpoint
            chosen = hpc_resume_path(trainer.default_root_dir)
            if chosen is None:
                refusal = (
                    f'{stage}(ckpt_path="hpc") is set but no HPC checkpoint was found (no hpc_ckpt_<n>.ckpt in '
                    f"{trainer.default_root_dir!r}). Please pass an exact checkpoint path to {stage}(ckpt_path=...)."
                )
        elif ckpt_path == "best":
            callback = trainer.checkpoint_callback
            chosen = callback.best_model_path if callback is not None else None
            if not chosen:
                refusal = (
                    f"{stage}(ckpt_path='best'): no best checkpoint is known (no ModelCheckpoint with monitor= has "
                    f"saved one in this Trainer); pass a path."
                )
        else:
            chosen = os.fspath(ckpt_path)
    chosen, refusal = trainer.lite.broadcast((chosen, refusal))
    if refusal is not None:
        raise ConfigurationError(refusal)
    if chosen is not None and "://" not in chosen and not os.path.exists(chosen):
        raise CheckpointNotFoundError(f"{stage}(ckpt_path={chosen!r}): no such file or directory.")
    return chosen


def _own_memory(module: Module) -> None:
    """Give this process its own copy of any parameter or buffer whose memory it shares with other processes.

    ``torch.multiprocessing`` pickles CPU tensors into shared memory, so the ranks of ``ddp_spawn`` would receive
    one set of weights between them, and every rank's optimizer step would land on it.
    """
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        if tensor.is_shared():
            tensor.data = tensor.data.clone()


def _attach(trainer: Trainer, lite: Lite, stage: str, module: Module, datamodule: DataModule | None) -> None:
    _own_memory(module)
    trainer.run_state.lite = lite
    trainer.module, trainer.datamodule = module, datamodule
    for logger in trainer.loggers:  # a logger of your own without a save_dir writes under default_root_dir
        logger.adopt_save_dir(trainer.default_root_dir)
    trainer.state = stage
    trainer.should_stop = False
    trainer.sanity_checking = False
    trainer.run_state.eval_logged_batches, trainer.run_state.eval_step_bar = {}, {}
    trainer.run_state.batch_logger_step = None
    module.trainer = trainer
    trainer.callbacks = _with_auto_requeue(_with_model_callbacks(trainer.callbacks, module), lite)
    for callback in trainer.callbacks:  # self.log in a callback logs through the Module, as in Lightning
        if not hasattr(type(callback), "log"):
            callback.log, callback.log_dict = module.log, module.log_dict  # type: ignore[attr-defined]
    trainer.run_state.hooks = CallbackHooks(trainer.callbacks)
    if datamodule is not None:
        datamodule.trainer = trainer
    if stage == "fit":
        reduce = (lambda tensor, op: lite.all_reduce(tensor, reduce_op=op)) if lite.world_size > 1 else None
        trainer.run_state.train_metrics = MetricStore(reduce, lite.is_global_zero, lite.device)
        trainer.run_state.metrics = trainer.run_state.train_metrics
        trainer.run_state.progress = FitProgress()
        trainer.run_state.callback_metrics, trainer.run_state.logged_metrics = {}, {}
        trainer.run_state.resume_rng = None
        trainer.run_state.epoch_start_rng = None
        trainer.run_state.epoch_samples = None
        trainer.run_state.resume_samples = None
        trainer.run_state.accumulate_grad_batches = None
    else:  # each entry point starts without metrics, as in Lightning: after test(), callback_metrics are test's
        trainer.run_state.train_metrics = MetricStore(None, lite.is_global_zero, lite.device)
        trainer.run_state.metrics = trainer.run_state.train_metrics
        trainer.run_state.callback_metrics, trainer.run_state.logged_metrics = {}, {}
        trainer.run_state.prog_bar_names = set()


def _with_auto_requeue(callbacks: list[Callback], lite: Lite) -> list[Callback]:
    """``callbacks`` with an :class:`~core.fault_tolerance.AutoRequeue` first when the run's environment can requeue
    its job (SLURM), as Lightning's Trainer saves ``hpc_ckpt_<n>.ckpt`` and requeues; removed at the run's end."""
    environment = lite.active.environment
    if not isinstance(environment, Requeueable) or any(isinstance(callback, AutoRequeue) for callback in callbacks):
        return callbacks
    return [AutoRequeue(environment), *callbacks]


def _with_model_callbacks(callbacks: list[Callback], module: Module) -> list[Callback]:
    """The Trainer's callbacks with the Module's ``configure_callbacks()`` added (Lightning's rule): a Trainer
    callback whose class the Module's callback is an instance of is replaced; checkpoints stay last."""
    given = module.configure_callbacks()
    if not given:
        return callbacks
    added = [given] if isinstance(given, Callback) else list(given)
    for callback in added:
        if not isinstance(callback, Callback):
            raise ConfigurationError(
                f"{type(module).__qualname__}.configure_callbacks() returned {callback!r}; expected "
                f"core.callbacks.Callback objects."
            )
    replaced = {type(mine) for mine in callbacks if type(mine) is not Callback
                and any(isinstance(theirs, type(mine)) for theirs in added)}
    kept = [callback for callback in callbacks if type(callback) not in replaced and callback not in added]

    def order(callback: Callback) -> int:
        return 2 if isinstance(callback, ModelCheckpoint) else 1 if isinstance(callback, EarlyStopping) else 0

    return sorted([*kept, *added], key=order)


def _detach(trainer: Trainer, module: Module, datamodule: DataModule | None) -> None:
    trainer.callbacks = [callback for callback in trainer.callbacks if type(callback) is not AutoRequeue]
    module._end_run()  # it keeps its trainer, as in Lightning (model.trainer, model.optimizers() after fit)
    for callback in trainer.callbacks:  # the Module's log methods, lent for the run
        if getattr(callback, "log", None) == module.log:
            del callback.log, callback.log_dict  # type: ignore[attr-defined]
    trainer.state = None
    trainer.sanity_checking = False
    trainer.run_state.step_module = None
    trainer.run_state.metrics = trainer.run_state.train_metrics


def _log_hyperparameters(trainer: Trainer, module: Module, datamodule: DataModule | None) -> None:
    if not trainer.config.enable_autolog_hparams or not trainer.loggers:
        return
    # Lightning's rule: the loggers get the hyperparameters of whichever of the Module and the DataModule called
    # save_hyperparameters() (logger=True, the default), empty ones too; nothing when neither did.
    if not module.logs_hparams and (datamodule is None or not datamodule.logs_hparams):
        return
    params: dict[str, Any] = dict(module.hparams_for_loggers)
    if datamodule is not None:
        _check_same_hparams(params, datamodule.hparams_for_loggers)
        params = {**params, **datamodule.hparams_for_loggers}  # Lightning's order (the values agree)
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_hyperparams(params)


def _check_same_hparams(module_params: Mapping[str, Any], datamodule_params: Mapping[str, Any]) -> None:
    """The Module's and the DataModule's hyperparameters go to the loggers as one dict: a name in both must hold the
    same value (of the same type; a tensor: the same object), as Lightning checks."""
    different = []
    for key in module_params.keys() & datamodule_params.keys():
        mine, theirs = module_params[key], datamodule_params[key]
        if type(mine) is not type(theirs) or (mine is not theirs and (
                isinstance(mine, torch.Tensor) or bool(mine != theirs))):
            different.append(key)
    if different:
        raise RuntimeError(
            f"Error while merging hparams: the keys {sorted(different, key=str)} are present in both the "
            f"LightningModule's and LightningDataModule's hparams but have different values. Give each the same value, "
            f"rename one, or save it with save_hyperparameters(logger=False) on one side."
        )


def _set_up_data(trainer: Trainer, lite: Lite, stage: str, loaders: dict[str, Any]) -> dict[str, Any]:
    """The loaders of ``stage``, set up for this run: ``{"train": ..., "val": [...]}`` for fit, else the loop's.

    As in Lightning, the evaluation loaders are asked for before the training loader, and not at all when the
    loop's ``limit_*_batches`` is 0 or the Module has no step for it.
    """
    module, datamodule = trainer.module, trainer.datamodule
    assert module is not None  # attached before
    prepared: dict[str, Any] = {}
    loop = EVAL_LOOP_OF_STAGE[stage]
    prepared[loop.data] = _set_up_eval_data(trainer, lite, stage, loaders)
    if stage == "fit":
        found = find_loaders("train", "train_dataloader", loaders.get("train"), datamodule, module)
        if len(found) != 1:
            raise ConfigurationError(
                f"fit() needs exactly one training DataLoader (from train_dataloaders=, the DataModule's or the "
                f"Module's train_dataloader()); got {len(found)}."
            )
        prepared["train"] = prepare_train_loader(lite, found[0], trainer.config.limit_train_batches,
                                                 overfit=bool(trainer.config.overfit_batches),
                                                 use_distributed_sampler=trainer.config.use_distributed_sampler)
        trainer.num_training_batches = prepared["train"].batches
    for key, set_up in prepared.items():  # trainer.train_dataloader, .val_dataloaders, ... read them
        trainer.run_state.dataloaders[key] = [one.loader for one in (set_up if isinstance(set_up, list) else [set_up])]
    return prepared


def _set_up_eval_data(trainer: Trainer, lite: Lite, stage: str, loaders: dict[str, Any]) -> list[Any]:
    """The evaluation loaders of ``stage`` (fit's validation loaders), set up; ``[]`` when the loop does not run."""
    module, datamodule = trainer.module, trainer.datamodule
    assert module is not None  # attached before
    loop = EVAL_LOOP_OF_STAGE[stage]
    limit = getattr(trainer.config, loop.limit_flag)
    if stage == "fit" and not overrides(module, loop.step):
        _skip_validation(trainer, loaders.get(loop.data), datamodule, module)
        setattr(trainer, loop.batch_counts, [])
        return []
    if limit == 0:  # the loop is off: its data is not even asked for (Lightning's rule)
        setattr(trainer, loop.batch_counts, [])
        return []
    found = find_loaders(loop.data, loop.dataloader, loaders.get(loop.data), datamodule, module)
    if not found and stage != "fit":
        raise ConfigurationError(
            f"{stage}() found no {loop.data} data: pass dataloaders=, or give the DataModule / Module a "
            f"{loop.dataloader}()."
        )
    if stage == "fit" and trainer.config.overfit_batches:  # the same first batches every validation too
        found = [sequential(loader, "val") for loader in found]
    prepared = [prepare_eval_loader(lite, loader, limit, loop.limit_flag, trainer.config.use_distributed_sampler)
                for loader in found]
    setattr(trainer, loop.batch_counts, [loader.batches for loader in prepared])
    return prepared


def check_eval_step(stage: str, module: Module) -> None:
    """``validate()`` / ``test()`` need their step: refused before the run starts (before ``prepare_data`` and
    ``setup``, as Lightning's ``_verify_loop_configurations``)."""
    if stage not in ("validate", "test"):
        return
    step = EVAL_LOOP_OF_STAGE[stage].step
    if not overrides(module, step):
        raise ConfigurationError(
            f"{stage}() runs {type(module).__qualname__}.{step}(), which it does not override: define "
            f"{step}(self, batch, batch_idx)."
        )


def _agree_logger_versions(trainer: Trainer, lite: Lite) -> None:
    """Every rank takes the logger versions global rank 0 chose, so that paths under a logger's directory (the
    checkpoints of Lightning's layout, the profiler's files) are the same on every rank."""
    if lite.world_size == 1 or not trainer.loggers:
        return
    chosen = [logger.version if lite.is_global_zero else None for logger in trainer.loggers]
    for logger, version in zip(trainer.loggers, lite.broadcast(chosen), strict=True):
        logger.use_version(version)


def _skip_validation(trainer: Trainer, given: Any, datamodule: DataModule | None, module: Module) -> None:
    """fit() without a ``validation_step``: no validation at all, as in Lightning (the loaders are not even built);
    a warning on global rank 0 when validation data was given (Lightning's words)."""
    defined = given is not None or overrides(module, "val_dataloader") or (
        datamodule is not None and overrides(datamodule, "val_dataloader"))
    if defined and trainer.is_global_zero:
        warnings.warn(
            f"Validation data was given but {type(module).__qualname__} does not override validation_step(): the "
            f"validation loop is skipped (as Lightning does). Define validation_step(self, batch, batch_idx) to "
            f"validate.",
            CoreWarning,
            stacklevel=3,
        )


def run_stage(
    lite: Lite,
    trainer: Trainer,
    stage: str,
    module: Module,
    datamodule: DataModule | None,
    loaders: dict[str, Any],
    ckpt_path: Any,
    launcher_pid: int,
) -> Any:
    """Run ``stage`` in this process; return its result, or an :class:`Outcome` from a process of ddp_spawn."""
    from core.trainer._eval import run_evaluation, run_predict
    from core.trainer._loops import run_fit

    _attach(trainer, lite, stage, module, datamodule)
    _agree_logger_versions(trainer, lite)
    profiler = trainer.active_profiler
    if profiler is not None:
        profiler.setup(stage, lite.global_rank if lite.world_size > 1 else None, trainer.log_dir, lite.is_global_zero)
        trainer.run_state.hooks.profile(profiler.wrap)
    unprofile = _profile_datamodule(profiler, datamodule) if profiler is not None and datamodule is not None else None
    status = "failed"
    try:
        if trainer.config.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        _apply_benchmark(trainer.config.benchmark, trainer.config.deterministic)
        _prepare_data(lite, datamodule, module)
        if datamodule is not None:
            datamodule.setup(stage=stage)
        for setup in trainer.run_state.hooks["setup"]:
            setup(trainer, module, stage=stage)
        module.setup(stage=stage)
        with lite.init_module(empty_init=False):
            module.configure_model()  # layers created here are created for the strategy (Lightning's hook)
        if trainer.config.sync_batchnorm:
            _convert_sync_batchnorm(lite, module)
        if stage == "fit":
            data = _set_up_data(trainer, lite, stage, loaders)  # first: configure_optimizers may read its length
            _check_optimization_flags(trainer, module)
            _set_up_model_and_optimizers(trainer, lite, module)
        else:
            trainer.run_state.step_module = lite.setup_module(StepModule(module))
        path = _resolve_ckpt_path(trainer, ckpt_path, stage)
        trainer.run_state.ckpt_path = path
        if path is not None:
            restore_checkpoint_state(trainer, path, weights_only=stage != "fit")
        if stage != "fit":
            module.zero_grad()  # no gradients left from before the run (Lightning's start of every stage)
            data = _set_up_data(trainer, lite, stage, loaders)
        if stage == "fit":
            _log_hyperparameters(trainer, module, datamodule)
            reload = (lambda: _set_up_data(trainer, lite, "fit", loaders)) if (
                trainer.config.reload_dataloaders_every_n_epochs) else None
            with torch.autograd.set_detect_anomaly(trainer.config.detect_anomaly):
                run_fit(trainer, data["train"], data["val"], reload)
            result: Any = None
        elif not data[EVAL_LOOP_OF_STAGE[stage].data]:  # the loop is off (limit 0): no hook runs
            result = None if stage == "predict" else []
        elif stage == "predict":
            result = run_predict(trainer, data["predict"])
        else:
            result = run_evaluation(trainer, stage, data["val" if stage == "validate" else "test"])
        status = "success"
    except BaseException as error:
        for hook in trainer.run_state.hooks["on_exception"]:
            hook(trainer, module, error)
        raise
    finally:
        try:
            if datamodule is not None:
                datamodule.teardown(stage=stage)
            for teardown in trainer.run_state.hooks["teardown"]:
                teardown(trainer, module, stage=stage)
            module.teardown(stage=stage)
            if trainer.is_global_zero:
                for logger in trainer.loggers:
                    logger.finalize(status)
        finally:
            if unprofile is not None:
                unprofile()
            if profiler is not None:
                try:
                    profiler.describe()
                finally:
                    profiler.teardown(stage)
            _detach(trainer, module, datamodule)
    if os.getpid() != launcher_pid:
        if lite.is_global_zero:
            return _outcome(trainer, module, result)
        return None
    return result


_PROFILED_DATAMODULE_HOOKS: Final = ("prepare_data", "setup", "teardown", "state_dict", "load_state_dict")


def _profile_datamodule(profiler: Profiler, datamodule: DataModule) -> Callable[[], None]:
    """Time the DataModule's hooks under Lightning's action names (``[LightningDataModule]<class>.setup``, ...) for
    this run: each is replaced on the object by a timed one; the returned function puts the originals back."""
    owned = {name: datamodule.__dict__[name] for name in _PROFILED_DATAMODULE_HOOKS if name in datamodule.__dict__}
    for name in _PROFILED_DATAMODULE_HOOKS:
        timed = profiler.wrap(f"[LightningDataModule]{type(datamodule).__name__}.{name}", getattr(datamodule, name))
        setattr(datamodule, name, timed)

    def restore() -> None:
        for name in _PROFILED_DATAMODULE_HOOKS:
            if name in owned:
                setattr(datamodule, name, owned[name])
            else:
                datamodule.__dict__.pop(name, None)

    return restore


def _apply_benchmark(benchmark: bool | None, deterministic: bool) -> None:
    """Lightning's ``benchmark``: set ``cudnn.benchmark``; unset, leave it, but off under ``deterministic``."""
    if benchmark is not None:
        torch.backends.cudnn.benchmark = benchmark
    elif deterministic:
        torch.backends.cudnn.benchmark = False


def _convert_sync_batchnorm(lite: Lite, module: Module) -> None:
    """``sync_batchnorm=True``: every BatchNorm layer of the Module becomes a ``SyncBatchNorm`` (in place)."""
    check_sync_batchnorm(lite.world_size, lite.device.type)
    for name, child in list(module.named_children()):
        converted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(child)
        if converted is not child:
            setattr(module, name, converted)


def save_after_fit(lite: Lite, trainer: Trainer, module: Module, filepath: str, weights_only: bool) -> None:
    """``trainer.save_checkpoint`` after ``fit`` returned, in every process of a fresh launch with the same settings:
    the fitted module and optimizers are set up again (nothing trains) and saved as a checkpoint taken at the end
    of the fit, so ``fit(ckpt_path=...)`` resumes from it. The optimizers set up are those the fit ended with, as its
    strategy made them (FairScale's OSS holds its shard's state); where the strategy replaced one by an engine's own
    that is no ``torch.optim.Optimizer`` (DeepSpeed's ZeRO optimizer), the one ``configure_optimizers`` made, which
    such a strategy recognises and gives its ended state back to."""
    ended = [opt.optimizer if isinstance(opt, LiteOptimizer) else opt for opt in trainer.optimizers]
    configured = trainer.run_state.configured_optimizers or ended
    optimizers = [now if isinstance(now, torch.optim.Optimizer) else made
                  for now, made in zip(ended, configured, strict=True)]
    trainer.run_state.lite = lite
    module.trainer = trainer
    try:
        step_module, *set_up = lite.setup(StepModule(module), *optimizers)
        trainer.run_state.step_module = step_module
        trainer.optimizers = set_up
        if trainer.run_state.fit_precision_state:  # the fit's loss scale, not a fresh plugin's
            lite._hooks.precision_load_state_dict(state=trainer.run_state.fit_precision_state)
        lite.save(filepath, saved_checkpoint_state(trainer, weights_only=weights_only))
    finally:
        module._end_run()
        trainer.run_state.step_module = None
