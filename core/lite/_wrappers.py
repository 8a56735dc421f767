"""What ``Lite.setup*`` returns: thin wrappers that route the per-step calls through bound hooks.

Each wrapper holds the hooks it needs as plain attributes, bound once when it is created, so a training
step costs a few Python calls on top of the raw loop and no hook lookup.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from core.lite._hooks import BoundHooks

Hook = Callable[..., Any]


def _device_of(module: torch.nn.Module) -> torch.device:
    """Where ``module``'s first parameter (or buffer) lives; CPU for a module with neither (Fabric's ``.device``)."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device
    return torch.device("cpu")


class LiteModule(torch.nn.Module):
    """A set-up module.

    ``forward`` converts the inputs to the precision, runs the strategy's module (the user's module,
    or a ``DistributedDataParallel`` around it) under the precision's autocast, and converts the output
    back. ``state_dict`` / ``load_state_dict`` and unknown attributes are the original module's, so a
    checkpoint has the same keys with and without ``Lite``.
    """

    def __init__(
        self,
        forward_module: torch.nn.Module,
        original_module: torch.nn.Module,
        hooks: BoundHooks,
        strategy_module: torch.nn.Module | None = None,
        forwards: list[int] | None = None,
    ) -> None:
        super().__init__()
        self._forward_module = forward_module
        # What the strategy's setup returned: the module it is handed back (backward, no_sync, checkpoints). It differs
        # from the forward module when Lite compiled the strategy's module for a torch.compile'd model.
        self.__dict__["_strategy_module"] = forward_module if strategy_module is None else strategy_module
        # Not registered as a submodule: its parameters are reached through the forward module already.
        self.__dict__["_original_module"] = original_module
        # A plain reference as well, so that each forward skips nn.Module's attribute lookup.
        self.__dict__["_forward"] = forward_module
        self.__dict__["_convert_input"] = hooks.precision_convert_input
        self.__dict__["_convert_output"] = hooks.precision_convert_output
        self.__dict__["_autocast"] = hooks.precision_autocast
        # Shared by the modules of one Lite: how many set-up forwards ran since the last backward (Lite.backward reads
        # it to refuse a loss no set-up module computed, whose gradients a distributed strategy would not synchronise).
        self.__dict__["_forwards"] = [0] if forwards is None else forwards
        self.__dict__["_ready"] = True

    @property
    def module(self) -> torch.nn.Module:
        """The user's module, as converted by the precision, without any strategy wrapper."""
        module: torch.nn.Module = self.__dict__["_original_module"]
        return module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._forwards[0] += 1
        args, kwargs = self._convert_input(data=(args, kwargs))
        with self._autocast():
            output = self._forward(*args, **kwargs)
        return self._convert_output(data=output)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            original = self.__dict__.get("_original_module")
            if original is None:
                raise
            if name == "device" and not hasattr(original, "device"):
                return _device_of(original)
            return getattr(original, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # After construction, new attributes belong to the user's module, where reads find them.
        own = name in self.__dict__ or hasattr(type(self), name) or name in self._modules
        if self.__dict__.get("_ready") and not own:
            setattr(self.module, name, value)
        else:
            super().__setattr__(name, value)

    def __repr__(self) -> str:
        return f"LiteModule({self.module!r})"


if TYPE_CHECKING:
    # Every instance is of a subclass of LiteOptimizer and the optimizer's class (see _optimizer_wrapper_class):
    # type checkers see that through this base, so a set-up optimizer goes wherever an Optimizer is expected.
    _OptimizerAtRunTime = torch.optim.Optimizer
else:
    _OptimizerAtRunTime = object


class LiteOptimizer(_OptimizerAtRunTime):
    """A set-up optimizer: ``step`` goes through the strategy's hook, everything else is the optimizer's.

    Instances are of a subclass of both this class and the optimizer's class (made once per optimizer
    class), so ``isinstance(optimizer, torch.optim.Optimizer)`` holds and learning-rate schedulers accept
    it. State lives only in the wrapped optimizer: reads and writes of attributes are forwarded.
    """

    _optimizer: torch.optim.Optimizer
    _step_hook: Hook

    def __init__(self, optimizer: torch.optim.Optimizer, step_hook: Hook) -> None:
        object.__setattr__(self, "_optimizer", optimizer)
        object.__setattr__(self, "_step_hook", step_hook)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer as the strategy set it up."""
        return self._optimizer

    @property
    def set_up_optimizer(self) -> torch.optim.Optimizer:
        """:attr:`optimizer`, under the name of :class:`core.toolkit.strategies.OptimizerWrapper`: what a strategy
        looks for to recognise its optimizer in this wrapper."""
        return self._optimizer

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        kwargs = {} if closure is None else {"closure": closure}
        return self._step_hook(optimizer=self._optimizer, kwargs=kwargs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self._optimizer.add_param_group(param_group)

    def __getattr__(self, name: str) -> Any:
        if name in ("_optimizer", "_step_hook"):  # not set yet: an instance under construction by copy
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    def __deepcopy__(self, memo: dict[int, Any]) -> LiteOptimizer:
        return wrap_optimizer(copy.deepcopy(self._optimizer, memo), self._step_hook)

    def __setattr__(self, name: str, value: Any) -> None:
        # Learning-rate schedulers replace ``step`` on the instance to count calls; that wrapper must stay
        # on this object, or the inner optimizer's own step would call back into this one forever.
        if name == "step":
            object.__setattr__(self, name, value)
        else:
            setattr(self._optimizer, name, value)

    def __repr__(self) -> str:
        return f"LiteOptimizer({self._optimizer!r})"


_WRAPPER_CLASSES: dict[type[torch.optim.Optimizer], type[LiteOptimizer]] = {}


def _optimizer_wrapper_class(optimizer_class: type[torch.optim.Optimizer]) -> type[LiteOptimizer]:
    """``LiteSGD`` for ``SGD``: made once per optimizer class."""
    wrapper = _WRAPPER_CLASSES.get(optimizer_class)
    if wrapper is None:
        name = f"Lite{optimizer_class.__name__}"
        wrapper = type(name, (LiteOptimizer, optimizer_class), {"__module__": __name__, "__qualname__": name})
        _WRAPPER_CLASSES[optimizer_class] = wrapper
    return wrapper


def wrap_optimizer(optimizer: torch.optim.Optimizer, step_hook: Hook) -> LiteOptimizer:
    return _optimizer_wrapper_class(type(optimizer))(optimizer, step_hook)


def _epoch_setters(loader: DataLoader[Any]) -> list[Callable[[int], None]]:
    """``set_epoch`` of the loader's sampler and batch sampler's sampler, where they have one."""
    samplers = [loader.sampler, getattr(loader.batch_sampler, "sampler", None)]
    setters = []
    for sampler in samplers:
        set_epoch = getattr(sampler, "set_epoch", None)
        if callable(set_epoch) and set_epoch not in setters:
            setters.append(set_epoch)
    return setters


class LiteDataLoader:
    """A set-up DataLoader: each new iteration sets the sampler's epoch; batches arrive on the device."""

    def __init__(
        self, loader: DataLoader[Any], move: Callable[[Any], Any] | None, device: torch.device | None = None
    ) -> None:
        self._loader = loader
        self._move = move
        self._device = device
        self._set_epoch = _epoch_setters(loader)
        self._epoch = 0

    @property
    def device(self) -> torch.device | None:
        """Where batches are moved, or ``None`` when they are not (``setup_dataloaders(move_to_device=False)``)."""
        return self._device

    @property
    def loader(self) -> DataLoader[Any]:
        """The DataLoader iterated (rebuilt with a distributed sampler where the strategy asked for one)."""
        return self._loader

    def __len__(self) -> int:
        return len(self._loader)

    def set_epoch(self, epoch: int) -> None:
        """Give the sampler ``epoch`` at the next iteration (later iterations count on from it): for resuming."""
        self._epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        # Without a new epoch a DistributedSampler would shuffle every epoch the same way.
        for set_epoch in self._set_epoch:
            set_epoch(self._epoch)
        self._epoch += 1
        move = self._move
        if move is None:
            yield from self._loader
            return
        for batch in self._loader:
            yield move(batch)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_loader", "_move", "_device", "_set_epoch", "_epoch"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    def __repr__(self) -> str:
        return f"LiteDataLoader({self._loader!r})"
