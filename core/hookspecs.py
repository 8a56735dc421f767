"""The hook contract between the core runtime and its plugins.

This file is the reference for plugin authors. A plugin is an object whose methods are marked with
``@core.hookimpl`` and named after the hooks below; the resolver registers exactly one accelerator,
strategy, precision, environment and checkpoint_io object, plus any extensions, into a per-run
``pluggy.PluginManager``, and the runtime calls the hooks on it.

Every hook of a kind is ``firstresult``: the active object of that kind answers it. Extensions
(entry-point group ``core.extensions``) wrap hooks of any kind with ``@core.hookimpl(wrapper=True)``.
An implementation may accept any subset of a hook's parameters, by name.

Traits
------

Besides the hooks, a plugin object declares *traits*: plain attributes that the resolver, the CLI and the
conformance kit read through :func:`core.traits_of` (the one place that reads them; the typed record is
:class:`core.PluginTraits` and the table :data:`core.TRAITS`). Every trait except ``kind`` is optional.
A misspelt trait (``priorty = 5``), a trait of another kind (``max_processes`` on an accelerator) or a
value of the wrong type is a :class:`core.BrokenPluginError` when the plugin registers, naming the plugin,
the attribute and the valid names; it never silently falls back to the default.

- ``kind``: All kinds. One of ``accelerator``, ``strategy``, ``precision``, ``environment``, ``checkpoint_io``,
  ``extension``; required for a plugin object passed in code.
- ``name``: All kinds. Canonical alias, used in messages and compatibility rules (``"cuda"`` for the ``gpu``
  alias too). Default: the alias it was selected by.
- ``supports``: All kinds. A :class:`core.Supports` record: which aliases of the other kinds it works with.
  Default: any combination.
- ``contract_version``: All kinds. The :data:`CONTRACT_VERSION` the plugin was written for (an int >= 1);
  ``python -m core.plugins --check`` reports a plugin written for a newer contract than the core's.
- ``unavailable_reason``: All kinds. ``None``, a string, or a method returning one: why the plugin cannot run on
  this machine (a missing library, no device). Shown by ``--check`` and in errors.
- ``limitation``: All kinds. ``None``, a string, or a method returning one: what the plugin lacks on this
  machine although it runs (float8 emulated where no GPU computes it). Shown by ``--check`` beside ``usable``.
- ``priority``: Accelerators and environments (an int, default 0): the order in which ``auto`` asks candidates,
  highest first.
- ``auto_strategies``: Accelerators: the strategies ``strategy="auto"`` picks on them, a mapping with keys among
  ``"single"``, ``"multi"`` and ``"interactive"`` (defaults ``single_device``, ``ddp``, ``ddp_notebook``).
- ``max_processes``: Strategies: the most processes it can run (``1`` for ``single_device``; ``None``, the
  default, for no limit).
- ``default_checkpoint_io``: Strategies: the checkpoint_io alias used when the user names none (default
  ``"torch"``).
- ``process_per_device``: Strategies (a bool, default ``True``): whether it runs one process per device; ``dp``
  drives all devices from one process and says ``False``.
- ``writes_shards``: Checkpoint_io (a bool, default ``False``): ``True`` when every rank may call
  ``checkpoint_io_save`` with its shards of one state (``distributed``); sharding strategies require it for
  sharded checkpoints.

One attribute is read during a run rather than at registration, and its name is reserved like a trait's:

- ``pending``: Checkpoint_io with background writes: how many writes are in flight (``async``); resumable
  checkpoints write their completeness marker once it is 0.

How the contract evolves
------------------------

The compatibility policy, for plugin authors:

- The contract has a version, :data:`CONTRACT_VERSION`, a whole number raised with every release of core
  that adds or deprecates a hook. It grows by adding hooks; a hook never changes meaning. A hook may gain
  a parameter, since implementations accept any subset of parameters by name; it never loses one.
- A hook to be removed is first deprecated: its spec is declared with ``warn_on_impl=deprecated(...)``,
  so every run that registers an implementation warns with :class:`core.CoreDeprecationWarning`, and
  ``python -m core.plugins --check`` lists the plugins that implement it. It is removed no earlier than the
  next breaking release of core (the next minor release while core is 0.x, the next major one after).
- A plugin that implements a hook this core does not define is refused when it registers
  (:class:`core.BrokenPluginError`) and shown by ``--check``: it was written for a newer core, or misspells
  a hook. Plugins declare the core versions they work with as ``core>=X,<Y`` in their dependencies, and the
  installed core refuses a plugin whose range excludes it.
- A plugin object may declare the contract it was written for (``contract_version = N``); where N is newer than
  the installed core's, ``--check`` says so and tells the user to upgrade core.
- Traits and the toolkit are part of the contract: the trait names of :data:`core.TRAITS` and the names exported
  by ``core.toolkit`` and ``core.testing`` grow by addition, never change meaning, and are deprecated (with a
  :class:`core.CoreDeprecationWarning`) before a breaking release removes them. Names starting with an
  underscore, and ``core.builtin``, are not covered; import-linter's ``public_api`` contract keeps plugins off
  them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final

from core._errors import CoreDeprecationWarning
from core._markers import hookspec

if TYPE_CHECKING:
    import torch

    from core._records import ClusterInfo
    from core.registry._active import ActiveSet
    from core.registry._devices import DeviceRequest

CONTRACT_VERSION: Final = 1
"""The version of this contract; raised with every release of core that adds or deprecates a hook."""


def deprecated(hook: str, since: int, instead: str) -> CoreDeprecationWarning:
    """The warning to declare a hook deprecated: ``@hookspec(firstresult=True, warn_on_impl=deprecated(...))``.

    :param hook: The deprecated hook's name.
    :param since: The contract version that deprecated it.
    :param instead: What implementers should do instead (usually the hook that replaces it).
    """
    return CoreDeprecationWarning(
        f"The hook {hook!r} is deprecated since contract version {since} and will be removed in the next "
        f"breaking release of core; {instead}."
    )


# -------------------------------------------------------------------------------------------------
# Every active plugin
# -------------------------------------------------------------------------------------------------


@hookspec
def core_attach(active: ActiveSet) -> None:
    """Hand the resolved active set to every plugin of this run.

    :param active: The run's active set: its ``config``, the other plugin objects, ``hook`` to call
        hooks of other kinds, and, once connected, ``cluster`` and ``device``.

    Implemented by any plugin that needs to reach the others (a strategy asking the environment for
    ranks, a precision reading the accelerator). Called once, on every active plugin, right after
    resolution and before any hook called after it (the resolver itself asks the accelerators'
    ``accelerator_parse_devices`` and the environments' detection hooks first). All implementations run; the
    result is ignored.
    """


# -------------------------------------------------------------------------------------------------
# accelerator: the device family this process computes on
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def accelerator_is_available() -> bool | None:
    """Whether this accelerator can be used in this process.

    :return: ``True`` if at least one device of this family is usable here, ``False`` otherwise.

    Implemented by accelerators. Called by ``accelerator="auto"`` on each installed candidate in
    priority order, and by ``python -m core.plugins --check``. Must be cheap and must not initialise a
    device context that would break a later fork. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def accelerator_device_count() -> int | None:
    """How many devices of this family this process can see.

    :return: The number of visible devices (``os.cpu_count()``-independent ``1`` for the CPU).

    Implemented by accelerators. Called to expand ``devices=-1`` and ``devices="auto"``.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def accelerator_parse_devices(devices: DeviceRequest) -> list[int] | None:
    """Turn the user's parsed ``devices`` request into the device indices used on each node.

    :param devices: The request, already checked for syntax: a count, explicit indices, ``-1`` (all)
        or ``auto``.
    :return: The sorted device indices, one process per index. For the CPU, ``[0, 1]`` means two
        processes.

    Implemented by accelerators. Raise :class:`core.ConfigurationError` naming the request and what
    is visible when it cannot be met. Called once during resolution. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def accelerator_setup_device(local_rank: int, device_ids: Sequence[int]) -> torch.device | None:
    """Connect this process to its device and return it.

    :param local_rank: The process's rank on its node.
    :param device_ids: The indices returned by :func:`accelerator_parse_devices`.
    :return: The ``torch.device`` this process computes on.

    Implemented by accelerators (``torch.cuda.set_device`` happens here). Called once per process,
    after the processes exist and before the process group is initialised.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def accelerator_process_group_backend() -> str | None:
    """The ``torch.distributed`` backend that suits this accelerator.

    :return: For example ``"gloo"`` for the CPU, ``"nccl"`` for CUDA.

    Implemented by accelerators. Called by strategies that start a process group without an explicit
    ``process_group_backend``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def accelerator_teardown() -> None:
    """Release what :func:`accelerator_setup_device` acquired.

    Implemented by accelerators that hold state (caches, streams). Called once at the end of a run on
    every rank, after the strategy's teardown. Stops at first non-None result.
    """


# -------------------------------------------------------------------------------------------------
# environment: the cluster or launcher this process runs under
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def environment_detect() -> object | None:
    """Claim this process for an environment if its markers are present.

    :return: The plugin object itself when the process runs under this environment (``SLURM_NTASKS``
        is set, ``TORCHELASTIC_RUN_ID`` is set, ...), ``None`` otherwise.

    Implemented by environments. Asked of every installed environment in priority order (torchelastic
    before slurm, since torchrun may run inside a SLURM job; ``local`` last) when the user did not pick
    one. Called during resolution.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def environment_creates_processes_externally() -> bool | None:
    """Whether the environment has already started one process per device.

    :return: ``True`` under torchrun, ``srun`` or ``mpirun``: the strategy must not launch any.

    Implemented by environments. Called by strategies before launching. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def environment_cluster_info(devices_per_node: int, num_nodes: int) -> ClusterInfo | None:
    """The ranks and the rendezvous address of this process.

    :param devices_per_node: Processes per node the run asked for.
    :param num_nodes: Nodes the run asked for.
    :return: A :class:`core.ClusterInfo` with world size, global / local / node rank, main address
        and main port.

    Implemented by environments. Called by the runtime once the processes exist, and again after a
    launch in each child. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def environment_validate_settings(devices_per_node: int, num_nodes: int) -> None:
    """Check the requested ``devices`` x ``num_nodes`` against what the scheduler provided.

    :param devices_per_node: Processes per node the run asked for.
    :param num_nodes: Nodes the run asked for.

    Implemented by environments that know the allocation. Raise :class:`core.ConfigurationError`
    naming both numbers on a mismatch. Called during resolution. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def environment_processes_per_node() -> int | None:
    """How many processes the launcher started on this node, for a run that left ``devices="auto"``.

    :return: The launcher's process count per node (``horovodrun -np 2`` on one host: 2), or ``None`` to
        let the accelerator choose its default.

    Implemented by environments whose launcher fixes the process count (optional). Called during
    resolution only when the user passed ``devices="auto"``; the accelerator then parses that count as if
    the user had written ``devices=<count>``, so a script started by the launcher needs no ``devices=``.
    Added in contract 1 before its first release. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def environment_teardown() -> None:
    """Undo what the environment changed in this process (environment variables it set).

    Implemented by environments with state. Called once at the end of a run.
    Stops at first non-None result.
    """


# -------------------------------------------------------------------------------------------------
# strategy: how processes, devices and the model are laid out
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def strategy_launch(
    function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Any:
    """Run ``function(*args, **kwargs)`` in every process of the run and return rank 0's result.

    :param function: The user's entry point (``Lite.run`` or the function given to ``Lite.launch``).
    :param args: Its positional arguments.
    :param kwargs: Its keyword arguments.
    :return: What ``function`` returned on global rank 0 (in the launching process where processes
        are started by the strategy).

    Implemented by strategies. Single-process strategies call the function; DDP-family strategies
    start the missing processes unless the environment creates them externally. Called once per
    ``Lite.launch``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_setup_environment() -> None:
    """Initialise what the processes share: the process group, with the accelerator's backend.

    Implemented by strategies. Called once in every process after :func:`accelerator_setup_device`
    and before any module is set up. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_configure_ddp(module: torch.nn.Module, device_ids: Sequence[int] | None) -> torch.nn.Module:
    """Wrap a module for data-parallel training.

    :param module: The module, already on its device and converted by the precision.
    :param device_ids: The device indices to pass to ``DistributedDataParallel`` (``None`` on CPU).
    :return: The wrapped module (``DistributedDataParallel`` or a subclass).

    Implemented by DDP-family strategies; extensions wrap it with ``@hookimpl(wrapper=True)`` to
    register communication hooks on the result. Called by the strategy's own
    :func:`strategy_setup_module`. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_setup_module(module: torch.nn.Module) -> torch.nn.Module:
    """Prepare a module for training under this strategy.

    :param module: The user's module, already moved to the device and converted by the precision.
    :return: The module to train (wrapped, sharded or unchanged).

    Implemented by strategies. Called once per module by ``Lite.setup`` / ``Lite.setup_module``.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_compile(
    module: torch.nn.Module, compile_in_place: Callable[[torch.nn.Module], None]
) -> torch.nn.Module | None:
    """Compile a set-up module the way this strategy's engine compiles best (the user passed a compiled model).

    :param module: What :func:`strategy_setup_module` (or :func:`strategy_setup_module_and_optimizers`) returned
        for a module the user had passed through ``torch.compile``.
    :param compile_in_place: ``compile_in_place(submodule)`` compiles a module in place with the settings of the
        user's ``torch.compile`` call (its backend, mode, options, ``fullgraph`` and ``dynamic``), as
        ``submodule.compile(...)`` with those arguments would. Use it rather than ``torch.nn.Module.compile()``,
        which would compile with torch's defaults. Torch runs the ``forward`` of its own layers (``nn.Linear``,
        ``nn.LayerNorm``, ...) eagerly when compiled alone this way; compile blocks whose ``forward`` is the
        user's.
    :return: The module to run the forward pass through, compiled (the same object when compiled in place);
        ``None`` to let Lite compile the whole module, with the user's settings as well.

    Implemented by strategies that compile parts of the module (FSDP2: each sharded block, as torch
    recommends) or through their engine (DeepSpeed's ``engine.compile()``, which leaves the engine's own hooks
    eager); optional. Called once per compiled module by ``Lite.setup`` / ``Lite.setup_module``, after the module
    was set up. Added in contract 1 before its first release (``compile_in_place`` too); an implementation may
    leave ``compile_in_place`` out of its parameters. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_setup_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Prepare an optimizer for this strategy.

    :param optimizer: An optimizer over the parameters of an already set-up module.
    :return: The optimizer to step (the same object where nothing changes).

    Implemented by strategies. Called once per optimizer by ``Lite.setup``.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_setup_module_and_optimizers(
    module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]
) -> tuple[torch.nn.Module, list[Any]] | None:
    """Prepare a module and its optimizers in one step, for strategies that must see both at once.

    :param module: The user's module, already moved to the device and converted by the precision.
    :param optimizers: The optimizers over its parameters, in the order given to ``Lite.setup``.
    :return: The module to train and the optimizers to step, one per optimizer given; ``None`` to let
        :func:`strategy_setup_module` and :func:`strategy_setup_optimizer` prepare them one by one.

    Implemented by strategies whose engine takes the model and the optimizer together (DeepSpeed's
    ``deepspeed.initialize``); optional. Called once by ``Lite.setup(module, *optimizers)`` when it is given
    optimizers, instead of the separate hooks. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_backward(tensor: torch.Tensor, module: torch.nn.Module | None) -> bool | None:
    """Run the backward pass of ``tensor``.

    :param tensor: The loss.
    :param module: The set-up module the loss came from, when known.
    :return: ``True`` once handled.

    Implemented by strategies; most call :func:`precision_backward` through ``active.hook`` and run
    ``tensor.backward()`` themselves when it returns ``None``: the hook is optional, and an
    implementation returns ``True``. Strategies that own an engine (DeepSpeed) call the engine. Called
    on every ``Lite.backward``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_optimizer_step(optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
    """Step an optimizer.

    :param optimizer: The optimizer as returned by :func:`strategy_setup_optimizer`.
    :param kwargs: Keyword arguments for ``optimizer.step`` (a ``closure``).
    :return: What the step returned.

    Implemented by strategies that must act around the step (optional: without it the run's precision steps
    the optimizer). A strategy that implements it (to synchronise first, or to mark a step) steps through
    ``core.toolkit.strategies.optimizer_step(self.active, optimizer, **kwargs)``, which runs
    :func:`precision_optimizer_step` where the precision implements it and ``optimizer.step()``
    otherwise, exactly once. Calling ``active.hook.precision_optimizer_step`` itself never steps with a
    precision that lacks the hook, and stepping again when it returns ``None`` steps twice with the
    built-in precisions (they return what ``optimizer.step()`` returned). Called on every optimizer
    step taken through a set-up optimizer. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_reduce(tensor: torch.Tensor, group: Any | None, reduce_op: str) -> torch.Tensor:
    """Reduce a tensor across processes.

    :param tensor: A tensor of any shape on this process's device.
    :param group: A process group, or ``None`` for all processes.
    :param reduce_op: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``.
    :return: The reduced tensor, the same on every process (the input itself on one process).

    Implemented by strategies. Called by ``Lite.all_reduce``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_all_gather(tensor: torch.Tensor, group: Any | None, sync_grads: bool) -> torch.Tensor:
    """Gather a tensor from every process.

    :param tensor: A tensor of the same shape on every process.
    :param group: A process group, or ``None`` for all processes.
    :param sync_grads: Whether gradients flow back through the gather.
    :return: A tensor of shape ``(world_size, *tensor.shape)``.

    Implemented by strategies. Called by ``Lite.all_gather``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_broadcast(obj: Any, src: int) -> Any:
    """Send a picklable object from one process to all.

    :param obj: The object (any picklable value; tensors included) on ``src``; ignored elsewhere.
    :param src: The global rank that sends.
    :return: The object as ``src`` holds it, on every process.

    Implemented by strategies. Called by ``Lite.broadcast``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_barrier(name: str | None) -> None:
    """Wait until every process reaches this point.

    :param name: A label for error messages and debugging.

    Implemented by strategies. Called by ``Lite.barrier`` and around checkpoint writes.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_block_backward_sync(module: torch.nn.Module) -> AbstractContextManager[None]:
    """A context in which backward passes accumulate gradients locally without synchronising.

    :param module: A module returned by :func:`strategy_setup_module`.
    :return: A context manager (``module.no_sync()`` for DDP, a null context otherwise).

    Implemented by strategies. Called by ``Lite.no_backward_sync`` for gradient accumulation.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_clip_gradients(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    max_norm: float | None,
    clip_val: float | None,
    norm_type: float,
    error_if_nonfinite: bool,
) -> torch.Tensor | bool | None:
    """Clip the gradients of ``module``, for a strategy that keeps them where ``torch.nn.utils`` cannot see them.

    :param module: A module returned by :func:`strategy_setup_module` (or the engine of
        :func:`strategy_setup_module_and_optimizers`).
    :param optimizer: The optimizer the gradients are for, as the strategy set it up.
    :param max_norm: Clip the total norm of the gradients to this (or ``None``: clip by value).
    :param clip_val: Clip every gradient value into ``[-clip_val, clip_val]`` (or ``None``: clip by norm).
    :param norm_type: The p of the p-norm, when clipping by norm.
    :param error_if_nonfinite: Raise when the total norm is nan or inf, as ``torch.nn.utils.clip_grad_norm_``.
    :return: ``None`` to let the runtime clip (``precision_unscale_gradients``, then ``torch.nn.utils`` over the
        module's parameters); once handled, the total norm before clipping (by norm) or ``True`` (by value, or
        when the strategy's own step clips and the norm is not known yet).

    Implemented by strategies whose gradients are not the parameters' ``.grad`` (an engine that keeps them in
    its own partitions: DeepSpeed), or that clip differently; optional. An implementation that cannot clip as
    asked raises :class:`core.ConfigurationError` with what to do instead, never clips nothing silently. Called
    by ``Lite.clip_gradients`` (so by the Trainer's ``gradient_clip_val``) before the precision unscales.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_distributed_sampler_kwargs() -> dict[str, Any] | None:
    """The arguments of a ``DistributedSampler`` for this process.

    :return: ``{"num_replicas": ..., "rank": ...}``, or ``None`` when the data must not be split.

    Implemented by strategies. Called by ``Lite.setup_dataloaders``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_save_checkpoint(path: str, state: dict[str, Any]) -> None:
    """Write a checkpoint: decide which ranks write what, then call the checkpoint_io.

    :param path: Where to write.
    :param state: The state with modules and optimizers already turned into state dicts.

    Implemented by strategies (DDP: rank 0 writes, then a barrier; FSDP: every rank writes its
    shard). Called by ``Lite.save``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_load_checkpoint(path: str, weights_only: bool) -> dict[str, Any]:
    """Read a checkpoint written by :func:`strategy_save_checkpoint`.

    :param path: Where to read.
    :param weights_only: Refuse to unpickle anything but tensors and plain containers.
    :return: The full state as written.

    Implemented by strategies. Called by ``Lite.load`` on every rank. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_save_state(
    path: str, state: Mapping[str, Any], filter: Mapping[str, Callable[[str, Any], bool]] | None
) -> bool | None:
    """Write a ``Lite.save`` state whose modules and optimizers are still objects.

    :param path: Where to write.
    :param state: The state as given to ``Lite.save``, with Lite's wrappers removed: modules and optimizers
        as the strategy's setup hooks returned them, other values as given.
    :param filter: ``Lite.save``'s ``filter``: for some keys, a function ``(name, value) -> bool`` choosing the
        entries of that object's state dict to keep.
    :return: ``True`` once written; ``None`` to let Lite turn the objects into state dicts and call
        :func:`strategy_save_checkpoint`.

    Implemented by strategies that own the training state in an engine (DeepSpeed), where each rank writes
    its shard through the engine; optional. Called by ``Lite.save`` on every rank, before anything else.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_load_state(path: str, state: dict[str, Any], strict: bool, weights_only: bool) -> dict[str, Any] | None:
    """Restore a checkpoint written by :func:`strategy_save_state` into the objects of a ``Lite.load`` state.

    :param path: Where to read.
    :param state: The state as given to ``Lite.load``, with Lite's wrappers removed. Modules and optimizers are
        restored in place; plain values are replaced in this dict by the saved ones.
    :param strict: Every key of ``state`` must be in the checkpoint, and module keys must match.
    :param weights_only: Refuse to unpickle anything but tensors, plain containers and records the strategy
        vouches for.
    :return: The entries of the checkpoint that ``state`` did not ask for; ``None`` to let Lite read the
        checkpoint with :func:`strategy_load_checkpoint` and restore it.

    Implemented by strategies that implement :func:`strategy_save_state`; optional. Called by ``Lite.load`` on
    every rank when it is given a state to restore. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_module_init_context(empty_init: bool) -> AbstractContextManager[None] | None:
    """A context in which modules are created for this strategy.

    :param empty_init: Whether parameters may be left uninitialised (they will be loaded).
    :return: A context manager (a device context, a meta-device context for sharded models).

    Implemented by strategies. Called by ``Lite.init_module``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def strategy_teardown() -> None:
    """Release what the strategy holds: wait for the others, then destroy the process group.

    Implemented by strategies. Called once at the end of a run on every rank, before the accelerator's
    and environment's teardown. Stops at first non-None result.
    """


# -------------------------------------------------------------------------------------------------
# precision: numeric formats of parameters, activations and gradients
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def precision_convert_module(module: torch.nn.Module) -> torch.nn.Module:
    """Convert a module's parameters and buffers to this precision, or its layers to this precision's layers.

    :param module: The user's model, before the strategy shards, wraps or compiles it: never the Trainer's
        step wrapper (``Lite`` passes the model a wrapper names in ``core_wrapped_attribute``), so the names of
        ``module.named_modules()`` are the user's own, without a ``module.`` prefix. On the meta device when it
        was created with ``init_module(empty_init=True)`` under a sharding strategy: a conversion that needs the
        values does that part in :func:`precision_module_materialized`.
    :return: The converted module. A structural precision (one that replaces layers, like float8 or 4-bit) changes
        the module in place and returns it, so references the user holds stay valid.

    Implemented by precisions. Called exactly once per module and precision alias in a process by ``Lite.setup``
    / ``setup_module``: a module set up again (the Trainer's ``fit`` then ``test``) is not converted twice.
    Parameters the conversion replaces are replaced in the optimizers given to the same ``Lite.setup`` call
    (and in those set up later with ``setup_optimizers``) by ``Lite``, as for a sharding strategy; a precision
    never re-points optimizers itself. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_module_materialized(module: torch.nn.Module) -> None:
    """Finish a conversion that needed real values, once a strategy gave an empty-init module its weights.

    :param module: The user's model as converted by :func:`precision_convert_module`, now holding real (possibly
        sharded) tensors.

    Implemented by precisions that need weight values (quantization); optional. Called by ``Lite.setup`` right
    after the strategy set up a module that was on the meta device (``init_module(empty_init=True)``), before any
    checkpoint is loaded into it. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_module_state_to_save(module: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any] | None:
    """Turn a converted module's state dict into the plain form written to a checkpoint.

    :param module: The user's model, as converted.
    :param state: ``module.state_dict()`` as the strategy gives it (whole or sharded tensors).
    :return: The state to write: the keys and dtypes the unconverted model would have (so that a checkpoint of a
        converted run loads into an unconverted one), or ``None`` to write ``state`` as it is.

    Implemented by structural precisions; optional. Called by ``Lite.save`` for every module of the state, on every
    rank, before the strategy writes. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_module_state_to_load(module: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any] | None:
    """Turn a saved (plain) state dict into what the converted module's ``load_state_dict`` takes.

    :param module: The user's model, as converted.
    :param state: The entry of the checkpoint for this module: plain (saved by any run) or already converted.
    :return: A state dict with the converted module's keys and shapes, or ``None`` to load ``state`` as it is.

    Implemented by structural precisions; optional. Called by ``Lite.load`` for every module of the state,
    before Lite checks the keys and shapes against the module, so a plain checkpoint loads into a converted
    run. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_sharded_parameter_dtype() -> torch.dtype | None:
    """The dtype a sharding strategy gathers parameters in for computation (FSDP's ``MixedPrecisionPolicy``).

    :return: A floating dtype (``torch.bfloat16`` for a precision that computes under bf16 autocast), or
        ``None`` for the parameters' own dtype.

    Implemented by precisions whose computation dtype differs from the stored parameters'; optional. Called by
    sharding strategies (fsdp) when they build their policy: gradients are then reduced in float32. A precision
    that implements nothing keeps the parameters' dtype (float32 for float32 weights), never silently another.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_tensor_init_context() -> AbstractContextManager[None]:
    """A context in which new tensors get this precision's default dtype.

    :return: A context manager (``torch.set_default_dtype`` inside, restored on exit).

    Implemented by precisions. Called by ``Lite.init_module``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_autocast() -> AbstractContextManager[None]:
    """A context for the forward pass.

    :return: ``torch.autocast`` for mixed precisions, a null context otherwise.

    Implemented by precisions. Called by ``Lite.autocast`` and around every forward of a set-up module.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_convert_input(data: Any) -> Any:
    """Convert the floating tensors of a batch to this precision.

    :param data: A tensor or a nested collection of tensors.
    :return: The converted data (unchanged for mixed precisions and ``32-true``).

    Implemented by precisions. Called on the inputs of a set-up module's forward.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_convert_output(data: Any) -> Any:
    """Convert the floating tensors of a module's output back to the default dtype.

    :param data: What the forward returned.
    :return: The converted data.

    Implemented by precisions. Called on the outputs of a set-up module's forward.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_backward(tensor: torch.Tensor, module: torch.nn.Module | None) -> bool | None:
    """Run ``tensor.backward()``, scaled where the precision scales losses.

    :param tensor: The loss.
    :param module: The module the loss came from, when known.
    :return: ``True`` once done.

    Implemented by precisions. Called by strategies from :func:`strategy_backward`.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_unscale_gradients(optimizer: torch.optim.Optimizer) -> None:
    """Bring the gradients of ``optimizer``'s parameters back to their true scale before clipping.

    :param optimizer: A set-up optimizer.

    Implemented by precisions that scale losses. Called by ``Lite.clip_gradients``.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_optimizer_step(optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
    """Step an optimizer, skipping the step where a scaler found inf or nan gradients.

    :param optimizer: The optimizer to step.
    :param kwargs: Keyword arguments for ``optimizer.step``.
    :return: What the step returned.

    Implemented by precisions; optional. Called once per step: by ``Lite`` when the strategy has no
    :func:`strategy_optimizer_step`, and by strategies through
    ``core.toolkit.strategies.optimizer_step``. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_state_dict() -> dict[str, Any]:
    """The precision's own state (a gradient scaler's scale and growth tracker).

    :return: A state dict, empty for stateless precisions.

    Implemented by precisions. Called when a checkpoint is saved. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def precision_load_state_dict(state: dict[str, Any]) -> None:
    """Restore the precision's own state from :func:`precision_state_dict`.

    :param state: The saved state.

    Implemented by precisions. Called when a checkpoint is loaded. Stops at first non-None result.
    """


# -------------------------------------------------------------------------------------------------
# checkpoint_io: how bytes reach storage
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def checkpoint_io_save(checkpoint: dict[str, Any], path: str, storage_options: Any | None) -> None:
    """Write one checkpoint file, atomically: the old file at ``path`` survives a crash mid-write.

    :param checkpoint: Tensors and plain containers.
    :param path: Where to write.
    :param storage_options: Format-specific options, ``None`` by default.

    Implemented by checkpoint_io plugins. Called by strategies on the ranks that write.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def checkpoint_io_load(path: str, map_location: Any | None, weights_only: bool) -> dict[str, Any]:
    """Read one checkpoint.

    :param path: Where to read.
    :param map_location: Where tensors go (``"cpu"``, a device), as for ``torch.load``.
    :param weights_only: When ``True``, refuse anything but tensors and plain containers, running no
        code from the file.
    :return: The checkpoint.

    Implemented by checkpoint_io plugins. Called by strategies. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def checkpoint_io_remove(path: str) -> None:
    """Delete a checkpoint.

    :param path: What to delete.

    Implemented by checkpoint_io plugins. Called when old checkpoints are rotated out.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def checkpoint_io_teardown() -> None:
    """Finish pending writes and release resources; raise any error a background write met.

    Implemented by checkpoint_io plugins with background work. Called once at the end of a run.
    Stops at first non-None result.
    """


# -------------------------------------------------------------------------------------------------
# What each kind must implement; every other hook of the kind is optional and has a default
# -------------------------------------------------------------------------------------------------

REQUIRED_HOOKS: Final[dict[str, tuple[str, ...]]] = {
    "accelerator": ("accelerator_is_available", "accelerator_parse_devices", "accelerator_setup_device"),
    "strategy": (
        "strategy_launch",
        "strategy_setup_module",
        "strategy_reduce",
        "strategy_all_gather",
        "strategy_broadcast",
        "strategy_barrier",
    ),
    "precision": (),
    "environment": ("environment_cluster_info", "environment_creates_processes_externally"),
    "checkpoint_io": ("checkpoint_io_save", "checkpoint_io_load"),
    "extension": (),
}
"""Hooks a plugin of each kind must implement; registration refuses a plugin that lacks one."""
