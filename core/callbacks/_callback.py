"""``Callback``: code that acts at points of the Trainer's loops, outside the Module.

Every hook takes the trainer and the module first. Callbacks run on every rank; one that writes files
does it on global rank 0 (``trainer.is_global_zero``). A callback with state (counters, best scores)
returns it from :meth:`Callback.state_dict` and gets it back from checkpoints by its :attr:`state_key`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

if TYPE_CHECKING:
    import torch

    from core.module import Module, TrainerView

__all__ = ["Callback", "CallbackHooks"]


# The base hooks take the trainer as ``Any``: an override may then annotate it as ``TrainerView`` (as the callbacks
# of this package do), or as the concrete ``core.Trainer`` (Lightning code annotates ``pl.Trainer``; the Tuner's
# and fault_tolerance's callbacks sit above the Trainer). A narrower type here would make such overrides errors:
# an argument's type may only widen in a subclass.
AnyTrainer: TypeAlias = Any


class Callback:
    """Base class of callbacks: override the hooks you need (each does nothing here).

    :cvar after_epoch_metrics: ``True`` for callbacks that judge the epoch (early stopping, checkpoints):
        their ``on_train_epoch_end`` runs after the epoch's metrics are computed and logged and the
        epoch-interval schedulers stepped, so that a checkpoint saved there resumes at the next epoch.
    """

    after_epoch_metrics: ClassVar[bool] = False

    @property
    def state_key(self) -> str:
        """The key of this callback's state in checkpoints; unique among the callbacks of one Trainer."""
        return type(self).__qualname__

    def _state_key_with(self, **settings: Any) -> str:
        return f"{type(self).__qualname__}{settings!r}"

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...

    def setup(self, trainer: AnyTrainer, module: Module, stage: str) -> None: ...

    def teardown(self, trainer: AnyTrainer, module: Module, stage: str) -> None: ...

    def on_fit_start(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_fit_end(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_sanity_check_start(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_sanity_check_end(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_train_start(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_train_end(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_train_epoch_start(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_train_epoch_end(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_train_batch_start(self, trainer: AnyTrainer, module: Module, batch: Any, batch_idx: int) -> None: ...

    def on_train_batch_end(
        self, trainer: AnyTrainer, module: Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None: ...

    def on_validation_start(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_validation_end(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_validation_epoch_start(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_validation_epoch_end(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_validation_batch_start(
        self, trainer: AnyTrainer, module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_validation_batch_end(
        self, trainer: AnyTrainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_test_start(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_test_end(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_test_epoch_start(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_test_epoch_end(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_test_batch_start(
        self, trainer: AnyTrainer, module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_test_batch_end(
        self, trainer: AnyTrainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_predict_start(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_predict_end(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_predict_epoch_start(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_predict_epoch_end(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_predict_batch_start(
        self, trainer: AnyTrainer, module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_predict_batch_end(
        self, trainer: AnyTrainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_before_backward(self, trainer: AnyTrainer, module: Module, loss: torch.Tensor) -> None: ...

    def on_after_backward(self, trainer: AnyTrainer, module: Module) -> None: ...

    def on_before_optimizer_step(
        self, trainer: AnyTrainer, module: Module, optimizer: torch.optim.Optimizer
    ) -> None: ...

    def on_before_zero_grad(self, trainer: AnyTrainer, module: Module, optimizer: torch.optim.Optimizer) -> None: ...

    def on_save_checkpoint(self, trainer: AnyTrainer, module: Module, checkpoint: dict[str, Any]) -> None: ...

    def on_load_checkpoint(self, trainer: AnyTrainer, module: Module, checkpoint: dict[str, Any]) -> None: ...

    def on_exception(self, trainer: AnyTrainer, module: Module, exception: BaseException) -> None: ...

    def resume_checkpoint_path(self, trainer: AnyTrainer) -> str | None:
        """The checkpoint ``fit()`` resumes from when it is given no ``ckpt_path``, or None to start afresh.

        Called on every rank at the start of ``fit`` (so an implementation may use collectives), for the
        callbacks that override it, in callback order; the first path returned wins. :class:`FaultTolerance`
        returns its newest complete checkpoint.
        """
        return None


HOOK_NAMES = tuple(
    name for name, value in vars(Callback).items() if callable(value) and (name.startswith("on_") or name in (
        "setup", "teardown"))
)


def _overrides(callback: Callback, name: str, base: object) -> bool:
    """Whether ``callback`` implements hook ``name``: in its class, or as its own attribute (LambdaCallback)."""
    return name in vars(callback) or getattr(type(callback), name, base) is not base


class CallbackHooks:
    """For each hook, the bound methods of the callbacks that override it, in callback order.

    Built once per run, so that a loop calls only what some callback implements: with no callback
    overriding ``on_train_batch_end``, a training step spends nothing on it.
    """

    def __init__(self, callbacks: Sequence[Callback]) -> None:
        self.callbacks = list(callbacks)
        self._hooks: dict[str, list[Callable[..., Any]]] = {}
        for name in HOOK_NAMES:
            base = getattr(Callback, name)
            self._hooks[name] = [getattr(callback, name) for callback in callbacks if _overrides(callback, name, base)]
        self._epoch_end = list(self._owners("on_train_epoch_end"))

    def __getitem__(self, name: str) -> list[Callable[..., Any]]:
        return self._hooks[name]

    def profile(self, wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]]) -> None:
        """Replace each hook by ``wrap("[Callback]<state key>.<hook>", hook)`` (a profiler's timing wrapper)."""
        for name in self._hooks:
            self._hooks[name] = [wrap(f"[Callback]{callback.state_key}.{name}", hook)
                                 for callback, hook in self._owners(name)]
        self._epoch_end = [(callback, wrap(f"[Callback]{callback.state_key}.on_train_epoch_end", hook))
                           for callback, hook in self._owners("on_train_epoch_end")]

    def call(self, name: str, trainer: TrainerView, module: Module, *args: Any) -> None:
        for hook in self._hooks[name]:
            hook(trainer, module, *args)

    def call_epoch_end(self, trainer: TrainerView, module: Module, after_metrics: bool) -> None:
        """``on_train_epoch_end`` of the callbacks in one of the two groups (see ``after_epoch_metrics``)."""
        for callback, hook in self._epoch_end:
            if callback.after_epoch_metrics == after_metrics:
                hook(trainer, module)

    def _owners(self, name: str) -> Iterable[tuple[Callback, Callable[..., Any]]]:
        base = getattr(Callback, name)
        for callback in self.callbacks:
            if _overrides(callback, name, base):
                yield callback, getattr(callback, name)
