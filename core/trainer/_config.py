"""The Trainer's flags as one validated, frozen record.

:meth:`TrainerConfig.from_flags` turns what the user passed to ``Trainer(...)`` into the record, applying the
defaults (``max_epochs=None`` means 1000 unless ``max_steps`` is set, a ``None`` limit means the whole loader)
and raising :class:`core.ConfigurationError` naming the flag and what it accepts. The Trainer keeps the record
as ``trainer.config`` and reads every flag from it; ``trainer.max_epochs`` and friends are read-only views.
"""

from __future__ import annotations

import os
from typing import Final

import attrs

from core._checks import is_whole
from core._errors import ConfigurationError
from core.trainer._data import check_limit

CLIP_ALGORITHMS: Final = ("norm", "value")
SYNC_BATCHNORM_DEVICES: Final = ("cuda", "xpu", "hpu")


def _fast_dev_run(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"fast_dev_run={value!r}: expected True/False or a number of batches >= 0.")
    return value


def positive_int(value: object, flag: str, minimum: int = 1) -> int:
    if not is_whole(value, minimum):
        raise ConfigurationError(f"{flag}={value!r}: expected a whole number >= {minimum}.")
    return value


def _optional_count(value: object, flag: str, allow_minus_one: bool = False) -> int | None:
    if value is None:
        return None
    if allow_minus_one and value == -1:
        return -1
    return positive_int(value, flag, minimum=0)


def _val_check_interval(value: object) -> int | float:
    interval = 1.0 if value is None else value
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0 or (
        isinstance(interval, float) and interval > 1.0
    ):
        raise ConfigurationError(
            f"val_check_interval={value!r}: expected a fraction of the epoch (float in (0, 1]) or "
            f"a number of training batches (int >= 1)."
        )
    return interval


def _check_val_every_n_epoch(value: object, interval: int | float, given_interval: object) -> int | None:
    if value is None:
        if not isinstance(interval, int):
            raise ConfigurationError(
                "check_val_every_n_epoch=None counts training batches across epochs, so val_check_interval "
                f"must be a number of batches (int), got {given_interval!r}."
            )
        return None
    return positive_int(value, "check_val_every_n_epoch")


def _clipping(value: object, algorithm: object) -> tuple[float | None, str]:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
        raise ConfigurationError(f"gradient_clip_val={value!r}: expected a number >= 0 or None.")
    chosen = "norm" if algorithm is None else algorithm
    if chosen not in CLIP_ALGORITHMS:
        raise ConfigurationError(f"gradient_clip_algorithm={algorithm!r}: expected 'norm' or 'value'.")
    return (None if not value else float(value)), str(chosen)


