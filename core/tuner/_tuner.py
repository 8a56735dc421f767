"""``Tuner.lr_find`` and ``Tuner.scale_batch_size``: trial fits on a copy of the Trainer's settings."""

from __future__ import annotations

import gc
import math
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from core._checks import is_whole
from core._errors import ConfigurationError, CoreWarning
from core.callbacks import Callback

if TYPE_CHECKING:
    from core.module import DataModule, Module
    from core.trainer import Trainer

__all__ = ["LRFinder", "Tuner"]

_MODES = ("exponential", "linear")
_SCALE_MODES = ("power", "binsearch")
_LR_ATTRIBUTES = ("lr", "learning_rate")


class LRFinder:
    """What :meth:`Tuner.lr_find` measured: ``results["lr"]`` and ``results["loss"]`` (smoothed), step by step.

    :param mode: ``"exponential"`` or ``"linear"`` growth of the learning rate.
    """

    def __init__(self, mode: str, lr_min: float, lr_max: float, num_training: int) -> None:
        self.mode = mode
        self.lr_min = lr_min
        self.lr_max = lr_max
        self.num_training = num_training
        self.results: dict[str, list[float]] = {"lr": [], "loss": []}
        self._optimal_idx: int | None = None

    def lr_at(self, step: int) -> float:
        """The learning rate of sweep step ``step`` (0 .. num_training - 1)."""
        fraction = step / max(self.num_training - 1, 1)
        if self.mode == "exponential":
            return self.lr_min * (self.lr_max / self.lr_min) ** fraction
        return self.lr_min + (self.lr_max - self.lr_min) * fraction

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The learning rate where the smoothed loss falls fastest (the most negative gradient of the loss with
        respect to the learning rate), ignoring the first ``skip_begin`` and last ``skip_end`` points; ``None``
        when fewer than 2 finite points remain (train longer, or on more data)."""
        end = len(self.results["loss"]) - skip_end
        losses = torch.tensor(self.results["loss"][skip_begin:end], dtype=torch.float64)
        rates = torch.tensor(self.results["lr"][skip_begin:end], dtype=torch.float64)
        finite = torch.isfinite(losses)
        indices = torch.arange(skip_begin, max(end, skip_begin))[finite]
        losses, rates = losses[finite], rates[finite]
        if len(losses) < 2:
            self._optimal_idx = None
            return None
        gradients = torch.gradient(losses, spacing=[rates])[0]
        self._optimal_idx = int(indices[int(torch.argmin(gradients))])
        return self.results["lr"][self._optimal_idx]

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """The loss against the learning rate (a log axis for the exponential sweep), with the suggestion marked
        when ``suggest``; returns the matplotlib figure (matplotlib must be installed)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ConfigurationError("LRFinder.plot() needs matplotlib: pip install matplotlib.") from None
        figure, axes = (plt.subplots() if ax is None else (ax.figure, ax))
        axes.plot(self.results["lr"], self.results["loss"])
        if self.mode == "exponential":
            axes.set_xscale("log")
        axes.set_xlabel("Learning rate")
        axes.set_ylabel("Loss")
        if suggest:
            suggested = self.suggestion()
            if suggested is not None and self._optimal_idx is not None:
                axes.plot(suggested, self.results["loss"][self._optimal_idx], markersize=10, marker="o", color="red")
        if show:
            plt.show()
        return figure


class _Sweep(Callback):
    """Sets the learning rate of each step of the sweep and records the smoothed loss (all processes agree)."""

    def __init__(self, finder: LRFinder, early_stop_threshold: float | None, beta: float = 0.98) -> None:
        self.finder = finder
        self.early_stop_threshold = early_stop_threshold
        self.beta = beta
        self.average = 0.0
        self.best = math.inf
        self.recorded_step = 0

    def on_train_batch_start(self, trainer: Trainer, module: Module, batch: Any, batch_idx: int) -> None:
        rate = self.finder.lr_at(trainer.global_step)
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = rate

    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.recorded_step:
            return  # accumulating gradients: the step (and its record) comes with the window's last batch
        self.recorded_step = trainer.global_step
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if not isinstance(loss, torch.Tensor):
            raise ConfigurationError(
                "lr_find records the loss training_step returns (a tensor, or a dict with 'loss'); it returned "
                f"{type(outputs).__name__}."
            )
        loss = loss.detach().float()
        if trainer.world_size > 1:  # every process records the same mean, so every process suggests the same
            loss = trainer.lite.all_reduce(loss, reduce_op="mean")
        value = float(loss)
        count = len(self.finder.results["loss"])
        self.average = self.beta * self.average + (1 - self.beta) * value
        smoothed = self.average / (1 - self.beta ** (count + 1))
        self.finder.results["lr"].append(self.finder.lr_at(trainer.global_step - 1))
        self.finder.results["loss"].append(smoothed)
        diverged = not math.isfinite(smoothed) or (
            self.early_stop_threshold is not None and count > 1 and smoothed > self.early_stop_threshold * self.best)
        if diverged:
            trainer.should_stop = True
        if smoothed < self.best or count == 1:
            self.best = smoothed


