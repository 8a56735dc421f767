"""``Lite``: scale your own PyTorch loop to any resolved active set with five changes.

Everything that touches hardware, processes or files goes through the active set's hooks; this module
only orders the calls. The lifecycle of a ``Lite`` in one process is::

    new --launch()--> running --function returns / teardown--> ended

``launch`` hands a picklable task to the strategy's ``strategy_launch``. In every process the strategy
runs it in, the task reads the ranks again from the environment, connects the device, lets the strategy
set up what processes share (the process group), calls the user's function with the ``Lite`` first, and
tears down in ``finally``. A process that received the ``Lite`` by pickling (``ddp_spawn``) resolves the
same settings again there, and re-seeds from ``CORE_GLOBAL_SEED``.
"""

from __future__ import annotations

import atexit
import builtins
import copy
import functools
import inspect
import itertools
import operator
import os
import sys
import warnings
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast, overload

import torch
from torch.utils.data import DataLoader

from core._errors import (
    BrokenPluginError,
    CheckpointError,
    ConfigurationError,
    CoreDeprecationWarning,
    CoreError,
    CoreWarning,
)
from core._exit import freeze_at_exit
from core.lite._data import with_distributed_sampler
from core.lite._hooks import BoundHooks
from core.lite._nested import RUNNING, is_nested_single_process, launch_variables_hidden
from core.lite._seed import reset_seed, seeds_workers, worker_init_function
from core.lite._seed import seed_everything as _seed_everything
from core.lite._wrappers import LiteDataLoader, LiteModule, LiteOptimizer, wrap_optimizer
from core.registry._active import ActiveSet
from core.registry._resolver import resolve
from core.toolkit._checkpoint_state import PRECISION_KEY, Filter, is_stateful, restore, to_checkpoint
from core.toolkit.strategies._sharding import ReplacedParameters  # the module alone: its package imports core
from core.toolkit.tensors import apply_to_tensors

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["Lite", "LiteDataLoader", "LiteModule", "LiteOptimizer"]

T = TypeVar("T")

_NO_FUNCTION: Final = object()
"""``launch()``'s default: no function given (``None`` given is the mistake ``launch(train())``)."""


class _ArgumentTypeError(ConfigurationError, TypeError):
    """An argument of the wrong type: a :class:`core.ConfigurationError` that is also the ``TypeError`` Fabric raises
    for it, so that code catching either keeps working."""


_NEW: Final = "new"
_RUNNING: Final = "running"
_ENDED: Final = "ended"

# Deprecated spellings: argument -> the accelerator family it implies.
_SHORTHANDS: Final = {"gpus": "cuda", "tpu_cores": "tpu"}
_SHORTHAND_ACCELERATORS: Final = {"cuda": ("auto", "cuda", "gpu"), "tpu": ("auto", "tpu")}


def _apply_shorthands(settings: dict[str, Any], shorthands: Mapping[str, object]) -> None:
    given = {name: value for name, value in shorthands.items() if value is not None}
    if len(given) > 1:
        raise ConfigurationError(f"Pass at most one of gpus= and tpu_cores=, got {given}.")
    for name, value in given.items():
        family = _SHORTHANDS[name]
        if settings["devices"] != "auto":
            raise ConfigurationError(
                f"{name}={value!r} and devices={settings['devices']!r} both choose the devices; pass only "
                f"accelerator={family!r}, devices={value!r}."
            )
        if settings["accelerator"] not in _SHORTHAND_ACCELERATORS[family]:
            raise ConfigurationError(
                f"{name}={value!r} implies accelerator={family!r}, but accelerator={settings['accelerator']!r} "
                f"was given; pass accelerator={family!r}, devices={value!r}."
            )
        warnings.warn(
            f"{name}={value!r} is deprecated; pass accelerator={family!r}, devices={value!r} instead.",
            CoreDeprecationWarning,
            stacklevel=4,
        )
        if settings["accelerator"] == "auto":
            settings["accelerator"] = family
        settings["devices"] = value


# Settings `python -m core.run` exports for the scripts it starts: used where the script left the default.
_LAUNCHER_VARIABLES: Final = {
    "accelerator": ("CORE_ACCELERATOR", "auto"),
    "strategy": ("CORE_STRATEGY", "auto"),
    "devices": ("CORE_DEVICES", "auto"),
    "num_nodes": ("CORE_NUM_NODES", 1),
    "precision": ("CORE_PRECISION", None),
}


def _apply_launcher_defaults(settings: dict[str, Any]) -> None:
    """Fill settings the script left at their defaults from the variables of ``python -m core.run``.

    An explicit argument always wins, so a script that names its strategy runs the same under the launcher.
    """
    for name, (variable, default) in _LAUNCHER_VARIABLES.items():
        value = os.environ.get(variable)
        if not value or settings[name] != default:
            continue
        if name == "num_nodes":
            if not value.isdigit():
                raise ConfigurationError(f"{variable}={value!r} is not a whole number of nodes.")
            settings[name] = int(value)
        else:
            settings[name] = value


def _compiled(module: object) -> torch.nn.Module | None:
    """The plain module under a ``torch.compile`` wrapper, or None when ``module`` is not compiled."""
    original = getattr(module, "_orig_mod", None)
    if isinstance(module, torch.nn.Module) and isinstance(original, torch.nn.Module):
        return original
    return None


def _recompiler(wrapper: torch.nn.Module) -> Callable[[Any], Any]:
    """What compiles another module or function as the user's ``torch.compile`` call compiled ``wrapper``: with its
    backend, mode, options, ``fullgraph`` and ``dynamic``. That is the wrapper's dynamo context, which wraps a module
    (in a new ``OptimizedModule``) or a function as ``torch.compile`` with those arguments would; torch's defaults
    where the wrapper has none."""
    context = getattr(wrapper, "dynamo_ctx", None)
    return context if callable(context) else torch.compile


def _in_place_compiler(recompile: Callable[[Any], Any]) -> Callable[[torch.nn.Module], None]:
    """``compile_in_place`` of the ``strategy_compile`` hook: ``torch.nn.Module.compile`` with the user's settings."""

    def compile_in_place(module: torch.nn.Module) -> None:
        module._compiled_call_impl = recompile(module._call_impl)

    return compile_in_place


def _as_list(value: object) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _as_plugin_list(plugins: object) -> list[object] | None:
    if plugins is None:
        return None
    if isinstance(plugins, (list, tuple)):
        return list(plugins)
    return [plugins]


