"""State of strategies whose parameters become ``DTensor`` s (fsdp, model_parallel): one implementation for both.

**After the run the module stays sharded** (as in Lightning): its parameters stay ``DTensor`` s on the run's device
mesh, every rank holding its shards only, so ``Trainer.test`` after ``Trainer.fit``, inference and reading the
shards work on it as it is. The mesh needs its process groups: :data:`SHARDED_MODULES` keeps the default group past
the teardown while such a module is alive, the next run in the same processes adopts it, and it is destroyed at
exit (or by a run of another layout). Making the model whole is an explicit call, :func:`full_state_dict`, which
gathers one tensor at a time.

Saving a *full* checkpoint gathers every ``DTensor`` into its whole tensor on the CPU (a collective: every rank,
the same order). Loading goes the other way without communication: every rank holds the whole saved tensor (a
full file, or a sharded checkpoint of any layout read whole) and keeps its own part, placed as the parameter is.
Load hooks on the set-up module and optimizers do that, so ``Lite.load`` restores through the ordinary
``load_state_dict`` calls, whatever layout wrote the checkpoint: that is the resharding.

``torch.distributed.tensor`` is imported on first use: importing the toolkit's strategies stays light.
"""

from __future__ import annotations

import atexit
import gc
import weakref
from collections.abc import Callable, Iterable, Mapping
from itertools import chain
from typing import TYPE_CHECKING, Any, Final, TypeGuard

import torch
import torch.distributed as dist

from core._errors import ConfigurationError
from core.toolkit._engines import quieted
from core.toolkit.tensors import apply_to_tensors

from ._settle import settle

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor

# full_tensor() of a parameter sharded on two mesh dimensions logs that it gathers twice: expected here.
_REDISTRIBUTE_LOGGER = "torch.distributed.tensor._redistribute"


