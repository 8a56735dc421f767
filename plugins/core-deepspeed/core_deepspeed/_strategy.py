"""``DeepSpeedStrategy``: ZeRO stages 1-3, with optional CPU offload, through DeepSpeed's engine.

Processes, the process group and the collectives are the core's (this class extends
:class:`core.toolkit.strategies.ParallelStrategy`); what differs is that DeepSpeed owns the training state.
``Lite.setup(model, optimizer)`` hands both to ``deepspeed.initialize``; the engine runs the backward pass
(reducing and partitioning gradients), the optimizer step, gradient accumulation, clipping and 16-bit loss
scaling, and writes its own sharded checkpoints.

At teardown, while the process group is alive, the modules are given back as they came in, holding the trained
weights (:mod:`core_deepspeed._release`); once it is destroyed, DeepSpeed forgets the groups it derived from it.
Another run in the same processes (``Trainer.test`` after ``Trainer.fit``) then starts like the first.
"""

from __future__ import annotations

import copy
import importlib
import os
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
import torch.distributed as dist

from core import CheckpointError, ConfigurationError, PluginUnavailableError, Supports, hookimpl
from core.toolkit.checkpoint import restore_state as restore
from core.toolkit.checkpoint import to_checkpoint
from core.toolkit.strategies import (
    OptimizerWrapper,
    ParallelOptions,
    ParallelStrategy,
    StatefulGroup,
    StepRunner,
    failing,
)