def _snapshot(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings as they are before resolution, for a process that resolves them again after pickling.

    Plugin objects passed in code are copied first: once attached to a run they hold its active set, which
    does not pickle.
    """
    try:
        return copy.deepcopy(settings)
    except Exception:  # an object that cannot be copied is sent as it is; pickling may then refuse it
        return dict(settings)


def _check_launched_function(function: object) -> None:
    """Refuse what ``launch`` cannot call as ``function(lite, ...)``, with Fabric's ``TypeError`` wording."""
    if not callable(function):
        raise _ArgumentTypeError(
            f"launch() takes a function (called as function(lite, ...)), got {function!r}: `Lite.launch(...)` needs "
            f"to be a callable. Pass the function itself: .launch(train), not .launch(train())."
        )
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # no readable signature (a builtin): let the call say what is wrong
        return
    if not parameters:
        name = getattr(function, "__qualname__", repr(function))
        raise _ArgumentTypeError(
            f"`Lite.launch(function={name})` needs to take at least one argument: launch calls it as "
            f"function(lite, *args, **kwargs), with this Lite first. Define it as def {name.split('.')[-1]}(lite): ..."
        )


def _check_save_filter(state: Mapping[str, Any], filter: object) -> None:
    """Refuse a ``save(filter=...)`` that is not a dict of functions over keys of ``state``, as Fabric does (a wrong
    type is also a ``TypeError``, a key the state lacks a ``ValueError``)."""
    if filter is None:
        return
    if not isinstance(filter, Mapping):
        raise _ArgumentTypeError(
            f"Filter should be a dictionary, given {filter!r}: save(filter={{'model': lambda name, value: ...}}) maps "
            f"keys of the state to a function (name, value) -> bool choosing the entries to keep."
        )
    missing = set(filter) - set(state)
    if missing:
        raise ConfigurationError(
            f"save(filter=...) names the key {sorted(missing)[0]!r}, which the state does not have: the filter keys "
            f"{missing} are not present in the state keys {set(state)}. Filter only keys of the state saved."
        )
    for key, predicate in filter.items():
        if not callable(predicate):
            raise _ArgumentTypeError(
                f"Expected `save(filter=...)` for key {key!r} to be a callable, given {predicate!r}: a function "
                f"(name, value) -> bool choosing the entries of {key!r}'s state dict to keep."
            )


def _keywords_taken(method: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``method`` can take: all when it takes ``**kwargs`` or has no readable signature."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):  # a builtin or a C extension: pass everything, as Fabric does
        return kwargs
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values()):
        return kwargs
    return {name: value for name, value in kwargs.items() if name in parameters}


def _scalar(tensor: torch.Tensor) -> Any:
    """A logged tensor's Python number."""
    if tensor.numel() != 1:
        raise ConfigurationError(
            f"The metric `{tensor}` does not contain a single element, thus it cannot be converted to a scalar: "
            f"log a tensor of one element (its shape is {tuple(tensor.shape)}; reduce it, e.g. tensor.mean())."
        )
    return tensor.item()


def _on_meta_device(module: torch.nn.Module) -> bool:
    """Created empty (``init_module(empty_init=True)`` under a sharding strategy): the strategy allocates it."""
    return any(tensor.is_meta for tensor in itertools.chain(module.parameters(), module.buffers()))


WRAPPED_ATTRIBUTE: Final = "core_wrapped_attribute"
"""A class attribute naming the submodule that holds the user's model, on a module that only wraps it (the Trainer's
``StepModule`` says ``"module"``): the precision converts that model, not the wrapper."""

# The modules converted in this process, with the precision alias that converted them: a module set up again under
# the same precision (the Trainer's fit, then validate and test) is not converted again.
_CONVERTED: Final[weakref.WeakKeyDictionary[torch.nn.Module, str]] = weakref.WeakKeyDictionary()


def _conversion_target(module: torch.nn.Module) -> tuple[torch.nn.Module, str | None]:
    """The model the precision converts: the one a wrapper names in ``core_wrapped_attribute``, else the module."""
    attribute = getattr(type(module), WRAPPED_ATTRIBUTE, None)
    if isinstance(attribute, str):
        inner = getattr(module, attribute, None)
        if isinstance(inner, torch.nn.Module):
            return inner, attribute
    return module, None


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself, or the whole tensor of a DTensor."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _uncompiled(value: Any) -> Any:
    """A set-up module that the user compiled after setup (``torch.compile(lite.setup(model))``): the set-up module
    under torch's wrapper, which Lite's methods take in its place, as Fabric's do; any other value unchanged."""
    if "torch._dynamo" in sys.modules:  # nothing was compiled before dynamo was imported
        from torch._dynamo.eval_frame import OptimizedModule

        if isinstance(value, OptimizedModule) and isinstance(value._orig_mod, LiteModule):
            return value._orig_mod
    return value


def _user_model(value: object) -> torch.nn.Module | None:
    """The model whose state dict a checkpoint entry holds (a set-up module's original, or a plain module)."""
    value = _uncompiled(value)
    if isinstance(value, LiteModule):
        return value.module
    return value if isinstance(value, torch.nn.Module) else None


def _unwrapped(state: Mapping[str, Any]) -> dict[str, Any]:
    """The state with Lite's wrappers removed: modules and optimizers as the strategy's setup returned them."""
    objects = {}
    for key, value in state.items():
        value = _uncompiled(value)
        if isinstance(value, LiteModule):
            value = value.__dict__["_strategy_module"]
        elif isinstance(value, LiteOptimizer):
            value = value.optimizer
        objects[key] = value
    return objects


class _Task:
    """What ``strategy_launch`` runs in every process. Picklable when the function and the Lite are."""

    def __init__(self, lite: Lite, function: Callable[..., Any] | None) -> None:
        self.lite = lite
        self.function = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        lite = self.lite
        if self.function is None:  # launch() without a function: the script goes on after it
            atexit.register(lite._teardown)
            lite._connect()
            return None
        try:
            lite._connect()
            return self.function(lite, *args, **kwargs)
        finally:
            lite._teardown()


class _SubclassRun:
    """The original ``run`` of a ``Lite`` subclass, found again by class after pickling."""

    def __init__(self, owner: type[Lite]) -> None:
        self.owner = owner

    def __call__(self, lite: Lite, *args: Any, **kwargs: Any) -> Any:
        return self.owner.__dict__["run"].__wrapped__(lite, *args, **kwargs)


def _launching(owner: type[Lite], run: Callable[..., Any]) -> Callable[..., Any]:
    """Make ``owner.run(...)`` go through :meth:`Lite.launch`, as ``launch(run, ...)`` would."""

    @functools.wraps(run)
    def launch_run(self: Lite, *args: Any, **kwargs: Any) -> Any:
        if self._phase == _RUNNING:  # an override calling super().run(): already inside the run
            return run(self, *args, **kwargs)
        return self.launch(_SubclassRun(owner), *args, **kwargs)

    launch_run.__dict__["_core_launches"] = True
    return launch_run


class Lite:
    """The runtime for your own training loop: the same code on any accelerator, strategy and precision.

    :param accelerator: An accelerator alias (``"cpu"``, ``"cuda"``, ...), a plugin object, or ``"auto"``.
    :param strategy: A strategy alias (``"single_device"``, ``"ddp"``, ...), a plugin object, or ``"auto"``.
    :param devices: How many devices (or which indices) per node; ``"auto"`` for the accelerator's default.
    :param num_nodes: How many nodes the run spans.
    :param precision: A precision alias (``"32-true"``, ``"bf16-true"``, ...); ``None`` for ``32-true``.
    :param plugins: Aliases or plugin objects of any kind (an environment, a checkpoint_io, extensions).
    :param callbacks: Objects whose methods :meth:`call` invokes by name (Fabric's ``callbacks=``).
    :param loggers: A :class:`core.loggers.Logger` or a list of them, for :meth:`log` / :meth:`log_dict`.
    :param gpus: Deprecated: ``accelerator="cuda", devices=gpus``.
    :param tpu_cores: Deprecated: ``accelerator="tpu", devices=tpu_cores``.

    Two styles, one path: call :meth:`launch` with a function taking the ``Lite`` first, or subclass,
    override :meth:`run` and call it; either way the strategy starts the processes and every process runs
    the function between its setup and its teardown.

    The settings are resolved here (see :func:`core.resolve`), so a bad value fails at construction with the
    resolver's message ("Unknown strategy 'dpp'. Did you mean 'dp'?"). ``gpus=`` or ``tpu_cores=`` together
    with ``devices=``, or with a different ``accelerator=``, is a :class:`core.ConfigurationError`; alone they
    are accepted with a :class:`core.CoreDeprecationWarning`.

    Methods that need a launched run (inside the launched function or :meth:`run`, or after ``launch()``)
    raise :class:`core.CoreError` naming what to call first when called earlier. A ``Lite`` runs once: after
    :meth:`launch` returns, they raise ("was called after the run ended"); create a new ``Lite`` for another
    run.
    """

    def __init__(
        self,
        accelerator: object = "auto",
        strategy: object = "auto",
        devices: object = "auto",
        num_nodes: int = 1,
        precision: object = None,
        plugins: object = None,
        callbacks: object = None,
        loggers: object = None,
        *,
        gpus: object = None,
        tpu_cores: object = None,
    ) -> None:
        self._callbacks: list[Any] = _as_list(callbacks)
        self._loggers: list[Any] = _as_list(loggers)
        settings: dict[str, Any] = {
            "accelerator": accelerator,
            "strategy": strategy,
            "devices": devices,
            "num_nodes": num_nodes,
            "precision": precision,
            "plugins": _as_plugin_list(plugins),
        }
        _apply_shorthands(settings, {"gpus": gpus, "tpu_cores": tpu_cores})
        # A one-process Lite inside a running one is its own run: the launcher's variables are the outer run's.
        self._nested = is_nested_single_process(settings)
        if not self._nested:
            _apply_launcher_defaults(settings)
        self._settings = _snapshot(settings)
        self._phase = _NEW
        freeze_at_exit()
        with launch_variables_hidden(self._nested):
            self._attach(resolve(**settings))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        run = cls.__dict__.get("run")
        if run is not None and not getattr(run, "_core_launches", False):
            cls.run = _launching(cls, run)  # type: ignore[method-assign]

    # ---------------------------------------------------------------------------------------------
    # Lifecycle
    # ---------------------------------------------------------------------------------------------

    def _attach(self, active: ActiveSet) -> None:
        self._active = active
        self._hooks = BoundHooks(active)
        self._single_module: torch.nn.Module | None = None
        self._forwards = [0]  # forwards of set-up modules since the last backward (LiteModule counts them)
        self._module_count = 0
        # Parameters the precision replaced (a structural conversion): optimizers made before setup are re-pointed.
        self._precision_replaced = ReplacedParameters()

    def __getstate__(self) -> dict[str, Any]:
        # The active set (a PluginManager, live plugin objects) stays behind; the settings travel.
        return {"_settings": self._settings, "_callbacks": self._callbacks, "_loggers": self._loggers}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._settings = state["_settings"]
        self._callbacks = state.get("_callbacks", [])
        self._loggers = state.get("_loggers", [])
        self._phase = _NEW
        self._nested = False
        self._active = None  # type: ignore[assignment]

    def _ensure_attached(self) -> None:
        if self._active is None:  # this process received the Lite by pickling
            self._attach(resolve(**self._settings))
            reset_seed()

    def _connect(self) -> None:
        """Set this process up for the run: ranks, device, what the processes share."""
        self._ensure_attached()
        active, hooks = self._active, self._hooks
        with launch_variables_hidden(self._nested):
            cluster = active.refresh_cluster()
        device = hooks.accelerator_setup_device(local_rank=cluster.local_rank, device_ids=active.config.device_ids)
        if not isinstance(device, torch.device):
            raise BrokenPluginError(
                f"The accelerator {active.config.accelerator!r} returned {device!r} from accelerator_setup_device; "
                f"expected a torch.device."
            )
        active.device = device
        # Running from here on, so that a failing process-group setup is still torn down.
        self._phase = _RUNNING
        RUNNING.enter()
        hooks.strategy_setup_environment()

    def _teardown(self) -> None:
        """Release everything, in the contract's order, even when one step fails; re-raise the first error."""
        if self._phase != _RUNNING:
            return
        self._phase = _ENDED
        RUNNING.leave()
        hooks = self._hooks
        first_error: BaseException | None = None
        for teardown in (
            hooks.strategy_teardown,
            hooks.checkpoint_io_teardown,
            hooks.accelerator_teardown,
            hooks.environment_teardown,
        ):
            try:
                teardown()
            except BaseException as error:  # every teardown must run; the first error is re-raised below
                first_error = first_error or error
        if first_error is not None:
            raise first_error

    @overload
    def launch(self) -> None: ...

    @overload
    def launch(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def launch(self, function: Any = _NO_FUNCTION, *args: Any, **kwargs: Any) -> Any:
        """Run ``function(lite, *args, **kwargs)`` in every process of the run; return global rank 0's result
        (typed as the function's: ``lite.launch(train)`` is a ``float`` when ``train`` returns one).

        :param function: Takes this ``Lite`` first. Left out, ``launch()`` sets up this process and returns, so
            that the script goes on (for strategies whose processes run the script itself, like ``ddp``); the run
            is torn down at exit. Anything given that is not a callable taking an argument (``None`` from
            ``launch(train())``, a function of no parameters) is a :class:`core.ConfigurationError` that is also a
            ``TypeError``, as in Fabric.
        """
        self._ensure_attached()
        if self._phase != _NEW:
            raise CoreError(
                "launch() was already called on this Lite; a Lite runs once. Create a new Lite for another run."
            )
        if function is _NO_FUNCTION:
            function = None
        else:
            _check_launched_function(function)
        try:
            result = self._hooks.strategy_launch(function=_Task(self, function), args=args, kwargs=kwargs)
        finally:
            if function is not None:
                self._phase = _ENDED
        if function is None and self._phase != _RUNNING:
            raise CoreError(
                f"The strategy {self._active.config.strategy!r} ran the processes elsewhere, so this process "
                f"cannot go on after launch(); pass the training function: lite.launch(train)."
            )
        return result

    def _launch_implicitly(self) -> bool:
        """Fabric's rule: ``launch()`` is needed only where processes must be started. With one process, or with
        every process already started (torchrun, srun, mpirun, ``python -m core.run``), the first method that
        needs the run sets this process up as ``launch()`` would (the run is torn down at exit)."""
        self._ensure_attached()
        config = self._active.config
        external = bool(self._active.hook.environment_creates_processes_externally())
        if config.world_size != 1 and not external:
            return False
        self.launch()
        return self._phase == _RUNNING

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Override in a subclass with your training code; calling it launches the run.

        Calling it launches the run with the original ``run`` as the function; an override that calls
        ``super().run(...)`` runs the parent's code inside the same run.
        """
        raise CoreError(
            "Lite.run() is not defined: subclass Lite and override run(self, ...), or call lite.launch(function)."
        )

    def _require_running(self, method: str) -> None:
        if self._phase == _RUNNING:
            return
        if self._phase == _NEW:
            if self._launch_implicitly():
                return
            config = self._active.config
            raise CoreError(
                f"Lite.{method}() needs a launched run: strategy {config.strategy!r} starts "
                f"{config.world_size} processes, which only launch() can do. Call lite.launch(train) and use it "
                f"inside train(lite, ...), override run() in a Lite subclass, or call lite.launch() first."
            )
        raise CoreError(
            f"Lite.{method}() was called after the run ended (launch() returned and tore it down); "
            f"create a new Lite for another run."
        )

    # ---------------------------------------------------------------------------------------------
    # Where this process sits
    # ---------------------------------------------------------------------------------------------

    @property
    def active(self) -> ActiveSet:
        """The resolved active set: ``active.config`` names each plugin, ``active.hook`` calls any hook."""
        self._ensure_attached()
        return self._active

    @property
    def device(self) -> torch.device:
        """The ``torch.device`` this process computes on; known once the run is launched."""
        self._require_running("device")
        return cast(torch.device, self._active.device)  # set by _connect before the phase becomes running

    @property
    def world_size(self) -> int:
        """The number of processes in the run.

        The rank properties ask the environment, so they are known before :meth:`launch` too (in a process
        that a launcher started, they are that process's ranks).
        """
        return self.active.cluster.world_size

    @property
    def global_rank(self) -> int:
        """This process's rank among all processes."""
        return self.active.cluster.global_rank

    @property
    def local_rank(self) -> int:
        """This process's rank on its node."""
        return self.active.cluster.local_rank

    @property
    def node_rank(self) -> int:
        """The rank of this process's node."""
        return self.active.cluster.node_rank

    @property
    def is_global_zero(self) -> bool:
        """``global_rank == 0``."""
        return self.active.cluster.global_rank == 0

    # ---------------------------------------------------------------------------------------------
    # Setting up the objects of a loop
    # ---------------------------------------------------------------------------------------------

    @overload
    def setup(self, module: torch.nn.Module, *, move_to_device: bool = True) -> LiteModule: ...

    @overload
    def setup(
        self, module: torch.nn.Module, *optimizers: torch.optim.Optimizer, move_to_device: bool = True
    ) -> tuple[Any, ...]: ...

    def setup(
        self, module: torch.nn.Module, *optimizers: torch.optim.Optimizer, move_to_device: bool = True
    ) -> LiteModule | tuple[Any, ...]:
        """Set up a module and its optimizers; returns the module alone, or ``(module, *optimizers)``.

        A strategy that must see the module and its optimizers together (DeepSpeed) sets them up in one step
        through ``strategy_setup_module_and_optimizers``; any other sets them up one by one.
        """
        if not optimizers:
            return self._setup_module(module, move_to_device, "setup")
        self._require_running("setup")
        self._check_module(module, "setup")
        for optimizer in optimizers:
            self._check_optimizer(optimizer, "setup")
        compiled = _compiled(module)
        converted = self._convert_module(module if compiled is None else compiled, move_to_device)
        for optimizer in optimizers:
            self._point_at_converted(optimizer)
        hooks = self._hooks
        empty = _on_meta_device(converted)
        together = hooks.strategy_setup_module_and_optimizers(module=converted, optimizers=list(optimizers))
        if together is None:
            forward_module = hooks.strategy_setup_module(module=converted)
            self._materialized(converted, empty)
            lite_module = self._wrap_module(forward_module, converted, module if compiled is not None else None)
            wrapped = tuple(self._setup_optimizer(optimizer) for optimizer in optimizers)
            self._link(module, wrapped)
            return (lite_module, *wrapped)
        forward_module, prepared = together
        self._materialized(converted, empty)
        if len(prepared) != len(optimizers):
            raise BrokenPluginError(
                f"The strategy {self._active.config.strategy!r} returned {len(prepared)} optimizer(s) from "
                f"strategy_setup_module_and_optimizers for the {len(optimizers)} given; expected one per optimizer."
            )
        lite_module = self._wrap_module(forward_module, converted, module if compiled is not None else None)
        wrapped = tuple(wrap_optimizer(optimizer, hooks.strategy_optimizer_step) for optimizer in prepared)
        self._link(module, wrapped)
        return (lite_module, *wrapped)

    def _link(self, module: torch.nn.Module, optimizers: Sequence[LiteOptimizer] = ()) -> None:
        """Link a :class:`core.Module` to this Lite (its ``attach_to_lite``), so it logs, clips and steps through it."""
        attach = getattr(_compiled(module) or module, "attach_to_lite", None)
        if callable(attach):
            attach(self, optimizers)

    def setup_module(self, module: torch.nn.Module, move_to_device: bool = True) -> LiteModule:
        """Convert a module to the precision, move it to the device and let the strategy wrap it.

        In hooks: ``precision_convert_module``, then ``module.to(lite.device)`` (unless
        ``move_to_device=False``), then ``strategy_setup_module``. The returned ``LiteModule`` is an
        ``nn.Module`` whose forward converts the inputs to the precision (``precision_convert_input``), runs the
        strategy's module under ``precision_autocast()`` and converts the output back
        (``precision_convert_output``). Its ``state_dict()`` / ``load_state_dict()`` are the original module's,
        with its own keys (no ``_forward_module.`` or ``module.`` prefix), so checkpoints load with and without
        ``Lite``. Attributes the wrapper does not have are read from and written to the original module;
        ``.module`` is the original module. A module is set up once: passing a returned ``LiteModule`` again is a
        :class:`core.ConfigurationError`.
        """
        return self._setup_module(module, move_to_device, "setup_module")

    def _setup_module(self, module: torch.nn.Module, move_to_device: bool, method: str) -> LiteModule:
        self._require_running(method)
        self._check_module(module, method)
        compiled = _compiled(module)
        converted = self._convert_module(module if compiled is None else compiled, move_to_device)
        empty = _on_meta_device(converted)
        forward_module = self._hooks.strategy_setup_module(module=converted)
        self._materialized(converted, empty)
        lite_module = self._wrap_module(forward_module, converted, module if compiled is not None else None)
        self._link(module)
        return lite_module

    @staticmethod
    def _check_module(module: object, method: str) -> None:
        if isinstance(_uncompiled(module), LiteModule):
            raise ConfigurationError(
                f"A model should be passed only once to the `{method}` method: this module was already set up by "
                f"Lite.setup / setup_module. Set each module up once and keep using the module it returned."
            )
        if not isinstance(module, torch.nn.Module):
            raise _ArgumentTypeError(f"{method}() takes a torch.nn.Module, got {type(module).__qualname__}.")

    def _convert_module(self, module: torch.nn.Module, move_to_device: bool) -> torch.nn.Module:
        """The precision's conversion of the user's model (once per model and precision), moved to the device."""
        target, attribute = _conversion_target(module)
        alias = str(self._active.config.precision)
        if _CONVERTED.get(target) != alias:
            before = dict(target.named_parameters())
            result = self._hooks.precision_convert_module(module=target)
            if not isinstance(result, torch.nn.Module):
                raise BrokenPluginError(
                    f"The precision {alias!r} returned {result!r} from precision_convert_module; expected a "
                    f"torch.nn.Module (the converted model)."
                )
            self._precision_replaced.record(before, result)
            _CONVERTED[result] = alias
            if attribute is not None and result is not target:
                setattr(module, attribute, result)
            target = result
        converted = module if attribute is not None else target
        if move_to_device and not _on_meta_device(converted):
            converted = converted.to(self.device)
        return converted

    def _point_at_converted(self, optimizer: torch.optim.Optimizer) -> None:
        """Point an optimizer made before setup at the parameters the precision's conversion put in their place."""
        replaced = self._precision_replaced
        if any(
            replaced.replacement(parameter) is not parameter
            for group in optimizer.param_groups
            for parameter in group["params"]
        ):
            replaced.point_optimizer(optimizer, f"precision={self._active.config.precision}")

    def _materialized(self, converted: torch.nn.Module, was_empty: bool) -> None:
        """Tell the precision that the strategy gave an empty-init module its values (its ``materialized`` hook)."""
        if was_empty and not _on_meta_device(converted):
            self._hooks.precision_module_materialized(module=_conversion_target(converted)[0])

    def _wrap_module(
        self, forward_module: torch.nn.Module, converted: torch.nn.Module, compiled_by: torch.nn.Module | None = None
    ) -> LiteModule:
        strategy_module = forward_module
        if compiled_by is not None:
            # torch.compile'd by the user (``compiled_by`` is their wrapper): the strategy wrapped the plain module,
            # and the wrapped one is compiled now (after DDP wrapping / FSDP sharding, as torch recommends), with the
            # user's compile settings, by the strategy where it knows better (FSDP2 per block, DeepSpeed through its
            # engine). State dicts stay the plain module's; the strategy's hooks keep receiving the module its setup
            # returned (a DeepSpeed engine finds itself).
            recompile = _recompiler(compiled_by)
            compiled = self._hooks.strategy_compile(
                module=forward_module, compile_in_place=_in_place_compiler(recompile)
            )
            forward_module = cast(torch.nn.Module, recompile(forward_module) if compiled is None else compiled)
        self._module_count += 1
        # backward() without model= refers to the one module, as long as there is only one.
        self._single_module = strategy_module if self._module_count == 1 else None
        return LiteModule(forward_module, converted, self._hooks, strategy_module, self._forwards)

    @overload
    def setup_optimizers(self, optimizer: torch.optim.Optimizer, /) -> LiteOptimizer: ...

    @overload
    def setup_optimizers(
        self, first: torch.optim.Optimizer, second: torch.optim.Optimizer, /, *more: torch.optim.Optimizer
    ) -> tuple[LiteOptimizer, ...]: ...

    def setup_optimizers(self, *optimizers: torch.optim.Optimizer) -> LiteOptimizer | tuple[LiteOptimizer, ...]:
        """Let the strategy set up each optimizer; returns one optimizer, or a tuple of several.

        Each goes through ``strategy_setup_optimizer``. A ``LiteOptimizer`` is an instance of the optimizer's
        own class (``isinstance(optimizer, torch.optim.Adam)`` holds, learning-rate schedulers accept it);
        ``step(closure=None)`` goes through ``strategy_optimizer_step`` (by default the precision's
        ``precision_optimizer_step``, by default ``optimizer.step()``); ``zero_grad``, ``param_groups``,
        ``state_dict``, ``load_state_dict`` and every other attribute are the wrapped optimizer's.
        ``.optimizer`` is the optimizer the strategy returned.

        Optimizers may be created from the module's parameters before or after :meth:`setup_module`: the
        ``-true`` and mixed precisions convert parameters in place, and where a precision replaces them (float8,
        4-bit layers) ``Lite`` points every optimizer passed to :meth:`setup` or ``setup_optimizers`` at the
        replacements, as it does after a sharding strategy (an optimizer that already stepped is refused).
        """
        self._require_running("setup_optimizers")
        if not optimizers:
            raise ConfigurationError(
                "`setup_optimizers` requires at least one optimizer as input: lite.setup_optimizers(optimizer)."
            )
        for optimizer in optimizers:
            self._check_optimizer(optimizer, "setup_optimizers")
        wrapped = tuple(self._setup_optimizer(optimizer) for optimizer in optimizers)
        return wrapped[0] if len(wrapped) == 1 else wrapped

    @staticmethod
    def _check_optimizer(optimizer: object, method: str) -> None:
        if isinstance(optimizer, LiteOptimizer):
            raise ConfigurationError(
                f"An optimizer should be passed only once to the `{method}` method: this optimizer was already set "
                f"up by Lite.setup / setup_optimizers. Set it up once and keep using the optimizer it returned."
            )
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise _ArgumentTypeError(
                f"{method}() takes torch.optim.Optimizer objects, got {type(optimizer).__qualname__}."
            )

    def _setup_optimizer(self, optimizer: torch.optim.Optimizer) -> LiteOptimizer:
        self._point_at_converted(optimizer)
        prepared = self._hooks.strategy_setup_optimizer(optimizer=optimizer)
        return wrap_optimizer(prepared, self._hooks.strategy_optimizer_step)

    @overload
    def setup_dataloaders(
        self, dataloader: DataLoader[Any], /, *, use_distributed_sampler: bool = True, move_to_device: bool = True
    ) -> LiteDataLoader: ...

    @overload
    def setup_dataloaders(
        self,
        first: DataLoader[Any],
        second: DataLoader[Any],
        /,
        *more: DataLoader[Any],
        use_distributed_sampler: bool = True,
        move_to_device: bool = True,
    ) -> list[LiteDataLoader]: ...

    def setup_dataloaders(
        self, *dataloaders: DataLoader[Any], use_distributed_sampler: bool = True, move_to_device: bool = True
    ) -> LiteDataLoader | list[LiteDataLoader]:
        """Split each DataLoader across processes where the strategy asks for it and move its batches.

        When the strategy returns sampler arguments (``strategy_distributed_sampler_kwargs``, for example
        ``{"num_replicas": 2, "rank": 1}``), the loader is rebuilt with a ``DistributedSampler`` (``shuffle``
        from whether it had a ``RandomSampler``, its ``drop_last``, the global seed) and every other argument
        kept (batch size, workers, ``collate_fn``, ``pin_memory``, ``worker_init_fn``, ``generator``,
        ``timeout``, ``prefetch_factor``, ``persistent_workers``, ...). Each new iteration calls
        ``sampler.set_epoch(n)`` on any sampler that has it, so every epoch is shuffled anew. With
        ``move_to_device``, every batch (tensors inside tuples, lists, dicts, named tuples) arrives on
        :attr:`device`.

        Loaders over an ``IterableDataset`` and loaders already using a ``DistributedSampler`` are kept as they
        are. A custom sampler with a length (``SubsetRandomSampler``, ``WeightedRandomSampler``, your own) is
        kept and split as Fabric splits it: each epoch its indices are drawn once on every process and each
        process takes every ``world_size``-th of them from its rank on, so every process must draw the same
        order (seed the program before building the sampler, or give it a generator seeded alike). A custom
        batch sampler, a sampler without a length, or a ``DataLoader`` subclass cannot be rebuilt safely and
        raises :class:`core.ConfigurationError`; pass ``use_distributed_sampler=False`` and split the data
        yourself. After ``seed_everything(..., workers=True)``, loaders with workers and no ``worker_init_fn``
        get one that seeds each worker from the seed, the worker id and the global rank.

        :param use_distributed_sampler: Replace the sampler with a ``DistributedSampler`` when the strategy
            returns sampler arguments, keeping ``shuffle`` and ``drop_last``.
        :param move_to_device: Move every batch to :attr:`device`.
        :return: One loader, or a list for several.
        """
        self._require_running("setup_dataloaders")
        if not dataloaders:
            raise ConfigurationError(
                "`setup_dataloaders` requires at least one dataloader as input: lite.setup_dataloaders(loader)."
            )
        for loader in dataloaders:
            self._check_dataloader(loader)
        sampler_kwargs = self._hooks.strategy_distributed_sampler_kwargs() if use_distributed_sampler else None
        device = self.device if move_to_device else None
        move = self._mover() if move_to_device else None
        prepared = [self._prepare_dataloader(loader, sampler_kwargs, move, device) for loader in dataloaders]
        return prepared[0] if len(prepared) == 1 else prepared

    @staticmethod
    def _check_dataloader(loader: object) -> None:
        if isinstance(loader, LiteDataLoader):
            raise ConfigurationError(
                "A dataloader should be passed only once to the `setup_dataloaders` method: this DataLoader was "
                "already set up by Lite.setup_dataloaders. Set it up once and keep using the loader it returned."
            )
        if not isinstance(loader, DataLoader):
            raise _ArgumentTypeError(
                f"setup_dataloaders() takes torch.utils.data.DataLoader objects, got {type(loader).__qualname__}: "
                f"Only PyTorch DataLoader are currently supported in `setup_dataloaders`. Wrap the data in one: "
                f"DataLoader(data, batch_size=...)."
            )

    def _prepare_dataloader(
        self,
        loader: DataLoader[Any],
        sampler_kwargs: dict[str, Any] | None,
        move: Callable[[Any], Any] | None,
        device: torch.device | None,
    ) -> LiteDataLoader:
        if sampler_kwargs is not None:
            loader = with_distributed_sampler(loader, sampler_kwargs)
        if seeds_workers() and loader.num_workers > 0 and loader.worker_init_fn is None:
            loader.worker_init_fn = functools.partial(worker_init_function, rank=self.global_rank)
        return LiteDataLoader(loader, move, device)

    def _mover(self) -> Callable[[Any], Any]:
        # Picklable (no local function): a program may torch.save a set-up DataLoader, as litgpt's state does.
        return functools.partial(apply_to_tensors, function=operator.methodcaller("to", self.device))

    # ---------------------------------------------------------------------------------------------
    # The training step
    # ---------------------------------------------------------------------------------------------

    def backward(self, tensor: torch.Tensor, *args: Any, model: torch.nn.Module | None = None, **kwargs: Any) -> None:
        """Replace ``loss.backward()``: the strategy and precision run it (scaling, engines).

        ``strategy_backward`` runs it (by default ``precision_backward``, by default ``tensor.backward()``).
        Arguments for ``tensor.backward`` (``retain_graph=``) are refused with a
        :class:`core.ConfigurationError`: the hook contract does not carry them.

        On several processes, a backward with no forward of a set-up module since the previous backward is
        refused with a :class:`core.CoreError`: the loss came from a module :meth:`setup` never saw (or from
        its ``.module``), so no strategy would synchronise its gradients and the processes' weights would drift
        apart. A frozen module beside the set-up one (a teacher, a target network) is fine: what counts is that
        a set-up module ran. On one process any loss is allowed, as in Fabric.

        :param model: The set-up module the loss came from; without it, the one set-up module when there is
            exactly one. Needed only when several are set up and the strategy cares (DeepSpeed).
        """
        if self._phase != _RUNNING:
            self._require_running("backward")
        if args or kwargs:
            raise ConfigurationError(
                f"Lite.backward() passes no arguments to tensor.backward() (got {args or ''}{kwargs or ''}): the "
                f"strategy_backward hook takes only the loss and the module. Call backward(loss) instead."
            )
        if model is None:
            module = self._single_module
        else:
            model = _uncompiled(model)
            module = model.__dict__["_strategy_module"] if isinstance(model, LiteModule) else model
        if not self._forwards[0] and self.world_size > 1:
            self._refuse_backward_without_set_up_forward()
        self._forwards[0] = 0
        self._hooks.strategy_backward(tensor=tensor, module=module)

    def _refuse_backward_without_set_up_forward(self) -> None:
        strategy = self.active.config.strategy
        raise CoreError(
            f"backward() of a loss that no set-up module computed: no module returned by setup() / setup_module() "
            f"ran forward since the last backward. Under strategy={strategy!r} with {self.world_size} processes only "
            f"set-up modules have their gradients synchronised (the processes' weights would drift apart). Compute the "
            f"loss with the module setup() returned (model = lite.setup(model); loss = model(batch)...), not with the "
            f"module you passed to it or its .module."
        )

    def clip_gradients(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        clip_val: float | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        error_if_nonfinite: bool = True,
    ) -> torch.Tensor | None:
        """Clip the gradients of ``module`` by value or by norm, after the precision unscaled them.

        A strategy that keeps the gradients itself clips them (``strategy_clip_gradients``): DeepSpeed clips the
        norm inside its step, to its config's ``gradient_clipping``, and refuses anything else with the fix.
        Otherwise ``precision_unscale_gradients(optimizer)`` runs first (a scaled loss has scaled gradients), then
        ``torch.nn.utils.clip_grad_norm_`` (with ``max_norm``) or ``clip_grad_value_`` (with ``clip_val``) over
        the module's parameters. Exactly one of the two limits must be given.

        :return: The total norm before clipping when clipping by norm, ``None`` when clipping by value or when the
            strategy clips inside its step (the norm is not known before it).
        """
        self._require_running("clip_gradients")
        if (clip_val is None) == (max_norm is None):
            raise ConfigurationError(
                f"clip_gradients() needs exactly one of clip_val= (clip each value) or max_norm= (clip the norm); "
                f"got clip_val={clip_val!r}, max_norm={max_norm!r}."
            )
        inner = optimizer.optimizer if isinstance(optimizer, LiteOptimizer) else optimizer
        module = _uncompiled(module)
        handled = self._hooks.strategy_clip_gradients(
            module=module.__dict__["_strategy_module"] if isinstance(module, LiteModule) else module,
            optimizer=inner, max_norm=max_norm, clip_val=clip_val, norm_type=norm_type,
            error_if_nonfinite=error_if_nonfinite,
        )
        if handled is not None:
            return handled if isinstance(handled, torch.Tensor) else None
        self._hooks.precision_unscale_gradients(optimizer=inner)
        parameters = [parameter for parameter in module.parameters() if parameter.grad is not None]
        if max_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(
                parameters, max_norm, norm_type=norm_type, error_if_nonfinite=error_if_nonfinite
            )
            # Sharded parameters (fsdp, model_parallel) give the global norm as a replicated DTensor: a plain tensor
            # is what a step logs or compares (full_tensor() costs no communication for a replicated one).
            return _whole(norm)
        torch.nn.utils.clip_grad_value_(parameters, clip_val)  # type: ignore[arg-type]
        return None

    def autocast(self) -> AbstractContextManager[None]:
        """The precision's context for code outside a set-up module's forward (a loss on raw tensors).

        It is ``precision_autocast``: for example a loss computed on raw tensors under ``16-mixed``.
        """
        self._require_running("autocast")
        context: AbstractContextManager[None] = self._hooks.precision_autocast()
        return context

    def to_device(self, obj: T) -> T:
        """Move a module, a tensor or a nested collection of tensors to :attr:`device`.

        A module is moved in place and returned.
        """
        self._require_running("to_device")
        if isinstance(obj, torch.nn.Module):
            return obj.to(self.device)
        return self._mover()(obj)

    def no_backward_sync(self, module: torch.nn.Module, enabled: bool = True) -> AbstractContextManager[Any]:
        """A context in which ``backward`` accumulates gradients locally (skip the all-reduce while accumulating).

        It is ``strategy_block_backward_sync`` (DDP's ``no_sync()``), for gradient accumulation. ``module``
        must be one returned by :meth:`setup`.

        :param enabled: ``False`` gives a null context, for ``no_backward_sync(model, enabled=not last)``.
        """
        self._require_running("no_backward_sync")
        module = _uncompiled(module)
        if not isinstance(module, LiteModule):  # a TypeError too, as Fabric's
            raise _ArgumentTypeError(
                f"no_backward_sync() takes a module returned by Lite.setup / setup_module, got "
                f"{type(module).__qualname__}; set the module up first."
            )
        if not enabled:
            return nullcontext()
        strategy_module = module.__dict__["_strategy_module"]
        context: AbstractContextManager[Any] = self._hooks.strategy_block_backward_sync(module=strategy_module)
        return context

    @contextmanager
    def init_module(self, empty_init: bool | None = None) -> Generator[None, None, None]:
        """A context in which new modules are created on the device, in the precision's dtype.

        The device comes from ``strategy_module_init_context``, the default dtype from
        ``precision_tensor_init_context``: ``with lite.init_module(): model = Net()``.

        :param empty_init: Skip initialising parameters (they will be loaded), as Lightning's Fabric does: on
            one device and under ddp ``torch.nn.init`` does nothing inside the block (uninitialised memory, no
            random number drawn); a sharding strategy (fsdp, deepspeed ZeRO-3) creates the module on the meta
            device and allocates each rank's shard at :meth:`setup`.
        """
        self._require_running("init_module")
        with ExitStack() as stack:
            strategy_context = self._hooks.strategy_module_init_context(empty_init=bool(empty_init))
            stack.enter_context(strategy_context if strategy_context is not None else nullcontext())
            stack.enter_context(self._hooks.precision_tensor_init_context())
            yield

    # ---------------------------------------------------------------------------------------------
    # Collectives
    # ---------------------------------------------------------------------------------------------

    def _as_tensors(self, data: Any) -> Any:
        """Numbers become tensors on the device, so that plain metrics can be reduced like tensors."""
        if isinstance(data, torch.Tensor):
            return data
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return torch.tensor(data, device=self.device)
        if isinstance(data, Mapping):
            return type(data)({key: self._as_tensors(value) for key, value in data.items()})  # type: ignore[call-arg]
        if isinstance(data, tuple) and hasattr(data, "_fields"):
            return type(data)(*(self._as_tensors(value) for value in data))
        if isinstance(data, (list, tuple)):
            return type(data)(self._as_tensors(value) for value in data)
        return data

    def all_reduce(self, data: Any, group: Any | None = None, reduce_op: str = "mean") -> Any:
        """Reduce a tensor, a number or every tensor of a collection across processes.

        Each tensor goes through ``strategy_reduce``. Numbers become tensors on the device first; other values
        pass through.

        :param reduce_op: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``.
        :return: The same structure, reduced; numbers come back as tensors.
        """
        self._require_running("all_reduce")
        reduce = self._hooks.strategy_reduce

        def one(tensor: torch.Tensor) -> torch.Tensor:
            result: torch.Tensor = reduce(tensor=tensor, group=group, reduce_op=reduce_op)
            return result

        return apply_to_tensors(self._as_tensors(data), one)

    def all_gather(self, data: Any, group: Any | None = None, sync_grads: bool = False) -> Any:
        """Gather a tensor, a number or every tensor of a collection from every process.

        Each tensor goes through ``strategy_all_gather``.

        :param sync_grads: Let gradients flow back through the gathered tensors.

        :return: The same structure with each tensor of shape ``(world_size, *shape)``.
        """
        self._require_running("all_gather")
        gather = self._hooks.strategy_all_gather

        def one(tensor: torch.Tensor) -> torch.Tensor:
            result: torch.Tensor = gather(tensor=tensor.contiguous(), group=group, sync_grads=sync_grads)
            return result

        return apply_to_tensors(self._as_tensors(data), one)

    def broadcast(self, obj: T, src: int = 0) -> T:
        """Send a picklable object from global rank ``src`` to every process and return it (``strategy_broadcast``)."""
        self._require_running("broadcast")
        result: T = self._hooks.strategy_broadcast(obj=obj, src=src)
        return result

    def barrier(self, name: str | None = None) -> None:
        """Wait until every process gets here (``strategy_barrier``)."""
        self._require_running("barrier")
        self._hooks.strategy_barrier(name=name)

    @contextmanager
    def rank_zero_first(self, local: bool = False) -> Generator[None, None, None]:
        """Run the block on rank 0 first, then on the others (download or preprocess once).

        :param local: Rank 0 of each node goes first instead of global rank 0.
        """
        self._require_running("rank_zero_first")
        rank = self.local_rank if local else self.global_rank
        if rank > 0:
            self.barrier("rank_zero_first")
        yield
        if rank == 0:
            self.barrier("rank_zero_first")

    # ---------------------------------------------------------------------------------------------
    # Checkpoints
    # ---------------------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], state: Mapping[str, Any], filter: Filter | None = None) -> None:
        """Save modules, optimizers (their state dicts) and plain values; the strategy picks the writing ranks.

        ``state`` maps names to modules, optimizers, anything with ``state_dict`` / ``load_state_dict``
        (schedulers), and plain values. Stateful objects are replaced by their ``state_dict()`` (a set-up module
        by its original module's), a precision with state (a gradient scaler) adds it under ``"core/precision"``,
        and ``strategy_save_checkpoint(path=, state=)`` decides which ranks write (``single_device`` and
        ``ddp``: global rank 0 writes through the checkpoint_io, then every rank waits). The built-in ``torch``
        checkpoint_io writes atomically: a temporary file in the same directory, fsynced, renamed over the
        target, so a process killed mid-save leaves the previous checkpoint intact.

        :param filter: For some keys of ``state``, a function ``(name, value) -> bool`` choosing which
            entries of that object's state dict to keep: ``filter={"model": lambda name, value: ...}``.
        """
        self._require_running("save")
        _check_save_filter(state, filter)
        where = os.fspath(path)
        if self._hooks.strategy_save_state(path=where, state=_unwrapped(state), filter=filter):
            return  # a strategy that owns the objects (DeepSpeed's engine) wrote them itself
        state = {key: _uncompiled(value) for key, value in state.items()}  # a module compiled after setup: its own
        checkpoint = to_checkpoint(state, filter, self._hooks.precision_state_dict(), self._module_state_to_save)
        self._hooks.strategy_save_checkpoint(path=where, state=checkpoint)

    def load(
        self,
        path: str | os.PathLike[str],
        state: dict[str, Any] | None = None,
        strict: bool = True,
        *,
        weights_only: bool = True,
    ) -> dict[str, Any]:
        """Load a checkpoint written by :meth:`save`.

        ``strategy_load_checkpoint(path=, weights_only=)`` reads the file (onto the CPU). With ``state``,
        modules, optimizers and other stateful objects in it are restored in place and plain values in
        ``state`` are replaced by the saved ones. A file refused under ``weights_only=True`` raises a
        :class:`core.CheckpointError` that says nothing from the file was executed: a checkpoint crafted to
        run code when unpickled runs nothing.

        :param state: Objects to restore in place (modules, optimizers) and plain values to replace; ``None``
            returns the whole checkpoint untouched.
        :param strict: Every key of ``state`` must be in the checkpoint (a :class:`core.CheckpointError` lists
            the missing ones), and module keys must match.
        :param weights_only: Refuse a file holding anything but tensors and plain containers, running nothing
            from it. ``False`` unpickles arbitrary objects: only for files you trust.
        :return: The entries of the checkpoint that ``state`` did not ask for.
        """
        self._require_running("load")
        where = os.fspath(path)
        if state is not None:
            objects = _unwrapped(state)
            remaining = self._hooks.strategy_load_state(
                path=where, state=objects, strict=strict, weights_only=weights_only
            )
            if remaining is not None:  # the strategy restored its objects; plain values come back through objects
                state.update((key, value) for key, value in objects.items() if not is_stateful(value))
                return dict(remaining)
        checkpoint = self._hooks.strategy_load_checkpoint(path=where, weights_only=weights_only)
        if not isinstance(checkpoint, dict):
            raise CheckpointError(
                f"The checkpoint {where!r} holds a {type(checkpoint).__name__}, not the dict Lite.save writes."
            )
        if state is None:
            return checkpoint
        precision_state = checkpoint.pop(PRECISION_KEY, None)
        if precision_state is not None:
            self._hooks.precision_load_state_dict(state=precision_state)
        view = {key: _uncompiled(value) for key, value in state.items()}  # a module compiled after setup: its own
        remaining = restore(view, checkpoint, strict, where, self._module_state_to_load)
        state.update((key, value) for key, value in view.items() if value is not _uncompiled(state[key]))
        return remaining

    def _module_state_to_save(self, value: object, saved: dict[str, Any]) -> dict[str, Any]:
        model = _user_model(value)
        if model is None:
            return saved
        converted = self._hooks.precision_module_state_to_save(module=model, state=saved)
        return saved if converted is None else dict(converted)

    def _module_state_to_load(self, value: object, saved: Any) -> Any:
        model = _user_model(value)
        if model is None or not isinstance(saved, Mapping):
            return saved
        converted = self._hooks.precision_module_state_to_load(module=model, state=dict(saved))
        return saved if converted is None else dict(converted)

    def remove_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Delete a checkpoint written by :meth:`save` (a file, a directory of shards, a URL) via the checkpoint_io.

        It goes through ``checkpoint_io_remove(path=)``, so it deletes whatever the checkpoint_io wrote. Global
        rank 0 deletes; the other ranks return at once. A path that does not exist is not an error. The Trainer
        rotates its checkpoints with it.
        """
        self._require_running("remove_checkpoint")
        if self.is_global_zero:
            self._active.hook.checkpoint_io_remove(path=os.fspath(path))

    # ---------------------------------------------------------------------------------------------
    # Utilities
    # ---------------------------------------------------------------------------------------------

    @staticmethod
    def seed_everything(seed: int | None = None, workers: bool | None = None, verbose: bool = True) -> int:
        """Seed ``random``, ``numpy`` and ``torch``; see :func:`core.seed_everything`.

        A static method: ``Lite.seed_everything(42)`` works without an instance. It returns the seed and exports
        it as ``CORE_GLOBAL_SEED``, so that spawned processes and distributed samplers use it; ``seed=None``
        takes ``CORE_GLOBAL_SEED`` from the environment, or 0 with a warning. The seed must be in
        ``0..2**32 - 1``.

        :param workers: Seed DataLoader workers too (loaders set up afterwards seed each worker from the seed,
            its id and the global rank); ``None`` means ``True`` here, as in Lightning Fabric, while the function
            :func:`core.seed_everything` has Lightning's default, ``workers=False``.
        """
        return _seed_everything(seed, workers=True if workers is None else workers, verbose=verbose)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only."""
        if self.is_global_zero:
            builtins.print(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Lite {self._phase}\n{self.active.config.summary()}>"

    # ---------------------------------------------------------------------------------------------
    # Callbacks and loggers (Fabric's names)
    # ---------------------------------------------------------------------------------------------

    @property
    def accelerator(self) -> object:
        """The accelerator plugin object of this run (``lite.active.accelerator``)."""
        return self.active.accelerator

    @property
    def strategy(self) -> object:
        """The strategy plugin object of this run (``lite.active.strategy``)."""
        return self.active.strategy

    @property
    def device_mesh(self) -> DeviceMesh | None:
        """The run's ``DeviceMesh`` when its strategy lays the processes out on one, else ``None``.

        A strategy that builds a mesh (``model_parallel``, ``pipeline``) exposes it as its ``device_mesh``
        attribute once the process group exists; Lite hands it on, as Lightning's ``LightningModule.device_mesh``
        does. Read it inside the launched function (outside a run the strategy has no mesh yet and raises).
        """
        return cast("DeviceMesh | None", getattr(self.active.strategy, "device_mesh", None))

    @property
    def callbacks(self) -> list[Any]:
        """The objects given as ``callbacks=``, in order."""
        return list(self._callbacks)

    @property
    def loggers(self) -> list[Any]:
        """The :class:`core.loggers.Logger` objects given as ``loggers=``."""
        return list(self._loggers)

    @property
    def logger(self) -> Any:
        """The first logger, or ``None``."""
        return self._loggers[0] if self._loggers else None

    def call(self, hook_name: str, *args: Any, **kwargs: Any) -> None:
        """Call ``hook_name(*args, **kwargs)`` on every callback that has such a method, in order (Fabric's ``call``).

        Callbacks without the method are skipped. An attribute of that name that is not callable is skipped with a
        :class:`core.CoreWarning` naming it. Each callback receives only the keyword arguments its method's signature
        names (all of them when it takes ``**kwargs``), so callbacks with different signatures share one hook name.
        """
        for callback in self._callbacks:
            method = getattr(callback, hook_name, None)
            if method is None:
                continue
            if not callable(method):
                warnings.warn(
                    f"Skipping the callback `{type(callback).__name__}.{hook_name}` because it is not callable: "
                    f"Lite.call({hook_name!r}) calls methods; rename the attribute or make it a method.",
                    CoreWarning,
                    stacklevel=2,
                )
                continue
            method(*args, **_keywords_taken(method, kwargs))

    def log(self, name: str, value: Any, step: int | None = None) -> None:
        """Send one metric to every logger, from global rank 0 (tensors become Python numbers); see :meth:`log_dict`."""
        self.log_dict({name: value}, step=step)

    def log_dict(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Send metrics to every logger as ``logger.log_metrics(metrics=..., step=step)``, from global rank 0.

        One-element tensors (in nested collections too) become Python numbers; a tensor of several elements is a
        :class:`core.ConfigurationError`. ``step=None`` is passed on as it is, as Fabric does: the logger numbers
        the entry (core's ``CSVLogger`` adds a row).
        """
        values = apply_to_tensors(dict(metrics), _scalar)
        if not self.is_global_zero:
            return
        for logger in self._loggers:
            logger.log_metrics(metrics=values, step=step)

    def load_raw(self, path: str | os.PathLike[str], obj: torch.nn.Module | torch.optim.Optimizer,
                 strict: bool = True, *, weights_only: bool | None = None) -> None:
        """Load a plain ``state_dict`` file (``torch.save(model.state_dict(), path)``) into ``obj``.

        For a file that is not a :meth:`save` checkpoint; ``obj`` is a set-up module or optimizer, and keys and
        shapes are checked first, as for :meth:`load`.

        :param weights_only: ``None`` or ``True`` (the default): refuse a file holding anything but tensors and plain
            containers; ``False`` unpickles anything (only for a file from a trusted source), as in :meth:`load`.
        """
        self._require_running("load_raw")
        where = os.fspath(path)
        obj = _uncompiled(obj)
        target = obj.__dict__.get("_original_module", obj) if isinstance(obj, LiteModule) else obj
        if isinstance(target, LiteOptimizer):
            target = target.optimizer
        loaded = self._hooks.strategy_load_checkpoint(path=where, weights_only=weights_only is not False)
        restore({"state": target}, {"state": loaded}, strict, where)

    @contextmanager
    def init_tensor(self) -> Generator[None, None, None]:
        """A context in which new tensors are created on this process's device, in the precision's dtype."""
        self._require_running("init_tensor")
        with self.active.device or torch.device("cpu"), self._hooks.precision_tensor_init_context():
            yield