@attrs.frozen(kw_only=True)
class TrainerConfig:
    """Every flag of the Trainer's loops, validated (see :class:`core.Trainer` for what each one does)."""

    default_root_dir: str
    max_epochs: int
    min_epochs: int
    max_steps: int
    min_steps: int
    val_check_interval: int | float
    check_val_every_n_epoch: int | None
    limit_train_batches: int | float
    limit_val_batches: int | float
    limit_test_batches: int | float
    limit_predict_batches: int | float
    num_sanity_val_steps: int
    accumulate_grad_batches: int
    gradient_clip_val: float | None
    gradient_clip_algorithm: str
    log_every_n_steps: int
    deterministic: bool
    inference_mode: bool
    fast_dev_run: int
    overfit_batches: int | float = 0.0
    benchmark: bool | None = None
    use_distributed_sampler: bool = True
    detect_anomaly: bool = False
    sync_batchnorm: bool = False
    reload_dataloaders_every_n_epochs: int = 0
    barebones: bool = False

    @classmethod
    def from_flags(
        cls,
        *,
        default_root_dir: str | os.PathLike[str] | None = None,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        max_steps: int | None = -1,
        min_steps: int | None = None,
        val_check_interval: int | float | None = None,
        check_val_every_n_epoch: int | None = 1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        num_sanity_val_steps: int | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
        log_every_n_steps: int = 50,
        deterministic: bool = False,
        inference_mode: bool = True,
        fast_dev_run: int | bool = False,
        overfit_batches: int | float = 0.0,
        benchmark: bool | None = None,
        use_distributed_sampler: bool = True,
        detect_anomaly: bool = False,
        sync_batchnorm: bool = False,
        reload_dataloaders_every_n_epochs: int = 0,
        barebones: bool = False,
    ) -> TrainerConfig:
        """Validate the flags as given to ``Trainer(...)`` and apply their defaults.

        ``fast_dev_run=n`` (``True``: 1) overrides the loop flags as Lightning does: ``n`` batches of each stage,
        ``max_steps=n``, one epoch, no sanity check, validation at the end of the epoch. ``overfit_batches`` (a
        number or fraction of batches) replaces both ``limit_train_batches`` and ``limit_val_batches``, as in
        Lightning (the training loader's shuffling is turned off when the loaders are set up). ``barebones=True``
        refuses the flags that would slow the loop down (see :func:`barebones_conflicts`).
        """
        if barebones:
            conflicts = [f"{name}={value!r}" for name, value in (
                ("num_sanity_val_steps", num_sanity_val_steps), ("fast_dev_run", fast_dev_run),
                ("detect_anomaly", detect_anomaly)) if value not in (0, False, None)]
            if conflicts:
                raise ConfigurationError(
                    f"Trainer(barebones=True, {', '.join(conflicts)}): barebones mode turns off everything that can "
                    f"slow the loop (sanity checking, development runs, anomaly detection, logging, checkpointing, "
                    f"the progress bar, the model summary); drop {' and '.join(conflicts)} or barebones=True."
                )
        if num_sanity_val_steps is None:
            num_sanity_val_steps = 0 if barebones else 2
        overfit = check_limit(overfit_batches, "overfit_batches")
        if overfit and not fast_dev_run:
            limit_train_batches = limit_val_batches = overfit
        fast = _fast_dev_run(fast_dev_run)
        if fast:
            limit_train_batches = limit_val_batches = limit_test_batches = limit_predict_batches = fast
            max_steps, max_epochs, num_sanity_val_steps = fast, 1, 0
            val_check_interval, check_val_every_n_epoch = 1.0, 1
        steps = -1 if max_steps is None else max_steps
        if steps != -1:
            positive_int(steps, "max_steps", minimum=0)
        epochs = _optional_count(max_epochs, "max_epochs", allow_minus_one=True)
        if epochs is None:
            epochs = 1000 if steps == -1 else -1
        least_epochs = _optional_count(min_epochs, "min_epochs") or 0
        least_steps = _optional_count(min_steps, "min_steps") or 0
        interval = _val_check_interval(val_check_interval)
        every_n_epoch = _check_val_every_n_epoch(check_val_every_n_epoch, interval, val_check_interval)
        limits = {
            name: check_limit(1.0 if value is None else value, name)
            for name, value in (
                ("limit_train_batches", limit_train_batches),
                ("limit_val_batches", limit_val_batches),
                ("limit_test_batches", limit_test_batches),
                ("limit_predict_batches", limit_predict_batches),
            )
        }
        if num_sanity_val_steps != -1:
            positive_int(num_sanity_val_steps, "num_sanity_val_steps", minimum=0)
        accumulate = positive_int(accumulate_grad_batches, "accumulate_grad_batches")
        clip_value, clip_algorithm = _clipping(gradient_clip_val, gradient_clip_algorithm)
        return cls(
            default_root_dir=os.fspath(default_root_dir) if default_root_dir is not None else os.getcwd(),
            max_epochs=epochs,
            min_epochs=least_epochs,
            max_steps=steps,
            min_steps=least_steps,
            val_check_interval=interval,
            check_val_every_n_epoch=every_n_epoch,
            **limits,
            num_sanity_val_steps=num_sanity_val_steps,
            accumulate_grad_batches=accumulate,
            gradient_clip_val=clip_value,
            gradient_clip_algorithm=clip_algorithm,
            log_every_n_steps=positive_int(log_every_n_steps, "log_every_n_steps"),
            deterministic=bool(deterministic),
            inference_mode=bool(inference_mode),
            fast_dev_run=fast,
            overfit_batches=overfit,
            benchmark=None if benchmark is None else bool(benchmark),
            use_distributed_sampler=bool(use_distributed_sampler),
            detect_anomaly=bool(detect_anomaly),
            sync_batchnorm=bool(sync_batchnorm),
            reload_dataloaders_every_n_epochs=positive_int(
                reload_dataloaders_every_n_epochs, "reload_dataloaders_every_n_epochs", minimum=0
            ),
            barebones=bool(barebones),
        )


def check_sync_batchnorm(world_size: int, device_type: str) -> None:
    """torch's ``SyncBatchNorm`` raises for other devices' tensors once a process group exists: refused first."""
    if world_size > 1 and device_type not in SYNC_BATCHNORM_DEVICES:
        raise ConfigurationError(
            f"Trainer(sync_batchnorm=True) on {world_size} processes of device type {device_type!r}: torch's "
            f"SyncBatchNorm synchronises statistics only for CUDA, XPU and HPU tensors (it raises for "
            f"{device_type!r}). Use accelerator='cuda', or sync_batchnorm=False (each process then normalises "
            f"with its own batch's statistics)."
        )
