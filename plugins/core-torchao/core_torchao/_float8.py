"""Float8 training through torchao: chosen ``nn.Linear`` layers become ``Float8Linear``, the rest bf16 autocast.

The conversion (``precision_convert_module``) happens before the strategy shards, wraps or compiles the model, on the
user's model (Lite hands it over, never the Trainer's wrapper), once. ``Float8Linear`` keeps the layer's own
``weight`` and ``bias`` parameters, so optimizers and checkpoints see the same tensors and keys as a ``bf16-mixed``
run; with ``float8_all_gather=True`` under fsdp the weights are wrapped in torchao's float8-casting tensor (the
optimizers are re-pointed by Lite, the checkpoint is written plain by ``precision_module_state_to_save``), and the
scales of the next all-gather are computed once after each optimizer step, for all layers in one go.

Under ``model_parallel`` the tensor-parallel plans compose with the converted layers either way: a
``parallelize_fn`` runs after the conversion (torch's ``ColwiseParallel`` / ``RowwiseParallel``, or torchao's
``Float8ColwiseParallel`` / ``Float8RowwiseParallel``, which all-gather activations in float8); plans applied before
it (in ``configure_model``, or before ``Lite.setup``) live in the layers' hooks, which the conversion carries over to
the ``Float8Linear``. Layers already inside ``fully_shard`` units are refused: FSDP would keep gathering their
weights into the replaced layers.

Real float8 matrix multiplications need a CUDA device of compute capability 8.9 or newer; elsewhere (the CPU, older
GPUs) torchao emulates them (``Float8LinearConfig(emulate=True)``): the same rounding, no speed-up.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
import weakref
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Final

import attrs
import torch

from core import ConfigurationError, CoreWarning, Supports, hookimpl
from core.toolkit import quieted
from core.toolkit.precisions import LinearFilter, alias_factory, floating_to

if TYPE_CHECKING:
    from core import ActiveSet

RECIPES: Final = {"fp8": "tensorwise", "fp8-rowwise": "rowwise", "fp8-rowwise-gw-hp": "rowwise_with_gw_hp"}
"""Each alias's torchao recipe (``Float8LinearConfig.from_recipe_name``)."""

MIN_CAPABILITY: Final = (8, 9)
"""The CUDA compute capability from which float8 matrix multiplications run in hardware (Ada, Hopper, Blackwell)."""

_DEEPSPEED: Final = {"deepspeed", "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_2_offload",
                     "deepspeed_stage_3", "deepspeed_stage_3_offload"}

FLOAT8_SUPPORTS: Final = Supports(
    never={"strategy": {"dp", *_DEEPSPEED}, "accelerator": {"mps", "tpu"}},
    hint="strategy='dp' runs replicas in threads that autocast does not reach, and DeepSpeed converts the model "
    "its own way: use strategy='ddp', 'fsdp' or 'model_parallel' with float8. torchao's float8 runs on CUDA (and "
    "emulated on the CPU), not on MPS or TPU: use precision='bf16-mixed' there.",
)




def hardware_float8(device: torch.device | None = None) -> str | None:
    """``None`` where float8 runs in hardware on ``device`` (default: CUDA device 0), else what is missing."""
    if device is not None and device.type != "cuda":
        return f"the run's device is {device.type!r}, not a CUDA GPU"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible"
    index = device.index if device is not None and device.index is not None else 0
    capability = torch.cuda.get_device_capability(index)
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(index)
        return f"the GPU {name!r} has compute capability {capability[0]}.{capability[1]}, below 8.9"
    return None


