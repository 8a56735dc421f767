"""``RayLauncher``: the ``ray`` extension, which runs the ranks of any Lite or Trainer job as Ray actors.

In the launching process (the Ray driver) it answers ``strategy_launch`` before the strategy does: it reserves
one placement-group bundle per node (``devices`` actors' worth of CPUs and GPUs each), starts one actor per
rank, takes the rendezvous address from global rank 0's actor, runs the launched function in every actor and
returns global rank 0's result. The first rank that fails ends the job: the other actors are killed and the
caller gets :class:`RayRankFailedError` naming the rank, its node and process, and its error. Inside an actor
the ``ray_worker`` environment gives the strategy its ranks, so ``ddp``, ``fsdp`` and the others run there
exactly as under torchrun.

Two hooks are plain, first-tried implementations rather than wrappers, because the contract has no launcher
hook outside the strategy (see docs/ecosystem.md, "What Ray shows about the contract"):

- ``strategy_launch`` in the driver replaces the strategy's own launch, and a wrapper unboxes its result
  (a first-result hook cannot say "handled, and the result is None");
- ``strategy_teardown`` in an actor whose function is raising skips the strategy's teardown, which would wait
  in a barrier for ranks that are about to be killed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, ClassVar, Final

import attrs

from core import ActiveSet, ConfigurationError, CoreError, hookimpl, traits_of
from core.toolkit import ERROR_FILE_VARIABLE, LISTEN_FD_VARIABLE, PARENT_PID_VARIABLE

from . import _engine, _worker
from ._environment import RayRank, in_ray_rank

PLACEMENTS: Final = ("STRICT_SPREAD", "SPREAD", "PACK", "STRICT_PACK")
"""How the bundles of a multi-node job are spread over Ray nodes (Ray's placement-group strategies)."""

# Variables of the launching process that describe that process alone; every other CORE_* variable (the seed,
# CORE_STRICT_PLUGINS, ...) is forwarded to the actors, which resolve the same settings again.
_PROCESS_VARIABLES: Final = frozenset({ERROR_FILE_VARIABLE, PARENT_PID_VARIABLE, LISTEN_FD_VARIABLE, "CORE_DDP_JOB"})

# Fragments of the messages of a rank that only saw another rank vanish (a consequence, not the cause).
_PEER_LOST: Final = ("connection closed by peer", "connection reset by peer", "broken pipe", "peerlosterror",
                     "another rank exited or crashed", "connection refused")

# After the first failure, how long to wait for the others before choosing which one to report.
FAILURE_GRACE: Final = 0.5


class RayRankFailedError(CoreError):
    """A rank of a ``plugins=["ray"]`` job failed (raised, or its actor died); the other actors were killed."""

    def __init__(self, message: str, global_rank: int, node_ip: str, pid: int) -> None:
        super().__init__(message)
        self.global_rank = global_rank
        self.node_ip = node_ip
        self.pid = pid


@attrs.frozen
class _Launched:
    """Global rank 0's result, boxed so that None is an answer to the first-result hook too."""

    value: Any


@attrs.frozen
class _Placed:
    """One actor of the job and where Ray put it."""

    handle: Any
    global_rank: int
    node_rank: int
    node_ip: str
    pid: int
    gpu_ids: tuple[str, ...]


def _positive(name: str, value: object, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not allow_zero):
        expected = "a number >= 0" if allow_zero else "a number > 0"
        raise ConfigurationError(f"RayLauncher({name}={value!r}): expected {expected}.")
    return float(value)


def _forwarded_variables() -> dict[str, str]:
    forwarded = {
        name: value for name, value in os.environ.items()
        if name.startswith("CORE_") and name not in _PROCESS_VARIABLES
    }
    if os.environ.get("PYTHONPATH"):
        forwarded["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return forwarded


def _is_peer_lost(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in _PEER_LOST)


class RayLauncher:
    """Run every rank of a run as a Ray actor: ``Lite(strategy="ddp", devices=2, plugins=["ray"])``.

    ``devices`` actors per node, ``num_nodes`` nodes, each actor reserving ``num_cpus_per_worker`` CPUs and
    ``num_gpus_per_worker`` GPUs. Works with any strategy whose processes the environment may create (every
    DDP-family strategy, ``fsdp``, ``deepspeed``); a strategy that drives several devices from one process
    (``dp``) gets one actor per node with all of them.

    :param address: The Ray cluster to use when this process has not called ``ray.init`` itself (``None``:
        Ray's own default, ``RAY_ADDRESS`` or a cluster started on this machine).
    :param num_cpus_per_worker: CPUs Ray reserves for each rank.
    :param num_gpus_per_worker: GPUs Ray reserves for each rank; ``None``: 1 with ``accelerator="cuda"``, else 0.
    :param resources_per_worker: Other Ray resources each rank needs (``{"memory": 4e9}``, custom resources).
    :param runtime_env: Ray's ``runtime_env`` for the actors; its ``env_vars`` are merged over the forwarded
        ``CORE_*`` variables and ``PYTHONPATH`` of this process.
    :param node_placement: How the bundles of a multi-node run are placed: ``"STRICT_SPREAD"`` (one Ray node per
        node rank, the default), ``"SPREAD"``, ``"PACK"`` (several node ranks may share a Ray node, e.g. to try a
        2-node layout on one machine) or ``"STRICT_PACK"``.
    :param placement_timeout: Seconds to wait for the cluster to grant the resources before giving up.
    :param init_kwargs: More keyword arguments for ``ray.init`` when this launcher connects.
    """

    kind: ClassVar[str] = "extension"
    name: ClassVar[str] = "ray"
    contract_version: ClassVar[int] = 1

    def __init__(
        self,
        address: str | None = None,
        num_cpus_per_worker: float = 1.0,
        num_gpus_per_worker: float | None = None,
        resources_per_worker: Mapping[str, float] | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        node_placement: str = "STRICT_SPREAD",
        placement_timeout: float = 120.0,
        init_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if node_placement not in PLACEMENTS:
            raise ConfigurationError(
                f"RayLauncher(node_placement={node_placement!r}) is not a Ray placement strategy; expected one of "
                f"{list(PLACEMENTS)}."
            )
        self.address = address
        self.num_cpus_per_worker = _positive("num_cpus_per_worker", num_cpus_per_worker, allow_zero=True)
        self.num_gpus_per_worker = (
            None if num_gpus_per_worker is None else _positive("num_gpus_per_worker", num_gpus_per_worker, True)
        )
        self.resources_per_worker = {
            str(key): _positive(f"resources_per_worker[{key!r}]", value, allow_zero=True)
            for key, value in (resources_per_worker or {}).items()
        }
        self.runtime_env = dict(runtime_env or {})
        self.node_placement = node_placement
        self.placement_timeout = _positive("placement_timeout", placement_timeout)
        self.init_kwargs = dict(init_kwargs or {})
        self._active: ActiveSet | None = None

    def __getstate__(self) -> dict[str, Any]:
        # The options travel to the actors (which resolve the same settings); the driver's run stays here.
        return {key: value for key, value in self.__dict__.items() if key != "_active"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._active = None

    def __repr__(self) -> str:
        return (
            f"RayLauncher(address={self.address!r}, num_cpus_per_worker={self.num_cpus_per_worker:g}, "
            f"num_gpus_per_worker={self.num_gpus_per_worker!r}, node_placement={self.node_placement!r})"
        )

    def unavailable_reason(self) -> str | None:
        """Why Ray cannot be used here (shown by ``python -m core.plugins --check``)."""
        return _engine.unavailable_reason()

    @property
    def active(self) -> ActiveSet:
        if self._active is None:
            raise ConfigurationError("The extension 'ray' is used before it was resolved into a run.")
        return self._active

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        self._active = active

    # ---------------------------------------------------------------------------------------------- hooks

    @hookimpl(tryfirst=True)
    def strategy_launch(
        self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> _Launched | None:
        if in_ray_rank():  # a launch inside a rank: the strategy runs it there (the environment made the process)
            return None
        return _Launched(self.run_job(function, args, kwargs))

    @hookimpl(wrapper=True, tryfirst=True, specname="strategy_launch")
    def unbox_launch_result(self) -> Generator[None, Any, Any]:
        result = yield
        return result.value if isinstance(result, _Launched) else result

    @hookimpl(tryfirst=True)
    def strategy_teardown(self) -> bool | None:
        if in_ray_rank() and _worker.failing():
            # The launcher kills every actor of the job once it sees this rank's error; the strategy's teardown
            # would first wait in a barrier for ranks that are stuck in a collective, and never report it.
            return True
        return None

    # ------------------------------------------------------------------------------------------ the job

    def worker_resources(self) -> dict[str, float]:
        """What Ray reserves for each rank's actor."""
        gpus = self.num_gpus_per_worker
        if gpus is None:
            config = self.active.config
            per_node, _ = self._layout()
            # One GPU per rank; a strategy that drives every device from one process (dp) gets them all.
            gpus = float(config.devices_per_node // per_node) if config.accelerator == "cuda" else 0.0
        resources = {"CPU": self.num_cpus_per_worker, "GPU": gpus, **self.resources_per_worker}
        return {name: amount for name, amount in resources.items() if amount > 0}

    def run_job(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """Run ``function(*args, **kwargs)`` in one actor per rank; return global rank 0's result."""
        ray = _engine.load()
        connected_here = not ray.is_initialized()
        if connected_here:
            ray.init(address=self.address, **self.init_kwargs)
        placement = None
        placed: list[_Placed] = []
        try:
            placement = self._reserve(ray)
            placed = self._start_actors(ray, placement)
            return self._run(ray, placed, function, args, kwargs)
        finally:
            for actor in placed:
                _quietly(ray.kill, actor.handle, no_restart=True)
            if placement is not None:
                _quietly(ray.util.remove_placement_group, placement)
            if connected_here:
                _quietly(ray.shutdown)

    # -- placement

    def _layout(self) -> tuple[int, int]:
        """(actors per node, nodes)."""
        config = self.active.config
        one_process = not traits_of(self.active.strategy, "strategy").process_per_device
        return (1 if one_process else config.devices_per_node), config.num_nodes

    def _reserve(self, ray: Any) -> Any:
        per_node, nodes = self._layout()
        worker = self.worker_resources()
        bundle = {name: amount * per_node for name, amount in worker.items()}
        strategy = "STRICT_PACK" if nodes == 1 else self.node_placement
        placement = ray.util.placement_group([dict(bundle) for _ in range(nodes)], strategy=strategy)
        try:
            ray.get(placement.ready(), timeout=self.placement_timeout)
        except ray.exceptions.GetTimeoutError:
            _quietly(ray.util.remove_placement_group, placement)
            raise ConfigurationError(
                f"plugins=['ray'] asked the Ray cluster for {nodes} node(s) with {bundle} each ({strategy}) and got "
                f"no answer within {self.placement_timeout:g} s. The cluster has {ray.cluster_resources()} in all, "
                f"{ray.available_resources()} free. Lower devices / num_nodes / RayLauncher(num_cpus_per_worker=...), "
                f"add nodes, or pass RayLauncher(node_placement='PACK') to let node ranks share a Ray node."
            ) from None
        return placement

    def _start_actors(self, ray: Any, placement: Any) -> list[_Placed]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        per_node, nodes = self._layout()
        worker = self.worker_resources()
        runtime_env = dict(self.runtime_env)
        runtime_env["env_vars"] = {**_forwarded_variables(), **dict(runtime_env.get("env_vars") or {})}
        actor_class = ray.remote(_worker.RankWorker)
        handles = []
        for node_rank in range(nodes):
            for _ in range(per_node):
                handles.append((node_rank, actor_class.options(
                    num_cpus=worker.get("CPU", 0.0),
                    num_gpus=worker.get("GPU", 0.0),
                    resources={k: v for k, v in worker.items() if k not in ("CPU", "GPU")},
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=placement, placement_group_bundle_index=node_rank
                    ),
                    runtime_env=runtime_env,
                    max_restarts=0,
                    max_task_retries=0,
                ).remote()))
        descriptions = ray.get([handle.describe.remote() for _, handle in handles])
        return [
            _Placed(handle, global_rank, node_rank, found["node_ip"], int(found["pid"]), tuple(found["gpu_ids"]))
            for global_rank, ((node_rank, handle), found) in enumerate(zip(handles, descriptions, strict=True))
        ]

    # -- the run

    def _variables(self, placed: Sequence[_Placed], main_address: str, main_port: int) -> list[dict[str, str]]:
        per_node, nodes = self._layout()
        visible: dict[int, list[str]] = {}
        for actor in placed:
            visible.setdefault(actor.node_rank, []).extend(actor.gpu_ids)
        variables = []
        for actor in placed:
            rank = RayRank(
                global_rank=actor.global_rank,
                world_size=per_node * nodes,
                local_rank=actor.global_rank - actor.node_rank * per_node,
                local_world_size=per_node,
                node_rank=actor.node_rank,
                main_address=main_address,
                main_port=main_port,
            )
            mine = rank.variables()
            if visible[actor.node_rank]:
                # Ray gives each actor its own GPU; the ranks of a node index the node's devices by local rank.
                mine["CUDA_VISIBLE_DEVICES"] = ",".join(sorted(set(visible[actor.node_rank]), key=_device_order))
            variables.append(mine)
        return variables

    def _run(
        self, ray: Any, placed: Sequence[_Placed], function: Callable[..., Any], args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> Any:
        main = placed[0]
        main_port = int(ray.get(main.handle.open_rendezvous.remote(main.node_ip)))
        variables = self._variables(placed, main.node_ip, main_port)
        payload = ray.put((function, tuple(args), dict(kwargs)))
        working_directory = os.getcwd()
        running = {
            actor.handle.run.remote(mine, working_directory, payload): actor
            for actor, mine in zip(placed, variables, strict=True)
        }
        results: dict[int, Any] = {}
        pending = list(running)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            failures = self._collect(ray, done, running, results)
            if failures:
                # Give ranks that failed at the same moment a chance to be seen, then blame the right one.
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=FAILURE_GRACE)
                failures += self._collect(ray, more, running, results)
                self._fail(ray, placed, failures)
        return results.get(0)

    @staticmethod
    def _collect(
        ray: Any, done: Sequence[Any], running: Mapping[Any, _Placed], results: dict[int, Any]
    ) -> list[tuple[_Placed, BaseException]]:
        failures: list[tuple[_Placed, BaseException]] = []
        for reference in done:
            actor = running[reference]
            try:
                results[actor.global_rank] = ray.get(reference)
            except Exception as error:  # a RayTaskError (the rank raised) or an ActorDiedError (it died)
                failures.append((actor, error))
        return failures

    def _fail(self, ray: Any, placed: Sequence[_Placed], failures: Sequence[tuple[_Placed, BaseException]]) -> None:
        # A rank whose actor died, then one that raised something of its own, is the cause; one that only saw a
        # peer's connection drop is a consequence.
        def blame(item: tuple[_Placed, BaseException]) -> tuple[bool, bool, int]:
            actor, error = item
            return not isinstance(error, ray.exceptions.RayActorError), _is_peer_lost(str(error)), actor.global_rank

        primary, error = min(failures, key=blame)
        also = sorted(actor.global_rank for actor, _ in failures if actor is not primary)
        for actor in placed:
            _quietly(ray.kill, actor.handle, no_restart=True)
        stopped = [actor.global_rank for actor in placed if actor is not primary and actor.global_rank not in also]
        what = "its actor died" if isinstance(error, ray.exceptions.RayActorError) else "it raised"
        after = f"global rank(s) {also} failed right after it; " if also else ""
        raise RayRankFailedError(
            f"core-ray: global rank {primary.global_rank} of {len(placed)} (Ray actor pid {primary.pid} on "
            f"{primary.node_ip}) failed: {what}:\n{error}\ncore-ray: {after}stopped global rank(s) {stopped}.",
            primary.global_rank,
            primary.node_ip,
            primary.pid,
        ) from error


def _device_order(device: str) -> tuple[int, str]:
    return (int(device), device) if device.isdigit() else (1 << 30, device)


def _quietly(call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Clean-up that must not hide the error being raised (an actor that is already gone, a closed session)."""
    with contextlib.suppress(Exception):
        call(*args, **kwargs)
