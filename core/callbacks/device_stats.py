"""``DeviceStatsMonitor``: send the device's (and the host's) statistics to the loggers around training batches."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import torch

from core._errors import ConfigurationError
from core.callbacks._callback import Callback

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["DeviceStatsMonitor"]

# Lightning's names for the host's figures (lightning.fabric.accelerators.cpu).
CPU_VM_PERCENT = "cpu_vm_percent"
CPU_PERCENT = "cpu_percent"
CPU_SWAP_PERCENT = "cpu_swap_percent"


def cpu_stats() -> dict[str, float]:
    """The host's memory, CPU and swap use in percent (psutil)."""
    try:
        psutil = importlib.import_module("psutil")
    except ImportError:
        raise ConfigurationError("DeviceStatsMonitor reads CPU statistics with psutil: pip install psutil.") from None
    return {
        CPU_VM_PERCENT: float(psutil.virtual_memory().percent),
        CPU_PERCENT: float(psutil.cpu_percent()),
        CPU_SWAP_PERCENT: float(psutil.swap_memory().percent),
    }


def device_stats(device: torch.device) -> dict[str, float]:
    """What the accelerator reports about ``device``: ``torch.cuda.memory_stats`` on CUDA (and ROCm), the host's
    figures on the CPU, nothing elsewhere."""
    if device.type == "cuda":
        return {key: float(value) for key, value in torch.cuda.memory_stats(device).items()}
    if device.type == "cpu":
        return cpu_stats()
    return {}


class DeviceStatsMonitor(Callback):
    """Log the device's statistics at the start and the end of training batches, every ``log_every_n_steps``.

    Keys are Lightning's: ``DeviceStatsMonitor.on_train_batch_start/<stat>`` and ``..._end/<stat>``; on the CPU the
    stats are ``cpu_vm_percent``, ``cpu_percent`` and ``cpu_swap_percent`` (psutil).

    :param cpu_stats: Also log the host's figures on an accelerator (``None``: only on the CPU, where they are
        the device's; ``True``: always; ``False``: never, which on the CPU leaves nothing to log).
    """

    def __init__(self, cpu_stats: bool | None = None) -> None:
        self._cpu_stats = cpu_stats

    def setup(self, trainer: TrainerView, module: Module, stage: str) -> None:
        if stage != "fit":
            return
        if not trainer.loggers:
            raise ConfigurationError(
                "DeviceStatsMonitor sends statistics to the loggers, and this Trainer has none: give it a logger "
                "(logger=True or core.loggers.CSVLogger(...)), or remove the callback."
            )
        if self._cpu_stats is not False:
            cpu_stats()  # a missing psutil fails here, before training, naming the fix

    def on_train_batch_start(self, trainer: TrainerView, module: Module, batch: Any, batch_idx: int) -> None:
        self._log(trainer, "on_train_batch_start")

    def on_train_batch_end(
        self, trainer: TrainerView, module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._log(trainer, "on_train_batch_end")

    def _log(self, trainer: TrainerView, hook: str) -> None:
        if trainer.global_step % trainer.log_every_n_steps or trainer.sanity_checking:
            return
        device = trainer.lite.device
        stats = device_stats(device) if self._cpu_stats is not False or device.type != "cpu" else {}
        if self._cpu_stats and device.type != "cpu":
            stats.update(cpu_stats())
        if stats:
            prefix = f"{type(self).__qualname__}.{hook}/"
            trainer.log_to_loggers({prefix + key: value for key, value in stats.items()})