class Tuner:
    """Lightning's ``Tuner``: ``lr_find`` and ``scale_batch_size`` for a Trainer and a Module.

    Each trial is a ``fit`` of a separate Trainer with ``trainer``'s accelerator, strategy, devices, precision,
    gradient accumulation and clipping, without loggers, checkpoints, progress bar, callbacks or validation; the
    Module's weights are restored after every trial, so the real ``trainer.fit`` starts from where they were.
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    def _skipped_for_fast_dev_run(self, what: str) -> bool:
        """Lightning's rule: under ``fast_dev_run`` (a check that the code runs) a tuner does nothing, with a
        warning, and returns ``None``."""
        if not self._trainer.config.fast_dev_run:
            return False
        warnings.warn(
            f"Skipping {what} since `fast_dev_run` is enabled: it checks that the code runs, in too few steps to "
            f"tune anything. Tune without fast_dev_run.", CoreWarning, stacklevel=3,
        )
        return True

    def lr_find(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinder | None:
        """Sweep the learning rate over ``num_training`` steps and suggest one; see :class:`LRFinder`.

        :param early_stop_threshold: Stop once the smoothed loss exceeds this many times the best so far (``None``:
            run every step).
        :param update_attr: Write the suggestion to ``attr_name`` (or the first of ``lr``, ``learning_rate``) of
            the Module or its ``hparams``.
        :return: The finder, with ``results``, ``suggestion()`` and ``plot()``.
        """
        _check_method(method, "lr_find")
        if mode not in _MODES:
            raise ConfigurationError(f"lr_find(mode={mode!r}): expected one of {list(_MODES)}.")
        if not 0 < min_lr < max_lr:
            raise ConfigurationError(f"lr_find(min_lr={min_lr}, max_lr={max_lr}): expected 0 < min_lr < max_lr.")
        if not is_whole(num_training, 2):
            raise ConfigurationError(f"lr_find(num_training={num_training!r}): expected an int >= 2.")
        if self._skipped_for_fast_dev_run("learning rate finder"):
            return None
        attribute = _lr_attribute(model, attr_name) if update_attr else None
        finder = LRFinder(mode, min_lr, max_lr, num_training)
        sweep = _Sweep(finder, early_stop_threshold)
        with _restored(model):
            self._trial(num_training, [sweep]).fit(model, train_dataloaders, datamodule=datamodule)
        suggested = finder.suggestion()
        if attribute is not None and suggested is not None:
            _set_attribute(model, datamodule, attribute, suggested)
        return finder

    def scale_batch_size(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: DataModule | None = None,
        method: str = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
    ) -> int | None:
        """The largest batch size that trains ``steps_per_trial`` steps without running out of memory.

        ``mode="power"`` doubles from ``init_val`` until a trial fails (or the batch covers the dataset);
        ``"binsearch"`` then halves the gap between the last success and the first failure. The Module (or its
        ``hparams``, or the DataModule) must hold ``batch_arg_name`` and build its loaders from it; the result is
        left there.
        """
        _check_method(method, "scale_batch_size")
        if self._trainer.world_size > 1:
            raise ConfigurationError(
                f"scale_batch_size() runs on one process (Lightning's rule too), and this Trainer runs "
                f"{self._trainer.world_size}: an out-of-memory failure in one process ends the run of every process, "
                f"so the trials cannot go on. Tune with Trainer(devices=1) on the same kind of device, then train "
                f"with the batch size it finds (the per-process batch size is what has to fit)."
            )
        if train_dataloaders is not None or dataloaders is not None or val_dataloaders is not None:
            raise ConfigurationError(
                "scale_batch_size() builds the loaders again for each batch size, so they cannot be passed in: "
                f"give the Module (or a DataModule) a train_dataloader() that reads self.{batch_arg_name}."
            )
        if mode not in _SCALE_MODES:
            raise ConfigurationError(f"scale_batch_size(mode={mode!r}): expected one of {list(_SCALE_MODES)}.")
        for name, value in (("steps_per_trial", steps_per_trial), ("init_val", init_val), ("max_trials", max_trials)):
            if not is_whole(value, 1):
                raise ConfigurationError(f"scale_batch_size({name}={value!r}): expected a positive int.")
        if _find_attribute(model, datamodule, batch_arg_name) is None:
            raise ConfigurationError(
                f"scale_batch_size(batch_arg_name={batch_arg_name!r}): neither {type(model).__name__} nor its "
                f"hparams{' nor the DataModule' if datamodule is not None else ''} has {batch_arg_name!r}; add it "
                f"and build train_dataloader() with it."
            )
        if self._skipped_for_fast_dev_run("batch size scaler"):
            return None
        original = _find_attribute(model, datamodule, batch_arg_name)
        size, low, high = init_val, 0, None
        with _restored(model):
            for _ in range(max_trials):
                size = _capped(size, model, datamodule)
                _set_attribute(model, datamodule, batch_arg_name, size)
                if self._fits(model, datamodule, steps_per_trial):
                    low = size
                    if high is None:
                        bigger = _capped(size * 2, model, datamodule)
                        if bigger == size:
                            break  # the batch covers the whole dataset
                        size = bigger
                    elif high - low <= 1:
                        break
                    else:
                        size = (low + high) // 2
                else:
                    high = size
                    if low == 0:
                        raise ConfigurationError(
                            f"scale_batch_size(): even batch_size={size} runs out of memory; lower init_val."
                        )
                    if mode == "power" or high - low <= 1:
                        break
                    size = (low + high) // 2
        found = low or original
        _set_attribute(model, datamodule, batch_arg_name, found)
        return int(found) if found is not None else None

    def _fits(self, model: Module, datamodule: DataModule | None, steps: int) -> bool:
        try:
            self._trial(steps, []).fit(model, datamodule=datamodule)
        except BaseException as error:
            if not _out_of_memory(error):
                raise
            gc.collect()
            return False
        return True

    def _trial(self, steps: int, callbacks: list[Callback]) -> Trainer:
        from core.trainer import Trainer

        trainer = self._trainer
        return Trainer(
            **trainer.lite_settings, max_steps=steps, max_epochs=-1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
            callbacks=callbacks, accumulate_grad_batches=trainer.accumulate_grad_batches,
            gradient_clip_val=trainer.gradient_clip_val, gradient_clip_algorithm=trainer.gradient_clip_algorithm,
            deterministic=trainer.deterministic, default_root_dir=trainer.default_root_dir,
            use_distributed_sampler=trainer.config.use_distributed_sampler,
        )


class _restored:
    """Puts the Module's weights and buffers back as they were when the block ends, whatever happened in it."""

    def __init__(self, model: Module) -> None:
        self.model = model

    def __enter__(self) -> None:
        self.saved = {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}

    def __exit__(self, *exc: object) -> None:
        self.model.load_state_dict(self.saved)