class Float8Precision:
    """Float8 training of a model's large linear layers (torchao), bf16 autocast for the rest.

    :param name: The alias (``"fp8"``, ``"fp8-rowwise"``, ``"fp8-rowwise-gw-hp"``): it chooses the recipe.
    :param layer_filter: Which ``nn.Linear`` layers become float8: a :class:`core.toolkit.precisions.LinearFilter`.
        Default: dimensions divisible by 16, at least a million weights (smaller layers lose time to the casts),
        the output head left out.
    :param exclude: Fully-qualified layer names or glob patterns to leave in bf16, added to the filter's.
    :param emulate: ``None`` (default): emulate where the device cannot compute float8 (see :data:`MIN_CAPABILITY`);
        ``True`` always; ``False`` refuses to run without float8 hardware.
    :param float8_all_gather: Under fsdp, all-gather the sharded weights in float8 (half the bytes of bf16), with
        their scales computed after each optimizer step; tensorwise scaling (``fp8``) only, as in torchao.
    :param autocast_dtype: What the rest of the model computes in (``torch.bfloat16``).
    """

    kind: Final = "precision"
    supports: Final = FLOAT8_SUPPORTS

    def __init__(
        self,
        name: str = "fp8",
        *,
        layer_filter: LinearFilter | None = None,
        exclude: tuple[str, ...] | list[str] = (),
        emulate: bool | None = None,
        float8_all_gather: bool = False,
        autocast_dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        if name not in RECIPES:
            raise ConfigurationError(f"Float8Precision(name={name!r}): expected one of {sorted(RECIPES)}.")
        if emulate not in (None, True, False):
            raise ConfigurationError(f"Float8Precision(emulate={emulate!r}): expected None (auto), True or False.")
        if float8_all_gather and RECIPES[name] != "tensorwise":
            raise ConfigurationError(
                f"Float8Precision(name={name!r}, float8_all_gather=True): torchao all-gathers float8 weights with "
                f"tensorwise scales only; use precision 'fp8' for float8 all-gather, or leave it off."
            )
        if autocast_dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ConfigurationError(
                f"Float8Precision(autocast_dtype={autocast_dtype!r}): expected torch.bfloat16, torch.float16 or "
                f"torch.float32."
            )
        base = layer_filter if layer_filter is not None else LinearFilter(min_weight_elements=1 << 20)
        if not isinstance(base, LinearFilter):
            raise ConfigurationError(
                f"Float8Precision(layer_filter={layer_filter!r}): expected a core.toolkit.precisions.LinearFilter."
            )
        self.name = name
        self.recipe = RECIPES[name]
        self.layer_filter = attrs.evolve(base, exclude=(*base.exclude, *exclude)) if exclude else base
        self.emulate = emulate
        self.float8_all_gather = float8_all_gather
        self.autocast_dtype = autocast_dtype
        self.converted: dict[str, list[str]] = {}
        """By model class name, the fully-qualified names of the layers converted (for reports and tests)."""
        self._active: ActiveSet | None = None
        self._models: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        self._told_emulated = False

    # -- what this machine can do -------------------------------------------------------------------

    def unavailable_reason(self) -> str | None:
        if importlib.util.find_spec("torchao") is None:
            return "torchao is not installed: pip install torchao (or pip install core-torchao again)"
        return None

    def limitation(self) -> str | None:
        missing = hardware_float8()
        if missing is None:
            return None
        return (
            f"float8 runs emulated here ({missing}); real float8 needs a CUDA GPU of compute capability 8.9 or "
            f"newer (Ada, Hopper, Blackwell): the same numerics, no speed-up"
        )

    @property
    def device(self) -> torch.device:
        device = self._active.device if self._active is not None else None
        return device if device is not None else torch.device("cpu")

    def _emulating(self) -> bool:
        missing = hardware_float8(self.device)
        if self.emulate is False and missing is not None:
            raise ConfigurationError(
                f"precision={self.name!r} with emulate=False needs float8 hardware, but {missing}. Leave emulate at "
                f"None to emulate here, or run on a CUDA GPU of compute capability 8.9 or newer."
            )
        emulating = self.emulate is True or missing is not None
        if emulating and not self._told_emulated:
            self._told_emulated = True
            warnings.warn(
                f"precision={self.name!r} runs float8 emulated ({missing or 'emulate=True'}): the numerics of float8 "
                f"training without its speed; real float8 needs a CUDA GPU of compute capability 8.9 or newer.",
                CoreWarning,
                stacklevel=2,
            )
        return emulating

    def config(self) -> Any:
        """The ``torchao.float8.Float8LinearConfig`` of this run (emulated or not, float8 all-gather or not)."""
        with quieted("torchao"):  # a warning per CUDA kernel library it cannot load on a CPU machine
            from torchao.float8 import Float8LinearConfig

        config = Float8LinearConfig.from_recipe_name(self.recipe)
        return dataclasses.replace(
            config, emulate=self._emulating(), enable_fsdp_float8_all_gather=self.float8_all_gather
        )

    # -- hooks ---------------------------------------------------------------------------------------

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        self._active = active

    @hookimpl
    def precision_convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        with quieted("torchao"):
            from torchao.float8 import convert_to_float8_training

        chosen = set(self.layer_filter.chosen(module))
        _refuse_fully_sharded(self.name, module, chosen)
        config = self.config()
        originals = {name: module.get_submodule(name) for name in chosen}
        if chosen:
            convert_to_float8_training(module, module_filter_fn=lambda _, fqn: fqn in chosen, config=config)
        for name, layer in originals.items():
            _carry_hooks(layer, module.get_submodule(name))
        self.converted[type(module).__name__] = sorted(chosen)
        self._models.add(module)
        return module

    @hookimpl
    def precision_autocast(self) -> AbstractContextManager[Any]:
        if self.autocast_dtype == torch.float32:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    @hookimpl
    def precision_convert_output(self, data: Any) -> Any:
        return floating_to(data)

    @hookimpl
    def precision_sharded_parameter_dtype(self) -> torch.dtype | None:
        return None if self.autocast_dtype == torch.float32 else self.autocast_dtype

    @hookimpl
    def precision_optimizer_step(self, optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
        result = optimizer.step(**kwargs)
        if self.float8_all_gather:
            self._precompute_scales()
        return result

    def _precompute_scales(self) -> None:
        """The float8 scales of every sharded weight for the next all-gather, in one all-reduce (torchao)."""
        with quieted("torchao"):
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        for model in list(self._models):
            if _holds_dtensors(model):
                precompute_float8_dynamic_scale_for_fsdp(model)

    @hookimpl
    def precision_module_state_to_save(self, module: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any] | None:
        if not self.float8_all_gather:
            return None  # Float8Linear keeps plain weights: the state is already the bf16 run's
        return {key: _plain(value) for key, value in state.items()}

    def __getstate__(self) -> dict[str, Any]:
        # The run's objects stay behind (a spawned rank attaches its own); the options travel.
        state = dict(self.__dict__)
        state.update(_active=None, _models=None, converted={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._models = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"Float8Precision({self.name!r}, recipe={self.recipe!r})"


_HOOK_DICTS: Final = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                      "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_pre_hooks",
                      "_backward_hooks")


def _carry_hooks(layer: torch.nn.Module, replacement: torch.nn.Module) -> None:
    """The forward and backward hooks of a swapped ``nn.Linear`` on its ``Float8Linear``.

    A tensor-parallel plan applied before the conversion (in ``configure_model``, or before ``Lite.setup``) lives in
    the layer's hooks (``ColwiseParallel`` / ``RowwiseParallel`` turn its input and output into ``DTensor`` s and
    back); without them the float8 layer would multiply a plain input by a sharded weight. The hooks take the
    module as an argument, so on the replacement they act on it. The handles their registration returned still
    point at the old layer (removing one removes nothing from the new layer).
    """
    if replacement is layer:
        return
    for attribute in _HOOK_DICTS:
        hooks: Any = getattr(layer, attribute, None)
        target: Any = getattr(replacement, attribute, None)
        if isinstance(hooks, dict | set) and type(target) is type(hooks):
            target.update(hooks)


def _refuse_fully_sharded(name: str, model: torch.nn.Module, chosen: set[str]) -> None:
    """Refuse layers already inside a ``fully_shard`` unit: FSDP gathers their weights into the old layer."""
    from torch.distributed.fsdp import FSDPModule

    units = [unit for unit, module in model.named_modules() if isinstance(module, FSDPModule)]
    inside = sorted({layer for layer in chosen for unit in units if unit == "" or layer.startswith(f"{unit}.")})
    if inside:
        raise ConfigurationError(
            f"precision={name!r} converts nn.Linear layers to torchao's Float8Linear, but {inside[:3]}"
            f"{' ...' if len(inside) > 3 else ''} are already inside fully_shard units: fully_shard was applied "
            f"before the conversion (in configure_model, or before Lite.setup), and FSDP would keep gathering the "
            f"weights into the replaced layers. Let the conversion come first: pass the parallelize function as "
            f"ModelParallelStrategy(parallelize_fn=fn) (it runs after the conversion), or apply only the tensor-"
            f"parallel plans (parallelize_module, which float8 composes with) in configure_model and fully_shard "
            f"in parallelize_fn; for data parallelism alone use strategy='fsdp'."
        )


def _holds_dtensors(model: torch.nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(parameter, DTensor) for parameter in model.parameters())


def _plain(value: Any) -> Any:
    """A weight wrapped for float8 all-gather as the plain tensor it wraps (a ``DTensor`` keeps its layout)."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        local = value.to_local()
        inner = getattr(local, "_tensor", None)
        if isinstance(inner, torch.Tensor):
            return DTensor.from_local(inner, value.device_mesh, value.placements, shape=value.shape,
                                      stride=value.stride())
        return value
    inner = getattr(value, "_tensor", None)
    return inner if isinstance(value, torch.Tensor) and isinstance(inner, torch.Tensor) else value


def _factory(name: str) -> Callable[..., Float8Precision]:
    return alias_factory(Float8Precision, name, f"The ``{name}`` precision: torchao's ``{RECIPES[name]}`` float8 "
                                                "recipe; options of Float8Precision.")


fp8: Final = _factory("fp8")
fp8_rowwise: Final = _factory("fp8-rowwise")
fp8_rowwise_gw_hp: Final = _factory("fp8-rowwise-gw-hp")
