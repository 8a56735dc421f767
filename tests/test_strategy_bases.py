"""Strategy families share a base in the core, not in a plugin: no installed strategy derives from another plugin's.

Every entry point of the ``core.strategies`` group of every installed distribution is loaded and its class's MRO
read. A class defined in a top-level package other than the strategy's own and other than ``core`` (a class of
another plugin distribution) fails the test, unless the pair is in :data:`EXTENSIONS`: a plugin documented as an
extension of another, which declares that plugin as a dependency. The list is empty: ddp, fsdp, deepspeed,
model_parallel and pipeline derive from :class:`core.toolkit.strategies.ParallelStrategy`.
"""

from __future__ import annotations

import inspect
from importlib import metadata
from typing import Final

import pytest

from core.toolkit.strategies import ParallelStrategy, SingleDeviceStrategy

EXTENSIONS: Final[frozenset[tuple[str, str]]] = frozenset()
"""(the strategy's top-level package, the package whose class it may derive from): documented extensions only."""

GROUP: Final = "core.strategies"


def _entry_points() -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=GROUP), key=lambda entry: (entry.value, entry.name))


def _strategy_class(entry: metadata.EntryPoint) -> type:
    target = entry.load()
    if inspect.isclass(target):
        return target
    return type(target())  # a factory: what it returns is the strategy


def _package(cls: type) -> str:
    return cls.__module__.split(".")[0]


def test_the_installed_strategies_include_the_process_group_families() -> None:
    names = {entry.name for entry in _entry_points()}
    assert {"single_device", "ddp", "fsdp", "model_parallel", "pipeline", "deepspeed"} <= names


@pytest.mark.parametrize("entry", _entry_points(), ids=lambda entry: f"{entry.name}={entry.value}")
def test_no_strategy_derives_from_another_plugins_class(entry: metadata.EntryPoint) -> None:
    try:
        cls = _strategy_class(entry)
    except ImportError as error:  # a strategy whose optional dependency is missing here (core-tpu without torch_xla)
        pytest.skip(f"{entry.value} does not import here: {error}")
    own = _package(cls)
    foreign = [
        f"{base.__module__}.{base.__qualname__}"
        for base in cls.__mro__
        if _package(base) not in {own, "core", "builtins"} and (own, _package(base)) not in EXTENSIONS
    ]
    assert foreign == [], (
        f"The strategy {entry.name!r} ({cls.__module__}.{cls.__qualname__}) derives from another plugin's classes "
        f"{foreign}. Derive from core.toolkit.strategies.ParallelStrategy (or SingleDeviceStrategy); if it really is "
        f"an extension of that plugin, document it and add it to EXTENSIONS in this file."
    )


@pytest.mark.parametrize("alias", ["ddp", "ddp_spawn", "fsdp", "model_parallel", "pipeline", "deepspeed"])
def test_the_process_group_strategies_derive_from_the_cores_parallel_strategy(alias: str) -> None:
    (entry,) = [entry for entry in _entry_points() if entry.name == alias]
    cls = _strategy_class(entry)
    assert issubclass(cls, ParallelStrategy) and issubclass(cls, SingleDeviceStrategy)
