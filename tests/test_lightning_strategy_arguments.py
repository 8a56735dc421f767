"""Every argument of Lightning 2.6's FSDPStrategy, DDPStrategy, DeepSpeedStrategy and ModelParallelStrategy (fabric
and pytorch) is taken by core's class of the same name or refused by name with a ``core.ConfigurationError``, never a
bare ``TypeError`` (the table: ``core/lightning/_strategy_args.py``). Where Lightning's source is at hand
(``/work/lightning-2.6.5``) the table is checked against its signatures, so a name Lightning adds is noticed.
"""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path
from typing import Any

import pytest

import core
from core.lightning._strategy_args import EXAMPLES, FORWARDED, STRATEGY_ARGUMENTS, TAKEN
from core.toolkit.strategies import IgnoredArgumentWarning

LIGHTNING = Path("/work/lightning-2.6.5/src/lightning")


def _core_class(target: str) -> Any:
    module, name = target.split(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as error:
        pytest.skip(f"{module} is not installed: {error}")


def _cases() -> list[tuple[str, str, str]]:
    cases = [(path, target, name) for path, (target, names) in STRATEGY_ARGUMENTS.items() for name in names]
    cases += [(f"**kwargs of {target}", target, name) for target, names in FORWARDED.items() for name in names]
    return cases


@pytest.mark.parametrize(("lightning", "target", "name"), _cases())
def test_each_lightning_argument_is_taken_or_refused_by_name(lightning: str, target: str, name: str) -> None:
    cls = _core_class(target)
    value = EXAMPLES.get(name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cls(**{name: value})
    except core.ConfigurationError as error:
        assert name in str(error), f"{lightning}({name}=...) was refused without naming it: {error}"
    except Exception as error:  # the point: nothing but the project's error
        pytest.fail(f"{target}({name}={value!r}) raised {type(error).__name__}: {error} (Lightning: {lightning})")


def _lightning_signature(path: str) -> set[str]:
    _, package, _, name = path.split(".")
    tree = ast.parse((LIGHTNING / package / "strategies" / f"{_source_file(name)}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            init = next(item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "__init__")
            return {argument.arg for argument in [*init.args.args[1:], *init.args.kwonlyargs]}
    raise AssertionError(f"{name} not found in Lightning's {package}/strategies")


def _source_file(name: str) -> str:
    return {"FSDPStrategy": "fsdp", "DDPStrategy": "ddp", "DeepSpeedStrategy": "deepspeed",
            "ModelParallelStrategy": "model_parallel"}[name]


@pytest.mark.skipif(not LIGHTNING.is_dir(), reason="Lightning 2.6.5's source is not unpacked here")
@pytest.mark.parametrize("lightning", sorted(STRATEGY_ARGUMENTS))
def test_the_table_holds_every_argument_of_lightnings_signature(lightning: str) -> None:
    assert set(STRATEGY_ARGUMENTS[lightning][1]) == _lightning_signature(lightning)


@pytest.mark.parametrize(("target", "name"), [(target, name) for target, names in TAKEN.items() for name in names])
def test_arguments_with_a_meaning_here_are_taken(target: str, name: str) -> None:
    cls = _core_class(target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cls(**{name: EXAMPLES.get(name)})


# -- FSDPStrategy: Lightning's FSDP1 arguments in FSDP2's terms ----------------------------------------------------


def test_sharding_strategies_map_to_reshard_after_forward_and_the_hybrid_mesh() -> None:
    from core_fsdp import FSDPStrategy
    from torch.distributed.fsdp import ShardingStrategy

    assert FSDPStrategy().reshard_after_forward is True
    assert FSDPStrategy(sharding_strategy="FULL_SHARD").reshard_after_forward is True
    assert FSDPStrategy(sharding_strategy="SHARD_GRAD_OP").reshard_after_forward is False
    assert FSDPStrategy(sharding_strategy=ShardingStrategy.SHARD_GRAD_OP).reshard_after_forward is False
    hybrid = FSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh=(2, 4))
    assert hybrid.hybrid and hybrid.hybrid_shape == (2, 4) and hybrid.reshard_after_forward is True
    zero2 = FSDPStrategy(sharding_strategy="_HYBRID_SHARD_ZERO2")
    assert zero2.hybrid and zero2.hybrid_shape is None and zero2.reshard_after_forward is False
    with pytest.raises(core.ConfigurationError, match="strategy='ddp'"):
        FSDPStrategy(sharding_strategy="NO_SHARD")
    with pytest.raises(core.ConfigurationError, match="not a sharding strategy; expected one of"):
        FSDPStrategy(sharding_strategy="FULL")
    with pytest.raises(core.ConfigurationError, match="only sharding_strategy='HYBRID_SHARD' uses"):
        FSDPStrategy(device_mesh=(1, 2))
    with pytest.raises(core.ConfigurationError, match="a DeviceMesh object cannot be passed"):
        FSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh="mesh")  # type: ignore[arg-type]


def test_fsdp1_objects_are_converted_and_the_rest_noted_or_refused() -> None:
    import torch
    from core_fsdp import FSDPStrategy
    from torch.distributed.fsdp import CPUOffload, MixedPrecision, MixedPrecisionPolicy

    assert FSDPStrategy(cpu_offload=CPUOffload(offload_params=True)).cpu_offload is True
    assert FSDPStrategy(cpu_offload=None).cpu_offload is False
    converted = FSDPStrategy(mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    assert converted.mixed_precision == MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    with pytest.warns(core.CoreDeprecationWarning, match=r"activation_checkpointing_policy=\{Linear\}"):
        assert FSDPStrategy(activation_checkpointing=torch.nn.Linear).activation_checkpointing_policy == {
            torch.nn.Linear}
    with pytest.raises(core.ConfigurationError, match="pass only the latter"):
        FSDPStrategy(activation_checkpointing=torch.nn.Linear, activation_checkpointing_policy={torch.nn.Linear})
    class Noted(FSDPStrategy):  # the note is once per class and name in a process: a class of this test's own
        pass

    with pytest.warns(IgnoredArgumentWarning, match="no all-gather rate limiter"):
        Noted(limit_all_gathers=True)  # type: ignore[call-arg]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Noted(limit_all_gathers=True)  # type: ignore[call-arg]  # once only
    with pytest.raises(core.ConfigurationError, match="param_init_fn: create the model inside"):
        FSDPStrategy(param_init_fn=lambda module: None)  # type: ignore[call-arg]