def _is_dtensor(value: Any) -> TypeGuard[DTensor]:
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def whole_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole of ``tensor`` on the CPU: gathered if it is a ``DTensor`` (a collective), else itself.

    Shards offloaded to the CPU while the mesh communicates on an accelerator (fsdp's ``cpu_offload`` over nccl)
    are gathered on the mesh's device.
    """
    if not _is_dtensor(tensor):
        return tensor
    from torch.distributed.tensor import DTensor

    local = tensor.to_local()
    device_type = tensor.device_mesh.device_type
    if local.device.type != device_type:
        tensor = DTensor.from_local(local.to(device_type), tensor.device_mesh, tensor.placements,
                                    shape=tensor.shape, stride=tensor.stride())
    with quieted(_REDISTRIBUTE_LOGGER):
        return tensor.full_tensor().cpu()


def full_state_dict(module: torch.nn.Module, *, rank_zero_only: bool = True) -> dict[str, torch.Tensor]:
    """``module``'s state dict with whole tensors on the CPU, gathered one tensor at a time. Collective.

    The explicit way to make a sharded model whole (after a run it stays sharded): call it on every rank, inside a
    run or after one (the process group is kept while the module lives). Each ``DTensor`` is gathered and moved
    to the CPU before the next one, so a rank's memory grows by one gathered tensor at a time (two, momentarily,
    for a tensor sharded on a dimension other than the first, which torch gathers along the first then reorders)
    beyond what it keeps.

    :param rank_zero_only: Only global rank 0 keeps the gathered tensors (the others return an empty dict and never
        hold more than one); ``False``: every rank gets the whole state (the whole model in each rank's memory).
    :returns: By state-dict key, the whole tensor, detached, on the CPU (plain tensors are copied to the CPU too).
    """
    keep = not rank_zero_only or not dist.is_initialized() or dist.get_rank() == 0
    state: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            whole = whole_tensor(tensor).detach()  # every rank gathers, in the same order
            if keep:
                state[name] = whole.cpu()
            del whole
    return state


def gather_full_state(state: Any) -> Any:
    """``state`` with every ``DTensor`` replaced by its whole tensor on the CPU. Collective: call on every rank."""
    return apply_to_tensors(state, whole_tensor)


def _placed_like(value: torch.Tensor, mesh: Any, placements: Any, device: torch.device, dtype: torch.dtype) -> Any:
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(value.to(device, dtype), mesh, placements, src_data_rank=None)


def placed_like(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``value`` as ``like`` holds it: a whole tensor given for a ``DTensor`` becomes this rank's slice of it (on
    ``like``'s device, in its dtype); anything else is returned as it is. No communication: every rank holds
    ``value`` whole (as after loading a gathered checkpoint)."""
    if _is_dtensor(like) and not _is_dtensor(value):
        placed: torch.Tensor = _placed_like(value, like.device_mesh, like.placements, like.device, like.dtype)
        return placed
    return value


def _is_whole_for(value: Any, shape: torch.Size) -> TypeGuard[torch.Tensor]:
    return isinstance(value, torch.Tensor) and not _is_dtensor(value) and value.shape == shape


def accept_whole_tensors(module: torch.nn.Module) -> None:
    """Let ``load_state_dict`` take whole tensors for ``DTensor`` parameters and buffers, on any submodule.

    Each submodule holding ``DTensor`` s of its own gets a hook for those, so the slicing happens whichever module
    ``load_state_dict`` is called on (the Trainer loads into the user's module, inside the strategy's root). The
    hooks hold the layouts, not the tensors.
    """
    for submodule in module.modules():
        own = chain(submodule.named_parameters(recurse=False), submodule.named_buffers(recurse=False))
        layouts = {
            name: (tensor.device_mesh, tensor.placements, tensor.shape, tensor.device, tensor.dtype)
            for name, tensor in own
            if _is_dtensor(tensor)
        }
        if layouts:
            submodule.register_load_state_dict_pre_hook(_whole_to_placed(layouts))


def _whole_to_placed(layouts: dict[str, tuple[Any, Any, torch.Size, torch.device, torch.dtype]]) -> Callable[..., None]:
    def place_whole_tensors(owner: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for name, (mesh, placements, shape, device, dtype) in layouts.items():
            value = state_dict.get(prefix + name)
            if _is_whole_for(value, shape):
                state_dict[prefix + name] = _placed_like(value, mesh, placements, device, dtype)

    return place_whole_tensors


def accept_whole_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Let ``optimizer.load_state_dict`` take whole tensors for the state of ``DTensor`` parameters."""

    def place_whole_tensors(owner: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
        parameters = [parameter for group in owner.param_groups for parameter in group["params"]]
        saved_ids = [saved for group in state_dict.get("param_groups", []) for saved in group["params"]]
        saved_state = state_dict.get("state", {})
        for saved, parameter in zip(saved_ids, parameters, strict=False):
            entry = saved_state.get(saved)
            if not _is_dtensor(parameter) or not isinstance(entry, dict):
                continue
            for key, value in list(entry.items()):
                if _is_whole_for(value, parameter.shape):
                    entry[key] = placed_like(value, parameter)
        return state_dict

    optimizer.register_load_state_dict_pre_hook(place_whole_tensors)


class ReplacedParameters:
    """Which parameter replaced which when a strategy set a module up (``fully_shard``, ``parallelize_module``).

    An optimizer made over the module before set-up holds the old parameters: :meth:`point_optimizer` points it
    at their replacements. At teardown :meth:`originals` gives each replacement's original, still alive, so that
    a strategy making the module whole again puts the trained values where references made before set-up see
    them (as under ``ddp``).
    """

    def __init__(self) -> None:
        # id(original parameter) -> (a weak reference to it, the parameter that replaced it)
        self._entries: dict[int, tuple[weakref.ref[torch.nn.Parameter], torch.nn.Parameter]] = {}

    def record(self, before: Mapping[str, torch.nn.Parameter], module: torch.nn.Module) -> None:
        """Compare ``module``'s parameters now with ``before`` (``dict(module.named_parameters())`` then)."""
        for name, now in module.named_parameters():
            original = before.get(name)
            if original is not None and original is not now:
                self._entries[id(original)] = (weakref.ref(original), now)

    def replacement(self, parameter: torch.nn.Parameter) -> torch.nn.Parameter:
        """What replaced ``parameter`` at set-up, or ``parameter`` itself."""
        entry = self._entries.get(id(parameter))
        if entry is not None and entry[0]() is parameter:
            return entry[1]
        return parameter

    def point_optimizer(self, optimizer: torch.optim.Optimizer, alias: str) -> None:
        """Point an optimizer made before set-up at the replacements; refused once it holds state for parameters
        that were replaced. One already pointing at the set-up parameters (set up again after its run, as
        ``trainer.save_checkpoint`` after ``fit`` does) is left as it is, state included."""
        replaced = [[self.replacement(parameter) for parameter in group["params"]] for group in optimizer.param_groups]
        if all(new is old for group, news in zip(optimizer.param_groups, replaced, strict=True)
               for new, old in zip(news, group["params"], strict=True)):
            return
        if optimizer.state:
            raise ConfigurationError(
                f"The optimizer already has state (it took a step before setup); with {alias!r} its state must be "
                f"made for the set-up parameters: set up the module and the optimizer before the first step."
            )
        for group, news in zip(optimizer.param_groups, replaced, strict=True):
            group["params"] = news

    def originals(self) -> dict[int, torch.nn.Parameter]:
        """By ``id`` of each replacement, the original parameter, for those still alive."""
        found = {id(now): original() for original, now in self._entries.values()}
        return {key: original for key, original in found.items() if original is not None}

    def clear(self) -> None:
        self._entries.clear()


def holds_dtensors(module: torch.nn.Module) -> bool:
    """Whether any parameter of ``module`` is a ``DTensor`` (it was sharded or parallelized)."""
    return any(_is_dtensor(parameter) for parameter in module.parameters())



class ShardedModules:
    """The modules left sharded by their runs, and the default process group their device meshes need.

    A module sharded or parallelized by a run stays so after it (see the module's docstring). Its ``DTensor`` s
    keep the run's device mesh, and the mesh the run's process groups, so the group must outlive the teardown:
    :meth:`ParallelStrategy.strategy_teardown <core.toolkit.strategies.ParallelStrategy>` keeps it while one of
    these modules is alive (:meth:`needs_group`), and the next run in the same processes adopts it (no new
    rendezvous). :meth:`end_group` destroys it: when ``launch`` returns and none of them is alive any more (the
    script kept none), when a run needs a group of another layout, and at exit, from an ``atexit`` handler, while
    the interpreter is fully alive. A group freed during interpreter shutdown instead
    (held by a module in a global) can abort the process from gloo's threads ("terminate called without an active
    exception"), so the handler also makes the modules' meshes forget their groups and collects them.

    A module whose group was destroyed this way is *orphaned*: it still holds its shards (``to_local()`` reads
    them) but cannot compute or be set up again; :meth:`refuse_orphan` says so at set-up.
    """

    def __init__(self) -> None:
        self._modules: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        self._orphans: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        self.holds_group = False
        """Whether the default process group was kept past a teardown for these modules (and not destroyed since)."""
        self._ends_at_exit = False

    def add(self, modules: Iterable[torch.nn.Module]) -> None:
        """Remember the modules (of a run ending now) that hold ``DTensor`` s; weakly: a module dropped is forgotten."""
        for module in modules:
            if holds_dtensors(module):
                self._modules.add(module)
                self._orphans.discard(module)

    def adopt(self, module: torch.nn.Module) -> torch.nn.Module | None:
        """The module an earlier run set up and left sharded that ``module`` stands for, or ``None``.

        ``module`` itself; or an earlier set-up module of its class with exactly its parameters (the same objects
        under the same names), which from now on runs ``module``'s forward: the Trainer wraps the user's module in a
        new ``StepModule`` for every run, and tells that one which step to run, while the sharding's hooks (FSDP's
        gathers) sit on the wrapper the first run set up. A strategy's ``setup_module`` returns it as it is.
        """
        if module in self._modules:
            return module
        parameters = [(name, id(parameter)) for name, parameter in module.named_parameters()]
        if not parameters or not holds_dtensors(module):
            return None
        for earlier in self._modules:
            if isinstance(earlier, type(module)) and parameters == [
                (name, id(parameter)) for name, parameter in earlier.named_parameters()
            ]:
                # The earlier module's hooks around this module's forward (an instance attribute wins over the class's).
                object.__setattr__(earlier, "forward", module.forward)
                return earlier
        return None

    def needs_group(self) -> bool:
        """Whether a module left sharded is still alive (and sharded): then the default group must stay."""
        return any(holds_dtensors(module) for module in self._modules)

    def hold_group(self) -> None:
        """The teardown keeps the default group for the modules; it is ended at exit at the latest."""
        self.holds_group = True
        if not self._ends_at_exit:
            self._ends_at_exit = True
            atexit.register(self.end_group)

    def release_group(self) -> None:
        """A teardown destroys the (adopted) default group itself: no module needs it any more."""
        self.holds_group = False

    def end_group_if_unused(self) -> None:
        """:meth:`end_group` if no module left sharded is alive any more (when ``launch`` returns)."""
        if self.holds_group:
            gc.collect()  # FSDP's state holds its module in reference cycles
            if not self.needs_group():
                self.end_group()

    def end_group(self) -> None:
        """Destroy the kept default group now and cut the modules from it (they become orphans)."""
        if not self.holds_group:
            return
        self.holds_group = False
        if dist.is_initialized():
            # Collectives since the teardown's settled barrier (a ``full_tensor()`` of the user's after fit) may
            # still be freed on gloo's workers: let them finish while the interpreter is alive (._settle).
            settle()
            dist.destroy_process_group()
        for module in list(self._modules):
            for mesh in _meshes_of(module):
                _forget_groups(mesh)
            self._orphans.add(module)
        self._modules = weakref.WeakSet()
        gc.collect()  # the groups sit in reference cycles (FSDP's state): freed now, not at interpreter shutdown

    def refuse_orphan(self, module: torch.nn.Module, alias: str) -> None:
        """A :class:`core.ConfigurationError` if ``module``'s process group was destroyed after its run."""
        if module in self._orphans:
            raise ConfigurationError(
                f"strategy={alias!r} cannot set up this {type(module).__name__}: an earlier run left it sharded, and "
                f"its process group was destroyed when a run of another layout (world size, rank or backend) "
                f"started. Build the model again and load a checkpoint into it, or gather it with "
                f"core.toolkit.strategies.full_state_dict before starting a run of another layout."
            )


SHARDED_MODULES: Final = ShardedModules()
"""This process's record of the modules left sharded by their runs (process-wide, like the default group)."""


def _meshes_of(module: torch.nn.Module) -> list[DeviceMesh]:
    meshes: dict[int, DeviceMesh] = {}
    for tensor in chain(module.parameters(), module.buffers()):
        if _is_dtensor(tensor):
            mesh = tensor.device_mesh
            for each in (mesh, getattr(mesh, "_root_mesh", None)):
                if each is not None:
                    meshes[id(each)] = each
    return list(meshes.values())


def _forget_groups(mesh: DeviceMesh) -> None:
    registry = getattr(mesh, "_pg_registry", None)
    if isinstance(registry, dict):
        registry.clear()
