"""The XLA strategies: ``single_xla`` (one TPU device) and ``xla`` (one process per TPU device).

XLA traces operations lazily and runs the graph at ``mark_step``; both strategies mark the step after
every optimizer step. ``xla`` averages gradients across devices inside the optimizer step (XLA has no
gradient synchronisation during backward, so ``no_backward_sync`` has nothing to block).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, Final

import torch

from core import ConfigurationError, Supports, hookimpl
from core.toolkit.strategies import SingleDeviceStrategy, check_reduce_op, optimizer_step
from core.toolkit.tensors import apply_to_tensors

from . import _launcher
from ._runtime import xla

if TYPE_CHECKING:
    from core import ActiveSet

XLA_STRATEGY_SUPPORTS: Final = Supports(
    only={"accelerator": {"tpu"}},
    hint="The XLA strategies run on TPU only: pass accelerator='tpu' (pip install core-tpu torch_xla), or use "
    "strategy='ddp' on cpu or cuda.",
)

_XLA_REDUCE_OPS: Final = {"sum": "REDUCE_SUM", "mean": "REDUCE_SUM", "max": "REDUCE_MAX", "min": "REDUCE_MIN"}


class SingleXLAStrategy(SingleDeviceStrategy):
    """One process on one TPU device."""

    name: ClassVar[str] = "single_xla"
    max_processes: ClassVar[int | None] = 1
    supports: Final = XLA_STRATEGY_SUPPORTS

    @hookimpl
    def strategy_module_init_context(self, empty_init: bool) -> AbstractContextManager[None]:
        # Modules are created on the host and moved to the device by the runtime: lazy XLA tensors
        # created under a device context would each start a graph.
        return nullcontext()

    @hookimpl
    def strategy_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> bool:
        if self.active.hook.precision_backward(tensor=tensor, module=module) is None:
            tensor.backward()  # no precision implements the optional hook: plain PyTorch
        return True

    @hookimpl
    def strategy_optimizer_step(self, optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
        xm = xla("core.xla_model")
        result = optimizer_step(self.active, optimizer, **kwargs)
        xm.mark_step()
        return result

    @hookimpl
    def strategy_save_checkpoint(self, path: str, state: dict[str, Any]) -> None:
        # Every rank takes part in moving the lazy tensors to the host; only rank 0 writes.
        on_host = apply_to_tensors(state, lambda tensor: tensor.detach().cpu())
        if self.active.cluster.is_global_zero:
            self.active.hook.checkpoint_io_save(checkpoint=on_host, path=path, storage_options=None)
        self.active.hook.strategy_barrier(name="save_checkpoint")


class XLAStrategy(SingleXLAStrategy):
    """One process per TPU device, started by torch_xla's ``xmp.spawn``; gradients averaged at each step."""

    name: ClassVar[str] = "xla"
    max_processes: ClassVar[int | None] = None

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        if active.config.world_size == 1:
            raise ConfigurationError(
                "strategy='xla' starts one process per TPU device, but devices x num_nodes = 1: torch_xla's PJRT "
                "runtime cannot spawn a single worker. Use strategy='single_xla' for one device."
            )
        self._active = active

    @hookimpl
    def strategy_launch(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        if self.active.hook.environment_creates_processes_externally():
            return function(*args, **kwargs)
        return _launcher.launch(function, args, kwargs, processes=self.active.config.devices_per_node)

    @hookimpl
    def strategy_setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        xm = xla("core.xla_model")
        # Every replica starts from rank 0's parameters.
        xm.broadcast_master_param(module)
        return module

    @hookimpl
    def strategy_optimizer_step(self, optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
        xm = xla("core.xla_model")
        xm.reduce_gradients(optimizer)
        result = optimizer_step(self.active, optimizer, **kwargs)
        xm.mark_step()
        return result

    @hookimpl
    def strategy_reduce(self, tensor: torch.Tensor, group: Any | None, reduce_op: str) -> torch.Tensor:
        xm = xla("core.xla_model")
        op = check_reduce_op(reduce_op)
        reduced = xm.all_reduce(getattr(xm, _XLA_REDUCE_OPS[op]), tensor.to(self.active.device))
        return reduced / self.active.config.world_size if op == "mean" else reduced

    @hookimpl
    def strategy_all_gather(self, tensor: torch.Tensor, group: Any | None, sync_grads: bool) -> torch.Tensor:
        stacked = tensor.to(self.active.device).unsqueeze(0)
        gather = xla("core.functions").all_gather if sync_grads else xla("core.xla_model").all_gather
        return gather(stacked, dim=0)

    @hookimpl
    def strategy_broadcast(self, obj: Any, src: int) -> Any:
        xm = xla("core.xla_model")
        device = self.active.device
        is_source = self.active.cluster.global_rank == src
        buffer = io.BytesIO()
        if is_source:
            torch.save(obj, buffer)
        payload = torch.tensor(bytearray(buffer.getbuffer()), dtype=torch.float32)
        # The sizes differ between ranks: agree on the source's first, then send the bytes.
        size = [torch.tensor([payload.numel()], dtype=torch.float32, device=device)]
        xm.collective_broadcast(size, root_ordinal=src)
        received = payload if is_source else torch.zeros(int(size[0].item()), dtype=torch.float32)
        data = [received.to(device)]
        xm.collective_broadcast(data, root_ordinal=src)
        raw = bytes(data[0].cpu().to(torch.uint8).tolist())
        return torch.load(io.BytesIO(raw), weights_only=False)

    @hookimpl
    def strategy_barrier(self, name: str | None) -> None:
        xm = xla("core.xla_model")
        xm.rendezvous(name or "core-barrier")

    @hookimpl
    def strategy_distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        cluster = self.active.cluster
        return {"num_replicas": cluster.world_size, "rank": cluster.global_rank}
