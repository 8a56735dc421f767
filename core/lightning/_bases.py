"""Lightning's plugin base classes as annotation-only names: ``Accelerator``, ``Strategy`` and friends.

A program built on Fabric often imports ``Accelerator`` or ``Strategy`` only to annotate a parameter; that
works here, and ``isinstance(obj, Strategy)`` is true for any core plugin object of that kind (the project's
plugin protocol: an object whose ``kind`` names it). Subclassing one raises :class:`UnsupportedLightningName`,
since core's plugins are classes with ``@core.hookimpl`` methods, not subclasses of a base class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch

from core.lightning._names import UnsupportedLightningName

if TYPE_CHECKING:
    from core.trainer import Trainer

_NEW_PLUGIN = "python -m core.plugins new {kind} mine"


class _KindMeta(type):
    """``isinstance`` is true for a core plugin object of the class's kind (core._traits.PluginObject)."""

    def __instancecheck__(cls, obj: object) -> bool:
        return getattr(obj, "kind", None) in cls._kinds  # type: ignore[attr-defined]


class _PluginBase(metaclass=_KindMeta):
    _kinds: ClassVar[tuple[str, ...]] = ()
    _lightning_path: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if cls.__module__ == __name__:
            super().__init_subclass__(**kwargs)
            return
        base = cast("type[_PluginBase]", next(b for b in cls.__mro__[1:] if b.__module__ == __name__))
        kind = base._kinds[0]
        raise UnsupportedLightningName(
            f"class {cls.__name__}({base._lightning_path}) is not supported by core: there is no {kind} base "
            f"class to subclass; each {kind} plugin is a class with @core.hookimpl methods, registered by alias. "
            f"Instead: {_NEW_PLUGIN.format(kind=kind)} writes the skeleton (docs/writing-plugins.md); the name "
            "itself still works in annotations and isinstance checks."
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedLightningName(
            f"{self._lightning_path} cannot be constructed here: it stands for any core {self._kinds[0]} plugin "
            "in annotations. Instead: select a plugin by alias (accelerator='cpu', strategy='ddp', plugins=[...])."
        )


class Accelerator(_PluginBase):
    """``lightning.fabric.accelerators.Accelerator``: any core accelerator plugin, for annotations."""

    _kinds = ("accelerator",)
    _lightning_path = "lightning.fabric.accelerators.Accelerator"


class Strategy(_PluginBase):
    """``lightning.fabric.strategies.Strategy``: any core strategy plugin, for annotations.

    It holds the one ``Strategy`` method the Lightning Trainer calls on its strategy (``on_exception``), which
    :class:`StrategyView` (``trainer.strategy``) inherits.
    """

    _kinds = ("strategy",)
    _lightning_path = "lightning.fabric.strategies.Strategy"

    def on_exception(self, exception: BaseException) -> None:
        """Called by the Lightning Trainer when an entry point ends with ``exception`` (Ctrl-C included), after the
        callbacks' ``on_exception``. core's strategies release their processes and process groups themselves when
        the run ends, so there is nothing more to do here; Lightning's default is the same no-op."""


class StrategyView(Strategy):
    """``trainer.strategy`` of a Lightning Trainer: the run's strategy plugin, with the members of Lightning's
    ``Strategy`` that programs read (``root_device``, ``model``, ``broadcast``, ``barrier``, ...).

    ``isinstance(trainer.strategy, DDPStrategy)`` checks the plugin's class; any other attribute is the plugin's.
    It derives from :class:`Strategy`, so ``Strategy.on_exception`` is what the Trainer calls on it.
    """

    def __init__(self, trainer: Trainer) -> None:  # not Strategy's, which refuses construction
        self._trainer = trainer

    @property
    def plugin(self) -> object:
        return self._trainer.lite.strategy

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance() reads it: the view passes for the plugin's class
        return type(self.plugin)

    @property
    def root_device(self) -> torch.device:
        """The device of this process's run (the resolved one, also outside a run)."""
        active = self._trainer.lite.active
        if active.device is not None:
            return active.device
        accelerator, ids = active.config.accelerator, active.config.device_ids  # before the first run
        return torch.device("cpu") if accelerator == "cpu" or not ids else torch.device(accelerator, ids[0])

    @property
    def model(self) -> torch.nn.Module | None:
        """The module as the strategy wrapped it during a run (``DistributedDataParallel``), else the Module."""
        step_module = self._trainer.run_state.step_module
        if step_module is not None:
            wrapped = getattr(step_module, "_forward_module", None)
            return wrapped if wrapped is not None else step_module
        return self._trainer.module

    @property
    def launcher(self) -> None:
        return None  # core's strategies launch their own processes

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return self._trainer.lite.broadcast(obj, src)

    def barrier(self, name: str | None = None) -> None:
        self._trainer.lite.barrier(name)

    def all_gather(self, tensor: Any, group: Any | None = None, sync_grads: bool = False) -> Any:
        return self._trainer.lite.all_gather(tensor, group=group, sync_grads=sync_grads)

    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: str = "mean") -> Any:
        return self._trainer.lite.all_reduce(tensor, group=group, reduce_op=reduce_op)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plugin, name)

    def __repr__(self) -> str:
        return f"<trainer.strategy: {self.plugin!r}>"


class ParallelStrategy(Strategy):
    """``lightning.fabric.strategies.ParallelStrategy``: any core strategy plugin, for annotations."""

    _lightning_path = "lightning.fabric.strategies.ParallelStrategy"


class ClusterEnvironment(_PluginBase):
    """``lightning.fabric.plugins.environments.ClusterEnvironment``: any core environment plugin."""

    _kinds = ("environment",)
    _lightning_path = "lightning.fabric.plugins.environments.ClusterEnvironment"


class Precision(_PluginBase):
    """``lightning.fabric.plugins.Precision``: any core precision plugin, for annotations and ``isinstance``.

    Subclassing it is refused with the redirect: a precision is a class with ``@core.hookimpl`` methods for the
    precision hooks (``precision_convert_module``, ``precision_autocast``, ``precision_backward``, ...).
    """

    _kinds = ("precision",)
    _lightning_path = "lightning.fabric.plugins.Precision"