from . import _checkpoint, _import, _release
from ._config import (
    FLOAT16_PRECISIONS,
    LIGHTNING_KEYWORDS,
    ZeroSettings,
    build_config,
    keyword_config,
    merged,
    read_config,
    zero_stage,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from core import ActiveSet

_HINT = (
    "DeepSpeed runs 32-true, 16-mixed, 16-true, bf16-mixed and bf16-true; on TPUs use strategy='xla', on an MPS "
    "machine strategy='single_device'."
)


def _float16_supported_on_cpu() -> bool:
    # The same probe as DeepSpeed's CPU accelerator (is_fp16_supported), without importing deepspeed.
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except Exception:  # an older torch without the probe: DeepSpeed then says unsupported as well
        return False


def _registered(group: Any) -> bool:
    """Whether ``group`` belongs to the live process group (it does not once its run has destroyed it)."""
    if group is None:
        return True
    try:
        dist.get_process_group_ranks(group)
    except (KeyError, ValueError, RuntimeError):
        return False
    return True


def _forget_process_groups(deepspeed: ModuleType) -> None:
    """Drop DeepSpeed's cached groups (its world clone, data-parallel groups) after the world group was destroyed.

    DeepSpeed caches them per process and would hand the dead ones to the next run's engine ("Group ... is not
    registered"). ``deepspeed.comm.destroy_process_group`` does the same when it destroys the group itself.
    """
    groups = importlib.import_module(f"{deepspeed.__name__}.utils.groups")
    release = getattr(groups, "_release_process_group_references", None)
    if release is not None:
        release(None)
        return
    for name in ("_WORLD_GROUP", "_ZERO_PARAM_INTRA_PARALLEL_GROUP", "_DATA_PARALLEL_GROUP", "_MODEL_PARALLEL_GROUP"):
        if hasattr(groups, name):
            setattr(groups, name, None)


class _Finished:
    """What a run's ZeRO optimizer held when its engine was destroyed: this rank's ``state_dict()`` of it, and
    the engine's step counters."""

    def __init__(self, engine: Any) -> None:
        self.state: dict[str, Any] = engine.optimizer.state_dict()
        self.counters = {name: getattr(engine, name) for name in ("global_steps", "global_samples", "skipped_steps")}


# Each optimizer a run gave back (the user's, see _release.restore_optimizer) -> the ZeRO state it ended with. The
# next set-up of that optimizer, in a later run of the same processes (``trainer.save_checkpoint`` after ``fit``,
# or another ``fit``), continues from it: the optimizer keeps its state across runs, as under ddp.
_FINISHED: weakref.WeakKeyDictionary[torch.optim.Optimizer, _Finished] = weakref.WeakKeyDictionary()


class DeepSpeedStrategy(ParallelStrategy):
    """Sharded data parallelism with DeepSpeed ZeRO: optimizer states (stage 1), gradients (2), parameters (3).

    :param stage: The ZeRO stage, 1, 2 or 3.
    :param offload_optimizer: Keep optimizer states (and the optimizer step) on the CPU.
    :param offload_parameters: Keep parameters on the CPU between uses (stage 3 only).
    :param config: A DeepSpeed config, as a dict or the path of a JSON file. It is merged on top of what the
        keywords and the run's precision give, key by key: an explicit config wins.
    :param gradient_clipping: Clip the global gradient norm to this value inside DeepSpeed's step.
    :param options: The options of every process-group strategy: ``process_group_backend``, ``timeout``,
        ``start_method``, ``name``, ``activation_checkpointing_policy`` (applied to the module before
        ``deepspeed.initialize``: :class:`core.toolkit.strategies.ParallelOptions`). Lightning's keywords that are one
        entry of DeepSpeed's config (``overlap_comm``, ``reduce_bucket_size``, ``loss_scale``,
        ``partition_activations``, and the rest of its ZeRO, offload, aio and fp16 keywords) become that entry, under
        ``config=``; the others Lightning takes are refused by name with what to write instead.
    """

    message_prefix: ClassVar[str] = "core-deepspeed"
    supports: ClassVar[Supports] = Supports(
        never={"accelerator": {"tpu", "mps"}, "precision": {"64-true"}},
        hint=_HINT,
    )
    refused_arguments: ClassVar[Mapping[str, str]] = {
        **ParallelStrategy.refused_arguments,
        "zero_optimization": "the ZeRO section is built from stage=, offload_optimizer= and offload_parameters=; "
                             "more of it goes in config={'zero_optimization': {...}}",
        "remote_device": "parameters created empty under stage 3 are partitioned as they are made "
                         "(lite.init_module(empty_init=True)); offload them with offload_parameters=True",
        "logging_level": "DeepSpeed logs through its own logger: logging.getLogger('DeepSpeed').setLevel(...)",
        "load_full_weights": "load a single-file state dict with torch.load and module.load_state_dict before "
                             "lite.setup; Lite.load reads the sharded checkpoints DeepSpeed writes",
        "exclude_frozen_parameters": "every parameter is saved; freeze-aware checkpoints are not supported here",
    }

    def __init__(
        self,
        stage: int = 2,
        offload_optimizer: bool = False,
        offload_parameters: bool = False,
        config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        gradient_clipping: float | None = None,
        **options: Unpack[ParallelOptions],
    ) -> None:
        offload = "_offload" if offload_optimizer or offload_parameters else ""
        options["name"] = options.get("name") or f"deepspeed_stage_{stage}{offload}"
        keywords = {key: options.pop(key) for key in list(options) if key in LIGHTNING_KEYWORDS}  # type: ignore[misc]
        super().__init__(**options)
        self.settings = ZeroSettings(stage, offload_optimizer, offload_parameters, gradient_clipping)
        self.user_config = merged(keyword_config(keywords), read_config(config))
        self._config: dict[str, Any] | None = None
        self._deepspeed: ModuleType | None = None
        self._engines: list[Any] = []
        self._set_up: list[_release.Snapshot] = []  # each module tree as it was before deepspeed.initialize
        self._given: list[tuple[Any, _release.OptimizerRecord]] = []  # each engine's optimizer, as it came in

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.alias!r}, {self.settings}, config={self.user_config!r})"

    def __getstate__(self) -> dict[str, Any]:
        # The options travel; deepspeed (a module) and the engines of a run stay behind.
        state = super().__getstate__()
        for key in ("_config", "_deepspeed", "_engines", "_set_up", "_given"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._config = None
        self._deepspeed = None
        self._engines = []
        self._set_up = []
        self._given = []

    def unavailable_reason(self) -> str | None:
        """Why this strategy cannot run here (``python -m core.plugins --check``), or ``None``."""
        return _import.unavailable_reason()

    @property
    def config(self) -> dict[str, Any]:
        """The complete DeepSpeed config of the run (keywords, precision, then ``config=``)."""
        if self._config is None:
            raise ConfigurationError(f"The strategy {self.alias!r} has no config before it is resolved into a run.")
        return self._config

    @property
    def deepspeed(self) -> ModuleType:
        if self._deepspeed is None:
            raise ConfigurationError(
                f"The strategy {self.alias!r} is used before strategy_setup_environment imported deepspeed; the "
                f"runtime calls it in every process first (use Lite.launch / Lite.run)."
            )
        return self._deepspeed

    # -- resolution and processes ----------------------------------------------------------------------

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        super().core_attach(active)
        self._config = build_config(self.settings, self.user_config, active.config.precision, self.alias)

    def _check_float16_here(self) -> None:
        """Refuse float16 on a CPU that DeepSpeed cannot run it on, before any process group exists.

        A property of this machine's CPU, not of the (strategy, precision) pair, so it is checked when the run
        starts on the hardware, not declared: on other CPUs, and on GPUs, the same pair runs.
        """
        precision, accelerator = self.active.config.precision, self.active.config.accelerator
        if accelerator == "cpu" and precision in FLOAT16_PRECISIONS and not _float16_supported_on_cpu():
            raise PluginUnavailableError(
                f"The accelerator 'cpu' cannot run here in float16 under DeepSpeed (strategy {self.alias!r}, "
                f"precision={precision!r}): DeepSpeed's CPU accelerator computes in float16 only on CPUs with "
                f"AVX512-FP16 or AMX-FP16, which this one lacks. Use precision='bf16-mixed' or precision='32-true'."
            )

    @hookimpl
    def strategy_setup_environment(self) -> None:
        self._check_float16_here()
        super().strategy_setup_environment()
        deepspeed = _import.import_deepspeed(self.active.config.accelerator)
        # DeepSpeed adopts the process group that the base class's setup has just started.
        deepspeed.init_distributed(dist_backend=dist.get_backend(), auto_mpi_discovery=False, verbose=False)
        self._deepspeed = deepspeed

    @hookimpl
    def strategy_teardown(self) -> None:
        try:
            values: dict[int, torch.Tensor] = {}
            if dist.is_initialized() and not failing():
                with self.communicator.guard("gathering the trained parameters at teardown (DeepSpeed)"):
                    values = {key: value for recorded in self._set_up
                              for key, value in _release.gather(recorded, self.deepspeed).items()}
                for engine, optimizer in self._given:
                    _FINISHED[optimizer.optimizer] = _Finished(engine)
            for engine in self._engines:
                engine.destroy()  # removes DeepSpeed's hooks and the optimizer's references to the parameters
            for recorded in self._set_up:
                _release.restore(recorded, values)
            for _, optimizer in self._given:
                _release.restore_optimizer(optimizer)
            super().strategy_teardown()
        finally:
            self._engines.clear()
            self._set_up.clear()
            self._given.clear()
            if self._deepspeed is not None and not dist.is_initialized():
                _forget_process_groups(self._deepspeed)

    # -- model and optimizer ---------------------------------------------------------------------------

    def _initialize(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> Any:
        config = copy.deepcopy(self.config)  # DeepSpeed keeps and edits the dict it is given
        if optimizer is None and zero_stage(config) < 3:
            # Stages 1 and 2 shard optimizer states and gradients, which a module without an optimizer does not
            # have (and DeepSpeed refuses them without one): the engine is a plain data-parallel one.
            config["zero_optimization"] = {"stage": 0}
        self._refuse_ended_partitions(module)
        self.checkpoint_activations(module)  # before the engine's hooks: keys stay, the engine is unaware of it
        recorded = _release.snapshot(module)
        given = None if optimizer is None else _release.snapshot_optimizer(optimizer)
        finished = None if optimizer is None else _FINISHED.pop(optimizer, None)
        try:
            engine, _, _, _ = self.deepspeed.initialize(model=module, optimizer=optimizer, config=config)
        except (AssertionError, ValueError) as error:
            raise ConfigurationError(
                f"DeepSpeed refused the configuration of the strategy {self.alias!r}: {error}. The config was {config}."
            ) from error
        self._engines.append(engine)
        self._set_up.append(recorded)
        if given is not None:
            self._given.append((engine, given))
        if finished is not None:
            self._continue(engine, finished)
        return engine

    def _continue(self, engine: Any, finished: _Finished) -> None:
        """Load the ZeRO state an earlier run's engine ended with into ``engine``, as its ``load_checkpoint`` would
        (the fp32 master partitions included, so that training continues bitwise). Collective: every rank sets up."""
        group = engine.optimizer.dp_process_group
        states: list[Any] = [None] * dist.get_world_size(group)
        with self.communicator.guard("gathering the optimizer state of the previous run (DeepSpeed)"):
            dist.all_gather_object(states, finished.state, group=group)
            engine.optimizer.load_state_dict(
                state_dict_list=states, load_optimizer_states=True,
                load_from_fp32_weights=engine.zero_load_from_fp32_weights(),
            )
        for name, value in finished.counters.items():
            setattr(engine, name, value)

    def _refuse_ended_partitions(self, module: torch.nn.Module) -> None:
        ended = [name for name, parameter in module.named_parameters()
                 if hasattr(parameter, "ds_id") and not _registered(getattr(parameter, "ds_process_group", None))]
        if ended:
            raise ConfigurationError(
                f"The strategy {self.alias!r} cannot set up this module: its parameters {ended[:3]}"
                f"{' ...' if len(ended) > 3 else ''} were partitioned by ZeRO-3 over the processes of an earlier run "
                f"(the module was created inside lite.init_module(empty_init=True) there), and that run has ended. "
                f"Create the module inside this run's init_module() and load its weights from a checkpoint."
            )

    @hookimpl
    def strategy_setup_module_and_optimizers(
        self, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer]
    ) -> tuple[torch.nn.Module, list[Any]]:
        if len(optimizers) != 1:
            raise ConfigurationError(
                f"The strategy {self.alias!r} sets up one module with one optimizer (a DeepSpeed engine holds one), "
                f"got {len(optimizers)} optimizers; combine their parameter groups into one optimizer."
            )
        engine = self._initialize(module, optimizers[0])
        return engine, [engine.optimizer]

    @hookimpl
    def strategy_setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        # A module without an optimizer: an engine for evaluation or inference (stage 3 still shards it).
        engine: torch.nn.Module = self._initialize(module, None)
        return engine

    @hookimpl
    def strategy_compile(
        self, module: torch.nn.Module, compile_in_place: Callable[[torch.nn.Module], None]
    ) -> torch.nn.Module | None:
        """Compile the module inside the engine (``engine.compile()``): the engine's own forward, its timers and
        ZeRO's hooks stay eager. Compiling the engine as a whole broke its graph 12 times per step and recompiled
        its forward (bench/analysis.md).

        The engine compiles with DeepSpeed's backend and torch's defaults; the module inside it is then compiled
        again with the user's settings, unless the config enables DeepCompile (whose backend DeepSpeed chose)."""
        if not any(module is engine for engine in self._engines):
            return None
        module.compile()
        deep_compile = getattr(module, "is_deepcompile_enabled", None)
        if not (callable(deep_compile) and deep_compile()):
            compile_in_place(cast(torch.nn.Module, module.module))
        return module

    @hookimpl
    def strategy_setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        raise ConfigurationError(
            f"The strategy {self.alias!r} sets up a module and its optimizer together (deepspeed.initialize takes "
            f"both): call model, optimizer = lite.setup(model, optimizer) instead of setup_module / setup_optimizers."
        )

    def _engine_of_module(self, module: torch.nn.Module | None) -> Any:
        if module is None and len(self._engines) == 1:
            return self._engines[0]
        for engine in self._engines:
            if engine is module:
                return engine
        raise ConfigurationError(
            f"The strategy {self.alias!r} does not know which DeepSpeed engine this backward or module belongs to "
            f"({len(self._engines)} set up); pass the module returned by lite.setup: lite.backward(loss, model=model)."
        )

    def _engine_of_optimizer(self, optimizer: Any) -> Any:
        for engine in self._engines:
            if engine.optimizer is optimizer:
                return engine
        raise ConfigurationError(
            f"The strategy {self.alias!r} can only step the optimizer returned by lite.setup(model, optimizer); "
            f"{type(optimizer).__name__} belongs to no DeepSpeed engine."
        )

    @hookimpl
    def strategy_module_init_context(self, empty_init: bool) -> AbstractContextManager[Any]:
        if empty_init and zero_stage(self.config) == 3:
            # Each parameter is partitioned across the ranks as soon as its module is constructed.
            config = copy.deepcopy(self.config)
            context: AbstractContextManager[Any] = self.deepspeed.zero.Init(config_dict_or_path=config)
            return context
        return super().strategy_module_init_context(empty_init=empty_init)

    # -- the training step -----------------------------------------------------------------------------

    @hookimpl
    def strategy_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> bool | None:
        engine = self._engine_of_module(module)
        with self.communicator.guard("gradient reduction (DeepSpeed backward)"):
            engine.backward(tensor)  # scales 16-bit losses, reduces and partitions the gradients
        return True

    @hookimpl
    def strategy_optimizer_step(self, optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
        if kwargs.get("closure") is not None:
            raise ConfigurationError(
                f"The strategy {self.alias!r} steps through DeepSpeed's engine.step(), which takes no closure; "
                f"compute the loss and call lite.backward(loss) before optimizer.step()."
            )
        engine = self._engine_of_optimizer(optimizer)
        with self.communicator.guard("optimizer step (DeepSpeed)"):
            engine.step()  # steps only at a gradient accumulation boundary, then zeroes the gradients
        return None

    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> AbstractContextManager[None]:
        return _accumulating(self._engine_of_module(module))

    @hookimpl
    def strategy_clip_gradients(self, max_norm: float | None, clip_val: float | None) -> bool:
        """DeepSpeed's engine clips the gradient norm inside its step, to the config's ``gradient_clipping``; the
        gradients live in its partitions, not in ``param.grad``. A clip it would not do is refused, never skipped."""
        configured = float(self.config.get("gradient_clipping") or 0.0)
        if clip_val is not None:
            raise ConfigurationError(
                f"The strategy {self.alias!r} cannot clip gradients by value (clip_val={clip_val!r}, or "
                f"gradient_clip_algorithm='value'): DeepSpeed keeps the gradients in its own partitions and clips "
                f"only their norm, inside its step. Clip the norm instead: "
                f"DeepSpeedStrategy(stage={self.settings.stage}, gradient_clipping=<max norm>)."
            )
        if max_norm != configured:
            now = f"gradient_clipping={configured}" if configured else "no gradient_clipping"
            raise ConfigurationError(
                f"The strategy {self.alias!r} clips the gradient norm inside DeepSpeed's step, to its config's "
                f"gradient_clipping ({now} here), so clip_gradients(max_norm={max_norm!r}) (or "
                f"Trainer(gradient_clip_val={max_norm!r})) cannot clip: the gradients live in DeepSpeed's "
                f"partitions, not in param.grad. Pass DeepSpeedStrategy(stage={self.settings.stage}, "
                f"gradient_clipping={max_norm!r}) (or config={{'gradient_clipping': {max_norm!r}}}); a "
                f"clip_gradients call with that same max_norm is then accepted and left to the step."
            )
        return True  # the engine's step clips to exactly this norm

    # -- checkpoints -----------------------------------------------------------------------------------

    def _owned_keys(self, state: Mapping[str, Any]) -> tuple[Any, str, str | None] | None:
        """The engine in ``state`` and the keys of its module and optimizer, or ``None`` without an engine.

        The module is the engine itself (``Lite.save``) or the model whose steps the engine's module runs (the
        Trainer's Module, :class:`core.toolkit.strategies.StepRunner`); the optimizer is the engine's, alone or as
        the one item of a :class:`core.toolkit.strategies.StatefulGroup` (the Trainer's optimizers).
        """
        found = [(key, value) for key, value in state.items()
                 if any(value is engine or _runs_steps_of(engine, value) for engine in self._engines)]
        if not found:
            return None
        if len(found) > 1:
            raise ConfigurationError(
                f"The strategy {self.alias!r} saves one DeepSpeed engine per checkpoint; the state holds "
                f"{[key for key, _ in found]}. Save each module in its own checkpoint."
            )
        module_key, value = found[0]
        engine = next(engine for engine in self._engines if value is engine or _runs_steps_of(engine, value))
        optimizer_key = next((key for key, value in state.items() if _holds_optimizer(value, engine.optimizer)), None)
        return engine, module_key, optimizer_key

    @hookimpl
    def strategy_save_state(
        self, path: str, state: Mapping[str, Any], filter: Mapping[str, Callable[[str, Any], bool]] | None
    ) -> bool | None:
        owned = self._owned_keys(state)
        if owned is None:
            return None  # no engine in the state: Lite writes it as any strategy would
        engine, module_key, optimizer_key = owned
        owned_keys = {module_key} if optimizer_key is None else {module_key, optimizer_key}
        refused = sorted(owned_keys & set(filter or {}))
        if refused:
            raise ConfigurationError(
                f"Lite.save(filter=...) names {refused}, which the strategy {self.alias!r} saves through DeepSpeed "
                f"as a whole; filter only the other entries."
            )
        others = {key: value for key, value in state.items() if key not in (module_key, optimizer_key)}
        client_state = {
            _checkpoint.META_KEY: {
                "module": module_key,
                "optimizer": optimizer_key,
                "state": to_checkpoint(others, filter, {}),
                # The engine saves its module's keys; the model saved under module_key is a child of it (the
                # Trainer's Module in its StepModule): the consolidated weights drop the child's prefix.
                "module_prefix": _prefix_of(engine.module, state[module_key]),
            }
        }
        _checkpoint.save_sharded(
            engine, path, client_state, self.active.cluster.is_global_zero, lambda name: self.strategy_barrier(name)
        )
        return True

    @hookimpl
    def strategy_load_state(
        self, path: str, state: dict[str, Any], strict: bool, weights_only: bool
    ) -> dict[str, Any] | None:
        owned = self._owned_keys(state)
        if owned is None:
            return None
        engine, module_key, optimizer_key = owned
        if weights_only:
            _checkpoint.check_weights_only(path)
        if optimizer_key is None and not hasattr(engine.optimizer, "_restore_from_bit16_weights"):
            # A stage-3 engine set up without an optimizer (for evaluation): DeepSpeed's load_checkpoint calls a
            # method its ZeRO offload object lacks (AttributeError in deepspeed 0.18). Its weights live in the
            # optimizer shards, so rebuild them in full (zero_to_fp32) and let every rank take its partition.
            return self._load_module_only(engine, path, state, module_key, strict)
        loaded_from, client_state = engine.load_checkpoint(
            path,
            load_module_strict=strict,
            load_optimizer_states=optimizer_key is not None,
            load_lr_scheduler_states=False,
        )
        if loaded_from is None:
            raise CheckpointError(f"DeepSpeed found no checkpoint to load in {path!r}.")
        meta = (client_state or {}).get(_checkpoint.META_KEY)
        if not isinstance(meta, dict):
            raise CheckpointError(
                f"The DeepSpeed checkpoint {path!r} was not written by Lite.save (no {_checkpoint.META_KEY!r} entry)."
            )
        if meta["module"] != module_key:
            raise CheckpointError(
                f"The checkpoint {path!r} holds the module under {meta['module']!r}, but the state passes it as "
                f"{module_key!r}; use the key it was saved with."
            )
        others = {key: value for key, value in state.items() if key not in (module_key, optimizer_key)}
        remaining = restore(others, dict(meta["state"]), strict, path)
        state.update(others)
        return remaining

    def _load_module_only(
        self, engine: Any, path: str, state: dict[str, Any], module_key: str, strict: bool
    ) -> dict[str, Any]:
        saved = _checkpoint.load_consolidated(path, weights_only=False)  # checked above when asked
        if module_key not in saved:
            raise CheckpointError(
                f"The checkpoint {path!r} holds the module under {sorted(saved)!r}, but the state passes it as "
                f"{module_key!r}; use the key it was saved with."
            )
        weights = saved.pop(module_key)
        with self.deepspeed.zero.GatheredParameters(list(engine.module.parameters()), modifier_rank=0):
            mismatch = engine.module.load_state_dict(weights, strict=False)
        if strict and (mismatch.missing_keys or mismatch.unexpected_keys):
            raise CheckpointError(
                f"The checkpoint {path!r} does not fit the module {module_key!r}: missing keys "
                f"{mismatch.missing_keys[:5]}, unexpected keys {mismatch.unexpected_keys[:5]}. Load with strict=False "
                f"to take the keys that match."
            )
        others = {key: value for key, value in state.items() if key != module_key}
        remaining = restore(others, saved, strict, path)
        state.update(others)
        return remaining

    @hookimpl
    def strategy_load_checkpoint(self, path: str, weights_only: bool) -> dict[str, Any]:
        if not _checkpoint.is_deepspeed_checkpoint(path):
            return super().strategy_load_checkpoint(path=path, weights_only=weights_only)
        # Lite.load(path) without objects to restore: the consolidated fp32 weights, on every rank.
        return _checkpoint.load_consolidated(path, weights_only)


def _prefix_of(root: torch.nn.Module, module: Any) -> str:
    """The prefix of ``module``'s keys in ``root``'s state dict: ``""`` for ``root`` itself (or an engine of it)."""
    found = next((name for name, child in root.named_modules() if child is module and name), None)
    return "" if found is None else f"{found}."


def _runs_steps_of(engine: Any, value: Any) -> bool:
    stepper = engine.module
    return isinstance(stepper, StepRunner) and stepper.stepped_module is value


def _holds_optimizer(value: Any, optimizer: Any) -> bool:
    """``value`` is ``optimizer``, or a group of one item that is it (or wraps it)."""
    if isinstance(value, StatefulGroup):
        items = list(value.stateful_items)
        if len(items) != 1:
            return False
        value = items[0]
    if isinstance(value, OptimizerWrapper):
        value = value.set_up_optimizer
    return value is optimizer


@contextmanager
def _accumulating(engine: Any) -> Generator[None, None, None]:
    """Backward passes inside accumulate gradients locally; the next one outside is the boundary that reduces.

    This is DeepSpeed's ``set_gradient_accumulation_boundary``: Lite's ``no_backward_sync`` pattern, with
    ``optimizer.step()`` called once after the last micro-batch, maps onto it directly.
    """
    engine.set_gradient_accumulation_boundary(False)
    try:
        yield
    finally:
        engine.set_gradient_accumulation_boundary(True)
