"""The active set: the plugin objects of one run, registered in a per-run ``PluginManager``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

from core._records import ClusterInfo, ResolvedConfig

if TYPE_CHECKING:
    import torch


def _selected(kind: str) -> property:
    """A read-only attribute for the run's plugin object of one kind (``active.strategy``)."""
    return property(lambda active: active.plugins[kind], doc=f"The run's {kind} plugin object.")


class ActiveSet:
    """One accelerator, strategy, precision, environment and checkpoint_io object, plus extensions.

    ``hook`` calls any hook by keyword (``active.hook.strategy_barrier(name="x")``); :meth:`bind` gives
    the fastest callable for a hook that is called every step.
    """

    __slots__ = ("_cluster", "config", "device", "extensions", "hook", "plugins", "pm")

    def __init__(
        self,
        config: ResolvedConfig,
        pm: pluggy.PluginManager,
        plugins: Mapping[str, object],
        extensions: Mapping[str, object],
    ) -> None:
        self.config = config
        self.pm = pm
        self.hook = pm.hook
        self.plugins = dict(plugins)
        self.extensions = dict(extensions)
        self.device: torch.device | None = None
        self._cluster: ClusterInfo | None = None

    accelerator = _selected("accelerator")
    strategy = _selected("strategy")
    precision = _selected("precision")
    environment = _selected("environment")
    checkpoint_io = _selected("checkpoint_io")

    @property
    def cluster(self) -> ClusterInfo:
        """This process's ranks and rendezvous address, asked of the environment once per process."""
        if self._cluster is None:
            self._cluster = self.refresh_cluster()
        return self._cluster

    def refresh_cluster(self) -> ClusterInfo:
        """Ask the environment again (after a launcher changed this process's variables)."""
        info = self.hook.environment_cluster_info(
            devices_per_node=self.config.devices_per_node, num_nodes=self.config.num_nodes
        )
        self._cluster = info
        return info

    def bind(self, name: str, default: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """The callable for hook ``name``, to be called with keyword arguments.

        With exactly one implementation taking every argument and no wrapper, that implementation is
        returned directly, skipping pluggy's dispatch (about 1.5 us per call); with none, ``default``.
        """
        caller = getattr(self.hook, name)
        impls = caller.get_hookimpls()
        if not impls and default is not None:
            return default
        if len(impls) == 1:
            impl = impls[0]
            spec = caller.spec
            plain = not (impl.hookwrapper or impl.wrapper)
            if plain and spec is not None and tuple(impl.argnames) == tuple(spec.argnames):
                return impl.function
        return caller

    def __repr__(self) -> str:
        return f"<ActiveSet\n{self.config.summary()}>"
