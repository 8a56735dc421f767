"""Lightning's precision classes that have no counterpart here yet, importable so that a program naming them loads."""

from __future__ import annotations

from typing import Any

from core._errors import PluginUnavailableError

TRANSFORMER_ENGINE_MISSING = (
    "TransformerEnginePrecision needs NVIDIA's TransformerEngine (the transformer_engine package), which builds "
    "against CUDA and cannot be installed or tested on a machine without a CUDA toolkit; core has no TransformerEngine "
    "precision. For float8 training use precision='fp8' (or 'fp8-rowwise'), torchao's float8: pip install "
    "core-torchao, then Trainer(precision='fp8') or Fabric(precision='fp8'); it also runs emulated on the CPU."
)


class TransformerEnginePrecision:
    """Lightning's ``TransformerEnginePrecision``: constructing it raises :class:`core.PluginUnavailableError`.

    The class imports (a program that names it loads); an instance cannot be made, and the error points to ``fp8``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise PluginUnavailableError(TRANSFORMER_ENGINE_MISSING)
