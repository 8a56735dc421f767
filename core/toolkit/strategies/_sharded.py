"""``ShardedStrategy``: what fsdp and model_parallel (and an outside sharded strategy) have in common.

A strategy whose parameters become ``DTensor`` s at set-up (``fully_shard``, ``parallelize_module``) needs the same
things around its own sharding call: a module created on the meta device is allocated on this rank's shards only
and initialised there; an optimizer made before set-up points at the parameters that replaced the originals; a
checkpoint of any layout loads (whole tensors in, this rank's part kept); a save either has every rank write its
shards (the checkpoint_io must write shards: ``distributed``) or gathers whole tensors for rank 0 to write; and at
the end of the run the ``fully_shard`` units a forward left gathered are resharded, so the modules leave the run
holding their shards only (nothing is gathered: see :func:`full_state_dict`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.distributed as dist

from core import ConfigurationError, hookimpl
from core.toolkit._collections import named_tensors

from ._parallel import ParallelOptions, ParallelStrategy
from ._sharding import ReplacedParameters, accept_whole_optimizer_state, gather_full_state

if TYPE_CHECKING:
    from typing_extensions import Unpack


def _holds_dtensors(value: Any) -> bool:
    # Importing torch.distributed.tensor costs a second of every process's start; where nobody imported it, no
    # tensor is a DTensor.
    dtensors = sys.modules.get("torch.distributed.tensor")
    return dtensors is not None and any(isinstance(tensor, dtensors.DTensor) for _, tensor in named_tensors(value))


class ShardedStrategy(ParallelStrategy):
    """The base of a strategy that shards or parallelizes the model into ``DTensor`` s (core-fsdp, core-model-parallel).

    :param sharded_checkpoint: Every rank writes its own shards (needs a checkpoint_io with ``writes_shards``, such
        as ``distributed`` from core-dcp); ``False`` gathers whole tensors for rank 0 to write one file.
    :param options: The options of every process-group strategy: ``process_group_backend``, ``timeout``,
        ``start_method``, ``name`` (:class:`core.toolkit.strategies.ParallelOptions`).

    A subclass implements :meth:`ParallelStrategy.setup_module` with the pieces given here:
    :meth:`broadcast_from_rank_zero` before sharding a module every rank made on its own, :attr:`replaced` to record
    which parameter replaced which, :meth:`materialise` for a module created on the meta device. It names its own
    options in the save's error (:attr:`sharded_checkpoint_option`, :attr:`full_checkpoint_option`).
    """

    sharded_checkpoint_option: str = "sharded_checkpoint=True"
    """How the user asked for every rank to write its shards, as written in the subclass's constructor."""
    full_checkpoint_option: str = "sharded_checkpoint=False"
    """How the user asks for one gathered file instead."""

    default_alias: ClassVar[str] = "sharded"

    def __init__(self, *, sharded_checkpoint: bool = True, **options: Unpack[ParallelOptions]) -> None:
        super().__init__(**options)
        self.sharded_checkpoint = bool(sharded_checkpoint)
        self.replaced = ReplacedParameters()
        """Which parameter replaced which at set-up (run state: not pickled with the options)."""

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("replaced", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.replaced = ReplacedParameters()

    @property
    def default_checkpoint_io(self) -> str:
        """``distributed`` for sharded checkpoints, ``torch`` for a gathered one."""
        return "distributed" if self.sharded_checkpoint else "torch"

    # -- model ----------------------------------------------------------------------------------------

    @hookimpl
    def strategy_module_init_context(self, empty_init: bool) -> AbstractContextManager[Any]:
        # On the meta device a module has shapes and no storage; set-up allocates only this rank's part.
        if empty_init:
            return torch.device("meta")
        return self.active.device or torch.device("cpu")

    def broadcast_from_rank_zero(self, tensors: Iterable[torch.Tensor]) -> None:
        """Give every rank rank 0's values (as ``DistributedDataParallel`` does) before the module is sharded."""
        with torch.no_grad(), self.communicator.guard(f"broadcast of the initial parameters ({self.alias})"):
            for tensor in tensors:
                dist.broadcast(tensor, src=0)

    def materialise(self, module: torch.nn.Module) -> None:
        """Allocate this rank's part of a module created on the meta device and initialise it there."""
        module.to_empty(device=self.active.device or torch.device("cpu"))
        with torch.no_grad(), warnings.catch_warnings():
            # Each rank initialises its own part; the values are meant to be replaced by a checkpoint.
            warnings.filterwarnings("ignore", message="DTensor random operators may not have complete support")
            for submodule in module.modules():
                reset = getattr(submodule, "reset_parameters", None)
                if callable(reset):
                    reset()

    @hookimpl
    def strategy_setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Point an optimizer made before set-up at the ``DTensor`` parameters that replaced the originals."""
        self.replaced.point_optimizer(optimizer, self.alias)
        accept_whole_optimizer_state(optimizer)
        return optimizer

    # -- checkpoints ----------------------------------------------------------------------------------

    @hookimpl
    def strategy_save_checkpoint(self, path: str, state: dict[str, Any]) -> None:
        active = self.active
        if not self.sharded_checkpoint:
            whole = gather_full_state(state)  # every rank takes part in gathering; rank 0 writes
            if active.cluster.is_global_zero:
                active.hook.checkpoint_io_save(checkpoint=whole, path=path, storage_options=None)
        elif _holds_dtensors(state):
            if not getattr(active.checkpoint_io, "writes_shards", False):
                raise ConfigurationError(
                    f"{type(self).__name__}({self.sharded_checkpoint_option}) has every rank write its shards, which "
                    f"the checkpoint_io {active.config.checkpoint_io!r} cannot do. Use plugins=['distributed'] (pip "
                    f"install core-dcp) or {type(self).__name__}({self.full_checkpoint_option})."
                )
            active.hook.checkpoint_io_save(checkpoint=state, path=path, storage_options=None)
        elif active.cluster.is_global_zero:  # nothing is sharded (every rank holds the same state): one writer
            active.hook.checkpoint_io_save(checkpoint=state, path=path, storage_options=None)
        active.hook.strategy_barrier(name="save_checkpoint")

    @hookimpl
    def strategy_load_checkpoint(self, path: str, weights_only: bool) -> dict[str, Any]:
        # Every rank reads whole tensors (any layout, any world size that wrote it); the load hooks installed at
        # set-up keep this rank's part when the module and optimizers load them.
        loaded: dict[str, Any] = self.active.hook.checkpoint_io_load(
            path=path, map_location="cpu", weights_only=weights_only
        )
        return loaded

    # -- end of the run -------------------------------------------------------------------------------

    def release_run(self) -> None:
        """Reshard every ``fully_shard`` unit a forward left gathered (``reshard_after_forward=False``, an
        evaluation): the modules leave the run holding their part only. Nothing is gathered: see
        :func:`full_state_dict` for that."""
        from torch.distributed.fsdp import FSDPModule

        for module in self.set_up_modules:
            for unit in module.modules():
                if isinstance(unit, FSDPModule):
                    unit.reshard()

    def forget_run(self) -> None:
        """Forget which parameter replaced which (the base class drops the run's mesh and modules)."""
        self.replaced.clear()
        super().forget_run()
