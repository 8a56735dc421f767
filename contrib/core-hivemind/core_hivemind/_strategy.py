"""The ``hivemind`` strategy: collaborative training of peers that find each other through a DHT.

There is no process group. Every peer is one process (``max_processes = 1``: to core it is a run of world
size 1); peers join and leave at any time, find each other through hivemind's DHT, and the optimizer becomes
a ``hivemind.Optimizer`` that accumulates gradients across peers until ``target_batch_size`` samples were
processed, then averages and steps (one hivemind "epoch"). ``Lite.all_reduce`` / ``all_gather`` /
``broadcast`` / ``barrier`` act on this peer alone, as in Lightning's ``HivemindStrategy``.

Network: the DHT listens on ``host_maddrs`` (default ``/ip4/127.0.0.1/tcp/0``, loopback only) and
NAT port mapping (UPnP), AutoNAT and relays are off unless asked for. The first peer prints the line
``PL_INITIAL_PEERS=<its multiaddrs>``; the others get it in that variable (or ``initial_peers=``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final

import torch

from core import ConfigurationError, Supports, hookimpl
from core.toolkit import is_whole
from core.toolkit.strategies import SingleDeviceStrategy

from . import _engine

INITIAL_PEERS_ENV: Final = "PL_INITIAL_PEERS"
"""Lightning's variable for the multiaddrs of running peers, so Lightning users' launch lines keep working."""

LOOPBACK_MADDRS: Final = ("/ip4/127.0.0.1/tcp/0",)
"""Where the DHT listens by default: this machine only, a free port."""


_DELAYED: Final = ("delay_optimizer_step", "delay_state_averaging", "offload_optimizer")


def peers_from_environment(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The comma-separated multiaddrs in ``PL_INITIAL_PEERS``, or None when it is unset or empty."""
    value = (os.environ if environ is None else environ).get(INITIAL_PEERS_ENV, "")
    peers = [peer.strip() for peer in value.split(",") if peer.strip()]
    return peers or None


def _positive(owner: str, name: str, value: object, whole: bool = False) -> None:
    number = is_whole(value) if whole else isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not (isinstance(value, (int, float)) and value > 0):
        raise ConfigurationError(f"{owner}({name}={value!r}) must be a number > 0.")


