"""The ``horovod`` strategy: data parallel through Horovod's collectives and its optimizer wrapper.

Processes are started by ``horovodrun`` (the ``horovod`` environment reads the ranks); the strategy never
starts any. Every module's parameters are broadcast from rank 0 when it is set up, every optimizer becomes a
``hvd.DistributedOptimizer`` (gradients are averaged by Horovod while the backward pass runs), and
``Lite.all_reduce`` / ``all_gather`` / ``broadcast`` / ``barrier`` go through Horovod. Gradient
accumulation: Horovod reduces once every ``backward_passes_per_step`` backward passes, so a loop that
accumulates ``k`` batches (under ``lite.no_backward_sync(model)``, which is then free) needs
``backward_passes_per_step=k``; the strategy checks the count and says which value to pass. Checkpoints are
written by global rank 0 (every rank holds the same weights).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final

import torch

from core import ActiveSet, ConfigurationError, Supports, hookimpl
from core.toolkit import check_whole
from core.toolkit.strategies import check_reduce_op, optimizer_step

from . import _engine

COMPRESSIONS: Final = ("none", "fp16")


def _zero_grad(optimizer: Any, set_to_none: bool = True) -> None:
    """Horovod's check (no reduction still in flight), then torch's ``zero_grad(set_to_none)``."""
    if optimizer._handles:
        raise ConfigurationError(
            "optimizer.zero_grad() was called after lite.backward() and before optimizer.step(): Horovod is still "
            "averaging those gradients. Step first, or zero the gradients before the backward pass."
        )
    torch.optim.Optimizer.zero_grad(optimizer, set_to_none=set_to_none)


class HorovodStrategy:
    """Horovod data parallelism (Lightning 1.x's ``strategy="horovod"``).

    :param backward_passes_per_step: Backward passes Horovod accumulates locally before it averages the
        gradients across ranks; set it to the number of batches you accumulate.
    :param compression: ``"none"`` or ``"fp16"`` (gradients sent as float16).
    :param gradient_predivide_factor: Horovod's split of the averaging before and after the sum.
    """

    kind: Final = "strategy"
    name: Final = "horovod"
    supports: ClassVar[Supports] = Supports(
        never={"accelerator": {"tpu", "mps"}, "checkpoint_io": {"distributed"}, "precision": {"bf16-true"}},
        hint="Horovod runs on CPUs and CUDA GPUs, and every rank holds the whole model: use the 'torch' or "
        "'async' checkpoint_io. Its allreduce refuses bfloat16 tensors (the gradients of bf16-true); "
        "bf16-mixed keeps them in float32.",
    )

    def __init__(
        self,
        backward_passes_per_step: int = 1,
        compression: str = "none",
        gradient_predivide_factor: float = 1.0,
    ) -> None:
        check_whole("HorovodStrategy", "backward_passes_per_step", backward_passes_per_step, 1)
        if compression not in COMPRESSIONS:
            raise ConfigurationError(
                f"HorovodStrategy(compression={compression!r}) is not a compression; expected one of "
                f"{list(COMPRESSIONS)}."
            )
        self.backward_passes_per_step = backward_passes_per_step
        self.compression = compression
        self.gradient_predivide_factor = gradient_predivide_factor
        self._active: ActiveSet | None = None
        self._hvd: Any = None
        self._names: dict[int, str] = {}  # id(parameter) -> its name in the set-up modules
        self._modules_set_up = 0
        self._passes = 0  # backward passes since the last optimizer step

    def unavailable_reason(self) -> str | None:
        """Why Horovod cannot run here (shown by ``python -m core.plugins --check``)."""
        return _engine.unavailable_reason()

    @property
    def active(self) -> ActiveSet:
        if self._active is None:
            raise ConfigurationError("The strategy 'horovod' is used before it was resolved into a run.")
        return self._active

    @property
    def hvd(self) -> Any:
        if self._hvd is None:
            raise ConfigurationError("strategy='horovod' is used before Lite set up its run (launch first).")
        return self._hvd

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        self._active = active

    # --------------------------------------------------------------------------------------- processes

    @hookimpl
    def strategy_launch(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        world_size = self.active.config.world_size
        if world_size > 1 and "HOROVOD_RANK" not in os.environ:
            raise ConfigurationError(
                f"strategy='horovod' with {world_size} processes runs in processes started by horovodrun, which "
                f"this one was not. Start the script with: horovodrun -np {world_size} -H localhost:{world_size} "
                "--gloo python script.py (and leave devices='auto')."
            )
        return function(*args, **kwargs)

    @hookimpl
    def strategy_setup_environment(self) -> None:
        hvd = _engine.load()
        hvd.init()
        cluster = self.active.cluster
        if hvd.size() != cluster.world_size or hvd.rank() != cluster.global_rank:
            raise ConfigurationError(
                f"Horovod reports rank {hvd.rank()} of {hvd.size()}, but the {self.active.config.environment!r} "
                f"environment says rank {cluster.global_rank} of {cluster.world_size}. Run under horovodrun with "
                "the horovod environment (the default there), or pass plugins=['horovod']."
            )
        self._hvd = hvd

    @hookimpl
    def strategy_teardown(self) -> None:
        if self._hvd is not None:
            self._hvd.shutdown()
        self._hvd = None
        self._names.clear()
        self._modules_set_up = 0

    # ---------------------------------------------------------------------------------- model, optimizer

    @hookimpl
    def strategy_setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        self.hvd.broadcast_parameters(module.state_dict(), root_rank=0)
        # Named afresh at each set-up, by the count of modules set up: the id of a parameter freed since may be
        # reused by a new one on one rank and not on the other, and Horovod matches the ranks' tensors by name.
        for name, parameter in module.named_parameters():
            self._names[id(parameter)] = f"{self._modules_set_up}.{name}"
        self._modules_set_up += 1
        return module

    @hookimpl
    def strategy_setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
        unknown = [index for index, parameter in enumerate(parameters) if id(parameter) not in self._names]
        if unknown:
            raise ConfigurationError(
                f"The optimizer holds {len(unknown)} parameter(s) of no module set up by this Lite; set the module "
                "up first: lite.setup(model, optimizer)."
            )
        hvd = self.hvd
        distributed = hvd.DistributedOptimizer(
            optimizer,
            named_parameters=[(self._names[id(parameter)], parameter) for parameter in parameters],
            compression=hvd.Compression.fp16 if self.compression == "fp16" else hvd.Compression.none,
            backward_passes_per_step=self.backward_passes_per_step,
            op=hvd.Average,
            gradient_predivide_factor=self.gradient_predivide_factor,
        )
        hvd.broadcast_optimizer_state(distributed, root_rank=0)
        # Horovod's zero_grad() takes no arguments; Lite (like torch) passes set_to_none.
        distributed.zero_grad = functools.partial(_zero_grad, distributed)
        return distributed

    @hookimpl
    def strategy_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> bool | None:
        self._passes += 1
        if self._passes > self.backward_passes_per_step:  # Horovod would fail inside autograd's engine
            raise ConfigurationError(
                f"This is backward pass {self._passes} since the last optimizer step, but Horovod averages the "
                f"gradients once every {self.backward_passes_per_step}. When you accumulate k batches (k - 1 of them "
                "under lite.no_backward_sync), pass strategy=HorovodStrategy(backward_passes_per_step=k)."
            )
        if self.active.hook.precision_backward(tensor=tensor, module=module) is None:
            tensor.backward()  # no precision implements the optional hook: plain PyTorch
        return True

    @hookimpl
    def strategy_optimizer_step(self, optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
        passes, self._passes = self._passes, 0
        if passes != self.backward_passes_per_step:
            raise ConfigurationError(
                f"This optimizer step follows {passes} backward pass(es), but Horovod averages the gradients once "
                f"every {self.backward_passes_per_step}. Pass strategy=HorovodStrategy(backward_passes_per_step="
                f"{passes}) when you accumulate {passes} batches (under lite.no_backward_sync or not)."
            )
        return optimizer_step(self.active, optimizer, **kwargs)

    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        # Horovod reduces on the backward_passes_per_step-th pass by itself; the step checks the count.
        return contextlib.nullcontext()

    @hookimpl
    def strategy_module_init_context(self, empty_init: bool) -> contextlib.AbstractContextManager[Any]:
        return self.active.device or torch.device("cpu")

    # ------------------------------------------------------------------------------------- collectives

    @hookimpl
    def strategy_reduce(self, tensor: torch.Tensor, group: Any | None, reduce_op: str) -> torch.Tensor:
        op = check_reduce_op(reduce_op)
        if group is not None:
            raise ConfigurationError("strategy='horovod' reduces over all ranks; process groups are not supported.")
        hvd = self.hvd
        operation = {"sum": hvd.Sum, "mean": hvd.Average, "max": hvd.Max, "min": hvd.Min}[op]
        if op == "mean" and not tensor.is_floating_point():
            tensor = tensor.double()
        return hvd.allreduce(tensor, op=operation)

    @hookimpl
    def strategy_all_gather(self, tensor: torch.Tensor, group: Any | None, sync_grads: bool) -> torch.Tensor:
        gathered = self.hvd.allgather(tensor.unsqueeze(0))  # concatenated along a new first dimension
        return gathered if sync_grads else gathered.detach()

    @hookimpl
    def strategy_broadcast(self, obj: Any, src: int) -> Any:
        if not 0 <= src < self.hvd.size():
            raise ConfigurationError(f"broadcast(src={src}) names a rank outside a world of size {self.hvd.size()}.")
        return self.hvd.broadcast_object(obj, root_rank=src)

    @hookimpl
    def strategy_barrier(self, name: str | None) -> None:
        if self._hvd is not None:
            self._hvd.barrier()

    @hookimpl
    def strategy_distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": self.hvd.size(), "rank": self.hvd.rank()}

    # ------------------------------------------------------------------------------------- checkpoints

    @hookimpl
    def strategy_save_checkpoint(self, path: str, state: dict[str, Any]) -> None:
        if self.active.cluster.is_global_zero:  # every rank holds the same weights
            self.active.hook.checkpoint_io_save(checkpoint=state, path=path, storage_options=None)
        self.strategy_barrier(name="save_checkpoint")

    @hookimpl
    def strategy_load_checkpoint(self, path: str, weights_only: bool) -> dict[str, Any]:
        loaded = self.active.hook.checkpoint_io_load(path=path, map_location="cpu", weights_only=weights_only)
        return loaded
