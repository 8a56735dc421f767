"""Automatic mixed precision: the forward pass under ``torch.autocast``, parameters kept in float32.

``16-mixed`` computes in float16 and scales the loss with ``torch.amp.GradScaler`` so that small
gradients do not underflow; a step whose gradients hold inf or nan is skipped and the scale reduced.
``bf16-mixed`` computes in bfloat16, whose exponent range is float32's, so it needs no scaler.

Both take the autocast device type from the run's device (``active.device``), and ``cpu`` until the
accelerator has connected one.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final

import torch

from core import CheckpointError, ConfigurationError, CoreDeprecationWarning, Supports, hookimpl
from core.toolkit.precisions import floating_to

if TYPE_CHECKING:
    from core import ActiveSet

_DP_REASON: Final = (
    "With strategy='dp', DataParallel runs its replicas in worker threads that torch.autocast (thread-local) "
    "does not reach, so they would silently compute in float32: use strategy='ddp' instead."
)

HALF_MIXED_SUPPORTS: Final = Supports(
    never={"accelerator": {"tpu"}, "strategy": {"dp"}},
    hint="On TPU, float16 autocast with a gradient scaler is not available: use precision='bf16-mixed'. " + _DP_REASON,
)
BFLOAT_MIXED_SUPPORTS: Final = Supports(never={"strategy": {"dp"}}, hint=_DP_REASON)


def _checked_autocast(name: str, device_type: str, dtype: torch.dtype) -> torch.autocast:
    """``torch.autocast`` for the device, or a :class:`ConfigurationError` where torch cannot honour it."""
    instead = "'bf16-mixed' or '32-true'" if dtype == torch.float16 else "'32-true' or 'bf16-true'"
    if not torch.amp.is_autocast_available(device_type):
        raise ConfigurationError(
            f"precision={name!r} needs torch.autocast, which torch {torch.__version__} does not offer for the "
            f"device type {device_type!r}. Use precision={instead} on this accelerator."
        )
    # torch does not raise for a dtype the device cannot autocast to: it warns and disables autocast,
    # which would train in float32 while claiming mixed precision.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        context = torch.autocast(device_type=device_type, dtype=dtype)
    disabled = [str(warning.message) for warning in caught if "Disabling autocast" in str(warning.message)]
    if disabled:
        raise ConfigurationError(
            f"precision={name!r} asks torch.autocast for {dtype} on {device_type!r}, which torch "
            f"{torch.__version__} refuses ({disabled[0].splitlines()[0]}). Use precision={instead} instead."
        )
    return context


class MixedPrecision:
    """Forward passes under ``torch.autocast(dtype)``; with float16, losses scaled by a ``GradScaler``."""

    kind: Final = "precision"

    def __init__(self, name: str, dtype: torch.dtype, supports: Supports) -> None:
        self.name = name
        self.dtype = dtype
        self.supports = supports
        self.uses_scaler = dtype == torch.float16
        self._active: ActiveSet | None = None
        self._scaler: torch.amp.GradScaler | None = None
        self._scaler_device_type = ""
        self._checked_device_types: set[str] = set()
        # Optimizers whose gradients were unscaled since their last step: unscaling twice would
        # divide by the scale twice, and GradScaler refuses it.
        self._unscaled: set[int] = set()

    @property
    def device_type(self) -> str:
        """The autocast device type: the run's device once connected, ``cpu`` before."""
        device = self._active.device if self._active is not None else None
        return device.type if device is not None else "cpu"

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The gradient scaler of ``16-mixed`` (created on first use, for the run's device type)."""
        if not self.uses_scaler:
            return None
        device_type = self.device_type
        if self._scaler is None or self._scaler_device_type != device_type:
            # Built before the device was connected: carry any loaded state over to the right device type.
            previous = self._scaler.state_dict() if self._scaler is not None else None
            self._scaler = torch.amp.GradScaler(device_type)
            self._scaler_device_type = device_type
            if previous:
                self._scaler.load_state_dict(previous)
        return self._scaler

    @hookimpl
    def core_attach(self, active: ActiveSet) -> None:
        self._active = active

    @hookimpl
    def precision_convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        # Parameters stay float32: autocast casts per operation and the optimizer updates float32 masters.
        return module

    @hookimpl
    def precision_autocast(self) -> AbstractContextManager[Any]:
        device_type = self.device_type
        if device_type not in self._checked_device_types:
            context = _checked_autocast(self.name, device_type, self.dtype)
            self._checked_device_types.add(device_type)
            return context
        return torch.autocast(device_type=device_type, dtype=self.dtype)

    @hookimpl
    def precision_convert_output(self, data: Any) -> Any:
        return floating_to(data)

    @hookimpl
    def precision_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> bool:
        scaler = self.scaler
        (scaler.scale(tensor) if scaler is not None else tensor).backward()
        return True

    @hookimpl
    def precision_unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        scaler = self.scaler
        if scaler is None or id(optimizer) in self._unscaled:
            return None
        scaler.unscale_(optimizer)
        self._unscaled.add(id(optimizer))
        return None

    @hookimpl
    def precision_optimizer_step(self, optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
        scaler = self.scaler
        if scaler is None:
            return optimizer.step(**kwargs)
        if isinstance(optimizer, torch.optim.LBFGS):
            raise ConfigurationError(
                f"precision={self.name!r} cannot step LBFGS: it re-evaluates its closure several times per step, "
                f"which a gradient scaler cannot follow. Use precision='bf16-mixed' or '32-true' with LBFGS."
            )
        step_kwargs = dict(kwargs)
        closure = step_kwargs.pop("closure", None)
        # GradScaler.step takes no closure: run it first (forward and scaled backward), then step.
        closure_result = closure() if closure is not None else None
        self.precision_unscale_gradients(optimizer)
        # Skips optimizer.step when the unscaled gradients hold inf or nan; update() then lowers the scale.
        step_result = scaler.step(optimizer, **step_kwargs)
        scaler.update()
        self._unscaled.discard(id(optimizer))
        return closure_result if closure is not None else step_result

    @hookimpl
    def precision_state_dict(self) -> dict[str, Any]:
        scaler = self.scaler
        return dict(scaler.state_dict()) if scaler is not None else {}

    @hookimpl
    def precision_load_state_dict(self, state: dict[str, Any]) -> None:
        scaler = self.scaler
        # An empty state comes from a precision without a scaler (32-true, bf16-mixed): keep the fresh one.
        if scaler is None or not state:
            return None
        expected = set(scaler.state_dict())
        missing = sorted(expected - set(state))
        if missing:
            raise CheckpointError(
                f"The precision state in this checkpoint lacks the gradient scaler fields {missing} that "
                f"precision={self.name!r} restores (expected {sorted(expected)}, found {sorted(state)})."
            )
        scaler.load_state_dict(state)
        return None

    def __repr__(self) -> str:
        return f"MixedPrecision({self.name!r}, {self.dtype}, device_type={self.device_type!r})"


def half_mixed() -> MixedPrecision:
    return MixedPrecision("16-mixed", torch.float16, HALF_MIXED_SUPPORTS)


def bfloat_mixed() -> MixedPrecision:
    return MixedPrecision("bf16-mixed", torch.bfloat16, BFLOAT_MIXED_SUPPORTS)


def _stacklevel_of_caller() -> int:
    """The ``stacklevel`` of the first frame outside core, its plugins and pluggy: the user's call.

    Python shows a DeprecationWarning by default only when it is attributed to ``__main__``, so the
    warning must point at the user's ``resolve(...)`` / ``Lite(...)`` line, not at the loader.
    """
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if not (module == "core" or module.startswith(("core.", "core_", "pluggy", "importlib"))):
            return level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _legacy(spelling: str, canonical: str) -> None:
    warnings.warn(
        f"precision={spelling} is a legacy spelling of {canonical!r} kept for Lightning users; pass "
        f"precision={canonical!r} instead.",
        CoreDeprecationWarning,
        stacklevel=_stacklevel_of_caller(),
    )


def legacy_16() -> MixedPrecision:
    _legacy("16 (or '16')", "16-mixed")
    return half_mixed()


def legacy_bf16() -> MixedPrecision:
    _legacy("'bf16'", "bf16-mixed")
    return bfloat_mixed()
