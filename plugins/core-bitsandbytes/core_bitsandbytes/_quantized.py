"""4-bit and 8-bit weights through bitsandbytes: the modes of Lightning's ``BitsandbytesPrecision``.

At setup (``precision_convert_module``) every ``nn.Linear`` of the user's model outside ``ignore_modules`` becomes a
bitsandbytes layer whose weight is quantized on the run's device: ``nf4`` / ``fp4`` (4-bit, ``-dq`` also quantizes
the block scales), ``int8`` (8-bit, LLM.int8()) and ``int8-training`` (8-bit matrix multiplications, float16 weights
that train). Quantized weights are frozen (they have no gradient); biases, the layers left out and adapters (made
before setup or after it) train, which is the QLoRA recipe: a frozen quantized base and small trainable adapters.
What does not train takes the compute dtype; under float16 what trains stays float32 (see ``_to_compute_dtype``).

Checkpoints are written plain: each quantized weight is dequantized to float32 under its own key, so they load into
an unquantized run, and a plain checkpoint loads into a quantized run by quantizing on load.

Which strategies work: single_device and ddp (the quantized weights are frozen, so DDP synchronises only what trains).
Not fsdp, model_parallel, pipeline or deepspeed: their sharding splits parameters into ``DTensor`` s, and a packed
4-bit weight with its per-block quantization state cannot be split (``supports`` refuses them by name).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, cast

import torch

from core import ConfigurationError, Supports, hookimpl
from core.toolkit.precisions import alias_factory, default_dtype, floating_to

if TYPE_CHECKING:
    from core import ActiveSet

MODES: Final = ("nf4", "nf4-dq", "fp4", "fp4-dq", "int8", "int8-training")
"""Lightning's ``BitsandbytesPrecision`` modes, each an alias here."""

_SHARDING: Final = {"fsdp", "fsdp_cpu_offload", "model_parallel", "pipeline", "deepspeed", "deepspeed_stage_1",
                    "deepspeed_stage_2", "deepspeed_stage_2_offload", "deepspeed_stage_3", "deepspeed_stage_3_offload"}

QUANTIZED_SUPPORTS: Final = Supports(
    never={"strategy": {*_SHARDING, "dp"}, "accelerator": {"tpu"}},
    hint="bitsandbytes' packed weights and their quantization state cannot be sharded into DTensors (fsdp, "
    "model_parallel, pipeline) or handed to DeepSpeed's engine, and 'dp' runs replicas in threads: use "
    "strategy='single_device' or 'ddp'. bitsandbytes has no TPU backend.",
)


