"""The ``-true`` precisions: parameters, inputs and computation all in one dtype.

``32-true`` is the default and changes nothing. ``64-true``, ``16-true`` and ``bf16-true`` convert the
module's floating parameters and buffers and every floating input, and make that dtype the default
while modules are created and during the forward pass. Lightning's legacy spellings ``32`` and ``64``
are aliases of the same factories.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final

import torch

from core._markers import hookimpl
from core.toolkit.precisions import default_dtype, floating_to
from core.toolkit.tensors import apply_to_tensors


class TruePrecision:
    """Everything in ``dtype``."""

    kind: Final = "precision"

    def __init__(self, name: str, dtype: torch.dtype) -> None:
        self.name = name
        self.dtype = dtype
        # float32 is torch's own default: converting would only cost time and break bitwise parity.
        self._converts = dtype != torch.float32

    def _to_dtype(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.dtype) if torch.is_floating_point(tensor) else tensor

    def _context(self) -> AbstractContextManager[None]:
        return default_dtype(self.dtype) if self._converts else nullcontext()

    @hookimpl
    def precision_convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.to(dtype=self.dtype) if self._converts else module

    @hookimpl
    def precision_tensor_init_context(self) -> AbstractContextManager[None]:
        return self._context()

    @hookimpl
    def precision_autocast(self) -> AbstractContextManager[None]:
        return self._context()

    @hookimpl
    def precision_convert_input(self, data: Any) -> Any:
        return apply_to_tensors(data, self._to_dtype) if self._converts else data

    @hookimpl
    def precision_convert_output(self, data: Any) -> Any:
        if not self._converts:
            return data
        return floating_to(data)

    @hookimpl
    def precision_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> bool:
        tensor.backward()
        return True

    @hookimpl
    def precision_optimizer_step(self, optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
        return optimizer.step(**kwargs)

    @hookimpl
    def precision_state_dict(self) -> dict[str, Any]:
        return {}

    @hookimpl
    def precision_load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    def __repr__(self) -> str:
        return f"TruePrecision({self.name!r}, {self.dtype})"


def full_32() -> TruePrecision:
    return TruePrecision("32-true", torch.float32)


def full_64() -> TruePrecision:
    return TruePrecision("64-true", torch.float64)


def half_16() -> TruePrecision:
    return TruePrecision("16-true", torch.float16)


def bfloat_16() -> TruePrecision:
    return TruePrecision("bf16-true", torch.bfloat16)
