"""PowerSGDExtension's options, the hook it registers for each, and its errors."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from core_powersgd import PowerSGDExtension
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

import core


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"powersgd": False}, "PowerSGDExtension(powersgd=False, fp16=False) compresses nothing; pass powersgd=True, "
                              "fp16=True or both, or leave 'powersgd' out of plugins=[...]."),
        ({"rank": 0}, "PowerSGDExtension(rank=0): expected a whole number >= 1."),
        ({"rank": 1.5}, "PowerSGDExtension(rank=1.5): expected a whole number >= 1."),
        ({"warmup": 1}, "PowerSGDExtension(warmup=1) is too short: with error_feedback or warm_start, PowerSGD needs "
                        "at least 2 steps of plain all-reduce while DDP settles its buckets; pass warmup=2 or more."),
        ({"warmup": -1}, "PowerSGDExtension(warmup=-1): expected a whole number >= 0."),
        ({"min_compression_rate": 0}, "PowerSGDExtension(min_compression_rate=0) must be positive."),
    ],
)
def test_bad_options_are_refused_by_name(options: dict[str, object], message: str) -> None:
    with pytest.raises(core.ConfigurationError) as refused:
        PowerSGDExtension(**options)  # type: ignore[arg-type]
    assert str(refused.value) == message


def test_no_warmup_is_allowed_without_error_feedback_or_warm_start() -> None:
    extension = PowerSGDExtension(warmup=0, error_feedback=False, warm_start=False)
    state, hook = extension.communication_hook()
    assert state.start_powerSGD_iter == 0 and hook is powerSGD_hook.powerSGD_hook


def test_each_mode_picks_its_torch_hook() -> None:
    state, hook = PowerSGDExtension(rank=3, warmup=7, min_compression_rate=4).communication_hook()
    assert isinstance(state, powerSGD_hook.PowerSGDState)
    assert (state.matrix_approximation_rank, state.start_powerSGD_iter, state.min_compression_rate) == (3, 7, 4)
    assert (state.use_error_feedback, state.warm_start) == (True, True)
    assert hook is powerSGD_hook.powerSGD_hook  # no process group yet: nothing to keep in order
    fp16_state, fp16_hook = PowerSGDExtension(fp16=True, powersgd=False).communication_hook()
    assert fp16_state is None and fp16_hook is default_hooks.fp16_compress_hook
    both_state, both_hook = PowerSGDExtension(fp16=True).communication_hook()
    assert isinstance(both_state, powerSGD_hook.PowerSGDState)
    assert both_hook not in (powerSGD_hook.powerSGD_hook, default_hooks.fp16_compress_hook)


def test_selected_by_alias_with_defaults() -> None:
    active = core.resolve(accelerator="cpu", strategy="ddp", devices=2, plugins=["powersgd"])
    extension = active.extensions["powersgd"]
    assert isinstance(extension, PowerSGDExtension)
    assert (extension.rank, extension.warmup, extension.fp16, extension.powersgd) == (1, 10, False, True)
    assert active.config.distributions["extension:powersgd"] == "core-powersgd"


def test_a_strategy_without_ddp_gets_a_warning() -> None:
    with pytest.warns(core.CoreWarning, match="the strategy 'single_device' does not wrap modules in it"):
        core.resolve(accelerator="cpu", strategy="single_device", devices=1, plugins=["powersgd"])


class NotDDPStrategy:
    """A strategy whose strategy_configure_ddp returns something that takes no communication hook."""

    kind = "strategy"
    name = "not_ddp"

    @core.hookimpl
    def strategy_launch(self, function, args, kwargs):  # type: ignore[no-untyped-def]
        return function(*args, **kwargs)

    @core.hookimpl
    def strategy_setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    @core.hookimpl
    def strategy_configure_ddp(self, module: torch.nn.Module, device_ids: Sequence[int] | None) -> torch.nn.Module:
        return module

    @core.hookimpl
    def strategy_reduce(self, tensor, group, reduce_op):  # type: ignore[no-untyped-def]
        return tensor

    @core.hookimpl
    def strategy_all_gather(self, tensor, group, sync_grads):  # type: ignore[no-untyped-def]
        return tensor

    @core.hookimpl
    def strategy_broadcast(self, obj, src):  # type: ignore[no-untyped-def]
        return obj

    @core.hookimpl
    def strategy_barrier(self, name):  # type: ignore[no-untyped-def]
        return None


def test_a_module_without_comm_hooks_is_refused_naming_it() -> None:
    active = core.resolve(accelerator="cpu", strategy=NotDDPStrategy(), devices=1, plugins=["powersgd"])
    with pytest.raises(core.ConfigurationError, match="got a Linear, which has no register_comm_hook"):
        active.hook.strategy_configure_ddp(module=torch.nn.Linear(2, 2), device_ids=None)