def _check_method(method: str, what: str) -> None:
    if method != "fit":
        raise ConfigurationError(
            f"{what}(method={method!r}): only 'fit' is supported (tuning for validate/test/predict changes nothing "
            f"that training uses)."
        )


def _lr_attribute(model: Module, attr_name: str) -> str:
    names = (attr_name,) if attr_name else _LR_ATTRIBUTES
    for name in names:
        if _find_attribute(model, None, name) is not None:
            return name
    raise ConfigurationError(
        f"lr_find(update_attr=True) writes the suggestion to {' or '.join(repr(n) for n in names)} of "
        f"{type(model).__name__} or its hparams, which has none; add the attribute (and read it in "
        f"configure_optimizers), pass attr_name=, or update_attr=False and read lr_find(...).suggestion()."
    )


def _holders(model: Module, datamodule: DataModule | None) -> list[Any]:
    holders: list[Any] = [model, getattr(model, "hparams", None)]
    if datamodule is not None:
        holders += [datamodule, getattr(datamodule, "hparams", None)]
    return [holder for holder in holders if holder is not None]


def _find_attribute(model: Module, datamodule: DataModule | None, name: str) -> Any:
    for holder in _holders(model, datamodule):
        if isinstance(holder, Mapping) and name in holder:
            return holder[name]
        if not isinstance(holder, Mapping) and name in vars(holder):
            return getattr(holder, name)
    return None


def _set_attribute(model: Module, datamodule: DataModule | None, name: str, value: Any) -> None:
    """Lightning's rule: every holder that has the attribute gets the value."""
    for holder in _holders(model, datamodule):
        if isinstance(holder, Mapping) and name in holder:
            holder[name] = value  # type: ignore[index]
        elif not isinstance(holder, Mapping) and name in vars(holder):
            setattr(holder, name, value)


def _capped(size: int, model: Module, datamodule: DataModule | None) -> int:
    """``size``, or the training set's length when that is smaller (a bigger batch holds no more samples)."""
    source = datamodule if datamodule is not None else model
    try:
        loader = source.train_dataloader()
        length = len(loader.dataset)
    except Exception:  # no sized dataset: no cap
        return size
    return min(size, length)


def _out_of_memory(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, torch.OutOfMemoryError):
            return True
        text = str(seen)
        if "out of memory" in text or "can't allocate memory" in text:  # CUDA, HIP, and the CPU allocator's words
            return True
        seen = seen.__cause__ or seen.__context__
    return False