class HivemindStrategy(SingleDeviceStrategy):
    """Collaborative training through hivemind (Lightning's ``strategy="hivemind"``).

    :param target_batch_size: Samples all peers together process before one optimizer step (an epoch); required.
    :param run_id: Prefix of every DHT key: peers with the same ``run_id`` train together.
    :param batch_size: Samples this peer processes per ``optimizer.step()``; required (no hook of core sees a
        batch before the optimizer is set up, so it cannot be inferred from the first batch as in Lightning).
    :param delay_state_averaging: Average parameters in the background (hivemind's default); ``False``
        (this default, as Lightning's) averages them inside ``step``, so peers that took part hold the same weights.
    :param delay_optimizer_step: Run the optimizer in the background; needs ``offload_optimizer``.
    :param delay_grad_averaging: Average gradients in the background; needs the two above.
    :param offload_optimizer: Keep the optimizer's state in host memory.
    :param reuse_grad_buffers: Accumulate in ``param.grad``; then never call ``optimizer.zero_grad()``.
    :param scheduler_fn: ``callable(optimizer) -> scheduler`` (the optimizer is re-created by hivemind when one
        of ``delay_*``/``offload_optimizer`` is on, so a scheduler made beforehand would step the wrong one).
    :param matchmaking_time: Seconds to wait for peers when forming an averaging group.
    :param averaging_timeout: Seconds after which an averaging round is cancelled (local gradients are used).
    :param verbose: hivemind's progress messages.
    :param averager_opts: Keyword arguments for hivemind's gradient and state averagers.
    :param host_maddrs: Multiaddrs the DHT listens on; default loopback only (pass
        ``["/ip4/0.0.0.0/tcp/0"]`` and usually ``announce_maddrs`` to train across machines).
    :param initial_peers: Multiaddrs of running peers (a list or a comma-separated string); default
        ``PL_INITIAL_PEERS``, and none for the first peer.
    :param announce_maddrs: Multiaddrs other peers should dial (behind NAT / in containers).
    :param use_local_updates: hivemind's local-SGD mode: step locally on every batch, average the state.
    :param nat_port_map: Ask the router for a port mapping (UPnP/NAT-PMP). Off: it sends traffic off the host.
    :param auto_nat: Let other peers probe whether this one is reachable. Off by default.
    :param use_relay: Allow circuit relays through other peers. Off by default.
    :param optimizer_kwargs: Everything else goes to ``hivemind.Optimizer`` (``grad_compression``, ...).
    """

    name: ClassVar[str] = "hivemind"
    max_processes: ClassVar[int | None] = 1  # one process per peer; peers are not ranks: a world of size 1 each
    supports: ClassVar[Supports] = Supports(
        never={"accelerator": {"tpu", "mps"}, "checkpoint_io": {"distributed"}},
        hint="hivemind peers run on CPUs or one CUDA GPU each and every peer holds the whole model: use the "
        "'torch' or 'async' checkpoint_io.",
    )

    def __init__(
        self,
        target_batch_size: int | None = None,
        run_id: str = "lightning_run",
        batch_size: int | None = None,
        delay_state_averaging: bool = False,
        delay_optimizer_step: bool | None = None,
        delay_grad_averaging: bool = False,
        offload_optimizer: bool | None = None,
        reuse_grad_buffers: bool = False,
        scheduler_fn: Callable[[Any], Any] | None = None,
        matchmaking_time: float = 5.0,
        averaging_timeout: float = 30.0,
        verbose: bool = False,
        averager_opts: dict[str, Any] | None = None,
        host_maddrs: Sequence[str] | None = None,
        initial_peers: str | Sequence[str] | None = None,
        announce_maddrs: Sequence[str] | None = None,
        use_local_updates: bool = False,
        nat_port_map: bool = False,
        auto_nat: bool = False,
        use_relay: bool = False,
        **optimizer_kwargs: Any,
    ) -> None:
        owner = "HivemindStrategy"
        # Required, but checked when the run starts: `python -m core.plugins --check` builds HivemindStrategy().
        if target_batch_size is not None:
            _positive(owner, "target_batch_size", target_batch_size, whole=True)
        if batch_size is not None:
            _positive(owner, "batch_size", batch_size, whole=True)
        _positive(owner, "matchmaking_time", matchmaking_time)
        _positive(owner, "averaging_timeout", averaging_timeout)
        if not isinstance(run_id, str) or not run_id:
            raise ConfigurationError(f"{owner}(run_id={run_id!r}) must be a non-empty string shared by the peers.")
        if delay_grad_averaging and not delay_optimizer_step:
            raise ConfigurationError(
                f"{owner}(delay_grad_averaging=True) needs delay_optimizer_step=True (and offload_optimizer=True), "
                "as in hivemind.Optimizer."
            )
        if isinstance(initial_peers, str):
            initial_peers = [peer.strip() for peer in initial_peers.split(",") if peer.strip()]
        self.target_batch_size = target_batch_size
        self.run_id = run_id
        self.batch_size = batch_size
        self.scheduler_fn = scheduler_fn
        self.host_maddrs = list(host_maddrs) if host_maddrs is not None else list(LOOPBACK_MADDRS)
        self.initial_peers = list(initial_peers) if initial_peers else peers_from_environment()
        self.dht_options: dict[str, Any] = {
            "nat_port_map": nat_port_map, "auto_nat": auto_nat, "use_relay": use_relay,
        }
        if announce_maddrs is not None:
            self.dht_options["announce_maddrs"] = list(announce_maddrs)
        self.optimizer_options: dict[str, Any] = {
            "delay_state_averaging": delay_state_averaging, "delay_optimizer_step": delay_optimizer_step,
            "delay_grad_averaging": delay_grad_averaging, "offload_optimizer": offload_optimizer,
            "reuse_grad_buffers": reuse_grad_buffers, "matchmaking_time": matchmaking_time,
            "averaging_timeout": averaging_timeout, "verbose": verbose, "averager_opts": averager_opts,
            "use_local_updates": use_local_updates, **optimizer_kwargs,
        }
        super().__init__()
        self._dht: Any = None
        self._optimizers: list[Any] = []

    def unavailable_reason(self) -> str | None:
        """Why hivemind cannot run here (shown by ``python -m core.plugins --check``)."""
        return _engine.unavailable_reason()

    @property
    def dht(self) -> Any:
        """This peer's ``hivemind.DHT`` (started when Lite sets the run up)."""
        if self._dht is None:
            raise ConfigurationError("strategy='hivemind' is used before Lite set up its run (launch first).")
        return self._dht

    def visible_maddrs(self) -> list[str]:
        """The multiaddrs other peers pass in ``PL_INITIAL_PEERS`` to join this one."""
        return [str(address) for address in self.dht.get_visible_maddrs()]

    def _check_batch_sizes(self) -> None:
        if self.target_batch_size is None or self.batch_size is None:
            raise ConfigurationError(
                f"HivemindStrategy(target_batch_size={self.target_batch_size!r}, batch_size={self.batch_size!r}): "
                "hivemind steps once the peers together processed target_batch_size samples, counting batch_size "
                "samples per optimizer.step() of this peer; both are required (no hook of core sees a batch before "
                "the optimizer is set up, so batch_size cannot be inferred as Lightning does). Pass "
                "strategy=HivemindStrategy(target_batch_size=<samples per collaborative step>, "
                "batch_size=<this peer's batch>)."
            )

    @hookimpl
    def strategy_setup_environment(self) -> None:
        self._check_batch_sizes()
        _engine.load()
        from ._dht import RobustDHT  # imports hivemind: only once it is known to be importable

        self._dht = RobustDHT(
            start=True, initial_peers=self.initial_peers, host_maddrs=self.host_maddrs, **self.dht_options
        )
        addresses = ",".join(self.visible_maddrs())
        # The line a user copies to start the next peer (Lightning logs the same hint).
        print(f"{INITIAL_PEERS_ENV}={addresses}", file=sys.stderr, flush=True)

    @hookimpl
    def strategy_teardown(self) -> None:
        for optimizer in self._optimizers:
            if optimizer.is_alive():  # hivemind's __del__ may have shut it down with Lite's wrapper already
                optimizer.shutdown()
        self._optimizers.clear()
        if self._dht is not None:
            self._dht.shutdown()
        self._dht = None

    # ---------------------------------------------------------------------------------- model, optimizer

    @hookimpl
    def strategy_setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        self._check_batch_sizes()
        hivemind = _engine.load()
        recreated = any(self.optimizer_options.get(name) for name in _DELAYED)
        wrapped = hivemind.Optimizer(
            dht=self.dht,
            # Every optimizer is its own collaboration; peers set theirs up in the same order, so names match.
            run_id=self.run_id if not self._optimizers else f"{self.run_id}_{len(self._optimizers)}",
            target_batch_size=self.target_batch_size,
            batch_size_per_step=self.batch_size,
            # hivemind builds its own optimizer (in host memory / a background thread) from a factory.
            optimizer=type(optimizer) if recreated else optimizer,
            params=optimizer.param_groups if recreated else None,
            scheduler=self.scheduler_fn,
            **self.optimizer_options,
        )
        wrapped.load_state_from_peers()  # a peer joining a running collaboration starts from its state
        self._optimizers.append(wrapped)
        optimizer_of_peer: torch.optim.Optimizer = wrapped
        return optimizer_of_peer

    # Every peer is a world of size 1 of its own (peers come and go, and each reads its own data): the launch, the
    # module's set-up, the collectives, the barrier, the sampler and the checkpoints are SingleDeviceStrategy's.
    # Gradients are averaged by hivemind.Optimizer when the target is reached, never during backward.

    @hookimpl
    def strategy_broadcast(self, obj: Any, src: int) -> Any:
        if src != 0:
            raise ConfigurationError(
                f"broadcast(src={src}): under strategy='hivemind' every peer is rank 0 of its own world of size 1."
            )
        return obj
