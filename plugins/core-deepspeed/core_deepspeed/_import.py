"""Importing deepspeed, only when a run needs it: it takes seconds and chooses its accelerator at import.

Importing ``core_deepspeed`` imports neither deepspeed nor anything it pulls in, so resolving a run and
``python -m core.plugins`` stay fast; the strategy imports it in each process when the process group is set up.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Final

from core import PluginUnavailableError

INSTALL_HINT: Final = "pip install 'deepspeed>=0.19,<0.20' (a dependency of core-deepspeed)"

# Our accelerator aliases -> DeepSpeed's accelerator names, for DS_ACCELERATOR.
_DS_ACCELERATORS: Final = {"cpu": "cpu"}

# The shared-memory all-reduce of DeepSpeed's CPU accelerator serves inference only, and DeepSpeed compiles it
# with a C++ toolchain when its communication backend starts (minutes on a busy machine). Training never uses it.
_SHM_COMM_OP: Final = "deepspeed_shm_comm"


# Modules deepspeed imports at its own import only for features a run through core never uses: its autotuner
# (deepspeed.autotuning, pulled in by deepspeed.runtime.config) imports MLflow, when installed, to log autotuning
# experiments; MLflow brings pandas, about 0.4 s of CPU in every rank of every run. They are hidden while deepspeed is
# first imported, unless this process imported them already; a later ``import mlflow`` works as usual.
_UNUSED_AT_IMPORT: Final = ("mlflow",)


@contextlib.contextmanager
def _hidden(names: tuple[str, ...]) -> Iterator[None]:
    """``import name`` fails (ImportError) inside the block, for each name not imported yet."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # the import system's "not importable" marker
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


def unavailable_reason() -> str | None:
    """Why deepspeed cannot be used in this process, or ``None`` when it imports."""
    try:
        # DeepSpeed's logger writes to the stdout it finds at import; give it stderr, so that a script's output
        # (and ``python -m core.plugins --check --json``) stays its own.
        with contextlib.redirect_stdout(sys.stderr), _hidden(() if "deepspeed" in sys.modules else _UNUSED_AT_IMPORT):
            importlib.import_module("deepspeed")
    except Exception as error:  # any failure at import makes the strategy unusable; report it, do not crash --check
        return f"deepspeed is not importable here ({type(error).__name__}: {error}); install it with: {INSTALL_HINT}"
    return None


def import_deepspeed(accelerator: str) -> ModuleType:
    """Import deepspeed for a run on ``accelerator``; raise :class:`core.PluginUnavailableError` if it fails."""
    wanted = _DS_ACCELERATORS.get(accelerator)
    if wanted is not None:
        # DeepSpeed reads DS_ACCELERATOR once, when it is first imported; a user's explicit choice stays.
        os.environ.setdefault("DS_ACCELERATOR", wanted)
    reason = unavailable_reason()
    if reason is not None:
        raise PluginUnavailableError(f"The DeepSpeed strategy cannot run: {reason}.")
    deepspeed = importlib.import_module("deepspeed")
    _check_accelerator(deepspeed, accelerator, wanted)
    if accelerator == "cpu":
        importlib.import_module("deepspeed.ops").__compatible_ops__[_SHM_COMM_OP] = False
    return deepspeed


def _check_accelerator(deepspeed: ModuleType, accelerator: str, wanted: str | None) -> None:
    chosen = deepspeed.accelerator.get_accelerator().device_name()
    if wanted is not None and chosen != wanted:
        raise PluginUnavailableError(
            f"DeepSpeed runs on its {chosen!r} accelerator in this process, but the run's accelerator is "
            f"{accelerator!r}: deepspeed was imported before the strategy could set DS_ACCELERATOR={wanted}, or "
            f"DS_ACCELERATOR={os.environ.get('DS_ACCELERATOR')!r} is set. Set DS_ACCELERATOR={wanted} or do not "
            f"import deepspeed before Lite sets up the run."
        )
