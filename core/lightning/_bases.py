"""Lightning's plugin base classes as annotation-only names: ``Accelerator``, ``Strategy`` and friends.

A program built on Fabric often imports ``Accelerator`` or ``Strategy`` only to annotate a parameter; that
works here, and ``isinstance(obj, Strategy)`` is true for any core plugin object of that kind (the project's
plugin protocol: an object whose ``kind`` names it). Subclassing one raises :class:`UnsupportedLightningName`,
since core's plugins are classes with ``@core.hookimpl`` methods, not subclasses of a base class.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from core.lightning._names import UnsupportedLightningName

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
    """``lightning.fabric.strategies.Strategy``: any core strategy plugin, for annotations."""

    _kinds = ("strategy",)
    _lightning_path = "lightning.fabric.strategies.Strategy"


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