def _bitsandbytes() -> Any:
    os.environ.setdefault("BITSANDBYTES_NOWELCOME", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import bitsandbytes

    return bitsandbytes


class BitsandbytesPrecision:
    """Linear layers with 4-bit or 8-bit weights (bitsandbytes), computing in ``dtype``.

    :param mode: One of :data:`MODES`.
    :param dtype: The compute dtype: ``torch.bfloat16`` by default for the 4-bit modes, ``torch.float16`` (the only
        one bitsandbytes' int8 layers take, as in Lightning) for the 8-bit ones.
    :param ignore_modules: Names of submodules whose ``nn.Linear`` layers stay as they are, matched as prefixes of
        the fully-qualified names (``{"lm_head"}``, ``{"transformer.blocks"}``), as Lightning's.
    """

    kind: Final = "precision"
    supports: Final = QUANTIZED_SUPPORTS

    def __init__(
        self, mode: str = "nf4", dtype: torch.dtype | None = None, ignore_modules: set[str] | None = None
    ) -> None:
        if mode not in MODES:
            raise ConfigurationError(f"BitsandbytesPrecision(mode={mode!r}): expected one of {list(MODES)}.")
        eight_bit = mode.startswith("int8")
        if dtype is None:
            dtype = torch.float16 if eight_bit else torch.bfloat16
        if eight_bit and dtype != torch.float16:
            raise ConfigurationError(
                f"BitsandbytesPrecision(mode={mode!r}, dtype={dtype}): bitsandbytes' int8 layers compute in "
                f"torch.float16 only; pass dtype=torch.float16 or choose a 4-bit mode (nf4, fp4)."
            )
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ConfigurationError(
                f"BitsandbytesPrecision(dtype={dtype!r}): expected torch.bfloat16, torch.float16 or torch.float32."
            )
        ignored = set(ignore_modules or ())
        if not all(isinstance(name, str) for name in ignored):
            raise ConfigurationError(
                f"BitsandbytesPrecision(ignore_modules={ignore_modules!r}): expected names of submodules (strings)."
            )
        self.name = mode
        self.mode = mode
        self.dtype = dtype
        self.ignore_modules = ignored
        self._active: ActiveSet | None = None

    def unavailable_reason(self) -> str | None:
        if importlib.util.find_spec("bitsandbytes") is None:
            return "bitsandbytes is not installed: pip install bitsandbytes (or pip install core-bitsandbytes again)"
        return None

    @property
    def device(self) -> torch.device:
        device = self._active.device if self._active is not None else None
        return device if device is not None else torch.device("cpu")

    # -- conversion --------------------------------------------------------------------------------------

    def _quantized_layer(self, layer: torch.nn.Linear) -> torch.nn.Module:
        bnb = _bitsandbytes()
        weight = layer.weight.detach()
        if self.mode.startswith("int8"):
            training = self.mode == "int8-training"
            quantized = bnb.nn.Linear8bitLt(layer.in_features, layer.out_features, bias=layer.bias is not None,
                                            has_fp16_weights=training, device="meta")
            quantized.weight = bnb.nn.Int8Params(weight.to(torch.float16).clone(), requires_grad=training,
                                                 has_fp16_weights=training)
        else:
            quant_type, nested = self.mode.removesuffix("-dq"), self.mode.endswith("-dq")
            quantized = bnb.nn.Linear4bit(layer.in_features, layer.out_features, bias=layer.bias is not None,
                                          compute_dtype=self.dtype, quant_type=quant_type,
                                          compress_statistics=nested, device="meta")
            quantized.weight = bnb.nn.Params4bit(weight.clone(), requires_grad=False, quant_type=quant_type,
                                                 compress_statistics=nested)
            quantized.register_load_state_dict_pre_hook(_applied_quantization_state)
        if layer.bias is not None:
            quantized.bias = layer.bias  # the same parameter: it keeps training, and optimizers keep it
        if weight.device.type != "meta":
            self._quantize(quantized)
        return quantized

    def _quantize(self, layer: torch.nn.Module) -> None:
        bnb = _bitsandbytes()
        if isinstance(layer.weight, bnb.nn.Params4bit):
            if not layer.weight.bnb_quantized:
                layer.weight = layer.weight._quantize(self.device)
        else:
            layer.to(self.device)  # Int8Params quantize when moved (has_fp16_weights=False)

    def _layers(self, module: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
        bnb = _bitsandbytes()
        for name, layer in module.named_modules():
            if isinstance(layer, (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)):
                yield name, layer

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        self._active = active

    @hookimpl
    def precision_convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        names = [
            name for name, layer in module.named_modules()
            if type(layer) is torch.nn.Linear and not any(name.startswith(prefix) for prefix in self.ignore_modules)
        ]
        if not names:
            raise ConfigurationError(
                f"precision={self.mode!r} quantizes nn.Linear layers, and this {type(module).__name__} has none "
                f"outside ignore_modules={sorted(self.ignore_modules)}: nothing would be quantized."
            )
        if names == [""]:  # the model is one nn.Linear: its replacement is the converted model
            return self._quantized_layer(cast(torch.nn.Linear, module))
        modules = dict(module.named_modules())
        for name in names:
            parent, _, child = name.rpartition(".")
            setattr(modules[parent], child, self._quantized_layer(cast(torch.nn.Linear, modules[name])))
        self._to_compute_dtype(module)
        return module

    def _to_compute_dtype(self, module: torch.nn.Module) -> None:
        """Everything but the quantized weights in the compute dtype (layers left out, norms, biases), in place.

        Under float16 (the int8 modes' only compute dtype, or ``dtype=torch.float16``) a float32 parameter that trains
        stays float32: float16 cannot hold an optimizer's state and updates (AdamW's ``eps=1e-8`` and the squares of
        small gradients are zero in float16, and adapters turned NaN within a few steps). A module that holds such
        parameters computes in float32: its floating inputs are cast up and its outputs back to float16, as peft keeps
        LoRA adapters in float32 on a half-precision base. bfloat16 has float32's range, so there everything but the
        quantized weights takes the compute dtype. The model's own parameters (held by the module given to setup, not
        by a submodule) take the compute dtype in every case: a LightningModule uses them in ``training_step`` as well
        as in ``forward``, and only a forward can be wrapped.
        """
        quantized = {id(layer.weight) for _, layer in self._layers(module)}
        keep_trainable = self.dtype == torch.float16
        computing_in_float32: dict[torch.nn.Module, None] = {}  # insertion-ordered, each module once
        with torch.no_grad():
            for owner in module.modules():
                for tensor in (*owner.parameters(recurse=False), *owner.buffers(recurse=False)):
                    if id(tensor) in quantized or not torch.is_floating_point(tensor) or tensor.dtype == self.dtype:
                        continue
                    trains_in_float32 = tensor.requires_grad and tensor.dtype == torch.float32
                    if keep_trainable and owner is not module and trains_in_float32:
                        computing_in_float32[owner] = None
                        continue
                    tensor.data = tensor.data.to(self.dtype)
        for owner in computing_in_float32:
            owner.register_forward_pre_hook(_inputs_to_float32, with_kwargs=True)
            owner.register_forward_hook(functools.partial(_outputs_to, self.dtype))

    @hookimpl
    def precision_module_materialized(self, module: torch.nn.Module) -> None:
        for _, layer in self._layers(module):
            self._quantize(layer)

    # -- the forward pass ----------------------------------------------------------------------------------

    @hookimpl
    def precision_tensor_init_context(self) -> AbstractContextManager[None]:
        return default_dtype(self.dtype)

    @hookimpl
    def precision_autocast(self) -> AbstractContextManager[None]:
        return default_dtype(self.dtype)

    @hookimpl
    def precision_convert_input(self, data: Any) -> Any:
        return floating_to(data, self.dtype)

    @hookimpl
    def precision_convert_output(self, data: Any) -> Any:
        return floating_to(data)

    # -- checkpoints: plain float32 weights under the plain keys ------------------------------------------

    def _plain_weight(self, layer: torch.nn.Module) -> torch.Tensor:
        bnb = _bitsandbytes()
        weight: Any = layer.weight
        if isinstance(weight, bnb.nn.Params4bit):
            return bnb.functional.dequantize_4bit(weight.data, weight.quant_state).float()
        scales = getattr(weight, "SCB", None)
        if weight.dtype == torch.int8 and scales is not None:
            return weight.data.float() * scales.float().unsqueeze(1) / 127.0
        return weight.data.float()

    @hookimpl
    def precision_module_state_to_save(self, module: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any]:
        for name, layer in self._layers(module):
            prefix = f"{name}." if name else ""
            for key in [key for key in state if key.startswith(prefix + "weight.") or key in (
                prefix + "SCB", prefix + "weight_format")]:
                del state[key]
            state[prefix + "weight"] = self._plain_weight(layer).cpu()
            if prefix + "bias" in state:
                state[prefix + "bias"] = state[prefix + "bias"].float()
        return state

    @hookimpl
    def precision_module_state_to_load(self, module: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any]:
        for name, layer in self._layers(module):
            prefix = f"{name}." if name else ""
            weight = state.get(prefix + "weight")
            if not isinstance(weight, torch.Tensor) or not torch.is_floating_point(weight) or (
                self.mode == "int8-training"):
                continue  # saved quantized, or the layer keeps float16 weights itself
            parent = _parent(module, name)
            child = name.rpartition(".")[2]
            plain = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
            plain.weight = torch.nn.Parameter(weight.to(self.device), requires_grad=False)
            fresh = self._quantized_layer(plain)
            fresh.bias = layer.bias
            setattr(parent, child, fresh)
            own = fresh.state_dict(prefix=prefix)
            for key in [key for key in state if key.startswith(prefix + "weight")]:
                del state[key]
            state.update({key: value for key, value in own.items() if key != prefix + "bias"})
        return state

    def __repr__(self) -> str:
        return f"BitsandbytesPrecision({self.mode!r}, dtype={self.dtype})"


def _applied_quantization_state(layer: torch.nn.Module, state: dict[str, Any], prefix: str, *_: Any) -> None:
    """The 4-bit quantization state entries were applied by ``precision_module_state_to_load`` (the layer was
    quantized from the plain weight then): torch's ``load_state_dict`` would call them unexpected."""
    for key in [key for key in state if key.startswith(prefix + "weight.")]:
        del state[key]


def _inputs_to_float32(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Forward pre-hook of a module whose trainable parameters stay float32 under a float16 compute dtype."""
    return floating_to(args, torch.float32), floating_to(kwargs, torch.float32)


def _outputs_to(dtype: torch.dtype, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> Any:
    """Forward hook of the same modules: their outputs back in the compute dtype for the layers after them."""
    return floating_to(output, dtype)


def _parent(module: torch.nn.Module, name: str) -> torch.nn.Module:
    parent = name.rpartition(".")[0]
    return module.get_submodule(parent) if parent else module


def _factory(mode: str) -> Callable[..., BitsandbytesPrecision]:
    return alias_factory(BitsandbytesPrecision, mode,
                         f"The ``{mode}`` precision (bitsandbytes); options of :class:`BitsandbytesPrecision`.")


nf4: Final = _factory("nf4")
nf4_dq: Final = _factory("nf4-dq")
fp4: Final = _factory("fp4")
fp4_dq: Final = _factory("fp4-dq")
int8: Final = _factory("int8")
int8_training: Final = _factory("int8-training")
