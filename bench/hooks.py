"""Per-hook cost: each hook the loop calls per step, bound directly, through pluggy, and with a wrapper."""

from __future__ import annotations

import timeit
from collections.abc import Callable
from typing import Any

import torch

import core
from bench._harness import Result
from core import hookimpl


class _PassThrough:
    """An extension that wraps every per-step hook and does nothing else."""

    kind = "extension"
    name = "passthrough"

    @hookimpl(wrapper=True)
    def precision_convert_input(self, data: Any) -> Any:
        return (yield)

    @hookimpl(wrapper=True)
    def precision_autocast(self) -> Any:
        return (yield)

    @hookimpl(wrapper=True)
    def strategy_reduce(self, tensor: Any, group: Any, reduce_op: str) -> Any:
        return (yield)


PER_STEP: dict[str, dict[str, Any]] = {
    "precision_convert_input": {"data": torch.ones(1)},
    "precision_autocast": {},
    "strategy_reduce": {"tensor": torch.ones(1), "group": None, "reduce_op": "sum"},
}


def _per_call_us(function: Callable[..., Any], kwargs: dict[str, Any], number: int) -> float:
    timer = timeit.Timer(lambda: function(**kwargs))
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


def run(number: int) -> list[Result]:
    plain = core.resolve()
    wrapped = core.resolve(plugins=[_PassThrough()])
    results = []
    for name, kwargs in PER_STEP.items():
        bound = _per_call_us(plain.bind(name), kwargs, number)
        through_pluggy = _per_call_us(getattr(plain.hook, name), kwargs, number)
        with_wrapper = _per_call_us(wrapped.bind(name), kwargs, number)
        results.append(
            Result(f"hook {name}: bound vs through pluggy", bound, through_pluggy, "us", "bound < pluggy",
                   met=bound < through_pluggy)
        )
        results.append(
            Result(f"hook {name}: with a wrapper extension (baseline: bound)", with_wrapper, bound, "us",
                   "a few us", met=with_wrapper < 10)
        )
    return results
