"""The Trainer's loop flags as one validated, frozen record.

:meth:`TrainerConfig.from_flags` turns what the user passed to ``Trainer(...)`` into the record: each flag's
default and check come from its declaration (``core.trainer._flags.FLAGS``), then the rules that tie flags
together apply (``max_epochs=None`` means 1000 unless ``max_steps`` is set, ``fast_dev_run`` and
``overfit_batches`` override the limits, ``barebones`` refuses what would slow the loop). A bad value raises
:class:`core.ConfigurationError` naming the flag and what it accepts. The Trainer keeps the record as
``trainer.config`` and reads every flag from it; ``trainer.max_epochs`` and friends are read-only views.
"""

from __future__ import annotations

import os
from typing import Any, Final, TypeAlias

import attrs

from core._errors import ConfigurationError
from core.trainer._flags import BY_NAME, barebones_conflicts, flags_of, refuse_barebones_conflicts

SYNC_BATCHNORM_DEVICES: Final = ("cuda", "xpu", "hpu")

FlagValue: TypeAlias = "bool | int | float | str | os.PathLike[str] | None"
"""What a loop flag may be given as (each flag's declaration narrows it)."""


def _overridden(given: dict[str, Any]) -> dict[str, Any]:
    """The flags that other flags replace, before each is checked (a replaced value is not checked, as in
    Lightning): the defaults of ``max_epochs`` and the sanity check, ``overfit_batches`` and ``fast_dev_run``'s
    overrides."""
    flags = dict(given)
    if flags["max_epochs"] is None:
        flags["max_epochs"] = 1000 if flags["max_steps"] in (None, -1) else -1
    if flags["num_sanity_val_steps"] is None:
        flags["num_sanity_val_steps"] = 0 if flags["barebones"] else 2
    overfit = BY_NAME["overfit_batches"].checked(flags["overfit_batches"])
    if overfit and not flags["fast_dev_run"]:
        flags["limit_train_batches"] = flags["limit_val_batches"] = overfit
    fast = BY_NAME["fast_dev_run"].checked(flags["fast_dev_run"])
    if fast:
        for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches"):
            flags[name] = fast
        flags.update(max_steps=fast, max_epochs=1, num_sanity_val_steps=0, val_check_interval=1.0,
                     check_val_every_n_epoch=1)
    return flags


@attrs.frozen(kw_only=True)
class TrainerConfig:
    """Every flag of the Trainer's loops, validated (see :class:`core.Trainer` for what each one does)."""

    # <generated: record> by scripts/gen_trainer_flags.py from FLAGS (core/trainer/_flags.py): `make flags`
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
    overfit_batches: int | float
    benchmark: bool | None
    use_distributed_sampler: bool
    detect_anomaly: bool
    sync_batchnorm: bool
    reload_dataloaders_every_n_epochs: int
    barebones: bool
    enable_autolog_hparams: bool
    # </generated: record>

    @classmethod
    def from_flags(cls, **given: FlagValue) -> TrainerConfig:
        """Validate the loop flags as given to ``Trainer(...)`` and apply their defaults.

        ``fast_dev_run=n`` (``True``: 1) overrides the loop flags as Lightning does: ``n`` batches of each stage,
        ``max_steps=n``, one epoch, no sanity check, validation at the end of the epoch. ``overfit_batches`` (a
        number or fraction of batches) replaces both ``limit_train_batches`` and ``limit_val_batches``, as in
        Lightning (the training loader's shuffling is turned off when the loaders are set up). ``barebones=True``
        refuses the flags that would slow the loop down.
        """
        declared = flags_of("loop")
        unknown = sorted(set(given) - {flag.name for flag in declared})
        if unknown:
            raise TypeError(f"TrainerConfig.from_flags() got flags that are not the Trainer's loop flags: {unknown}")
        flags = {flag.name: given.get(flag.name, flag.default) for flag in declared}
        if flags["barebones"]:
            refuse_barebones_conflicts(barebones_conflicts(flags, "loop"))
        flags = _overridden(flags)
        checked = {flag.name: flag.checked(flags[flag.name]) for flag in declared}
        if checked["check_val_every_n_epoch"] is None and not isinstance(checked["val_check_interval"], int):
            raise ConfigurationError(
                "check_val_every_n_epoch=None counts training batches across epochs, so val_check_interval "
                f"must be a number of batches (int), got {flags['val_check_interval']!r}."
            )
        return cls(**checked)


def check_sync_batchnorm(world_size: int, device_type: str) -> None:
    """torch's ``SyncBatchNorm`` raises for other devices' tensors once a process group exists: refused first."""
    if world_size > 1 and device_type not in SYNC_BATCHNORM_DEVICES:
        raise ConfigurationError(
            f"Trainer(sync_batchnorm=True) on {world_size} processes of device type {device_type!r}: torch's "
            f"SyncBatchNorm synchronises statistics only for CUDA, XPU and HPU tensors (it raises for "
            f"{device_type!r}). Use accelerator='cuda', or sync_batchnorm=False (each process then normalises "
            f"with its own batch's statistics)."
        )
