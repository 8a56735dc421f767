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
from core.lightning._strategy_args import EXAMPLES, FORWARDED, STRATEGY_ARGUMENTS

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
