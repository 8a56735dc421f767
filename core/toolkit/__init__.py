"""The plugin toolkit: what a launcher, environment, strategy or checkpoint_io needs besides the hooks.

Everything a first-party plugin uses from the core lives here or in :mod:`core` itself, so that an outside
author can copy any first-party plugin and depend on documented names only. These names are covered by the
compatibility policy (docs/compatibility.md): they change only with a deprecation period, like hooks.

Names that need torch are imported on first use, so ``import core.toolkit`` stays as light as ``import core``.

**Process supervision** (for strategies that start their own processes, like core-ddp's launcher):
:class:`Supervisor` watches the worker processes of a job and stops the others when one fails;
:class:`Worker` is one started process; :func:`start_worker` starts one with the job's variables;
:class:`Failure` is what a failed rank reported; :func:`write_failure` (in a rank) records the exception for
the launcher; :func:`abort` stops a job after a failure; :func:`supervised` says whether this process was
started by a supervisor; :func:`watch_parent` and :func:`set_parent_death_signal` make a rank exit when its
launcher dies; :data:`ERROR_FILE_VARIABLE` and :data:`PARENT_PID_VARIABLE` name the variables that carry
this to a rank; a rank exiting with :data:`PREEMPTED_EXIT_CODE` stopped on a preemption notice after saving,
which a launcher reports as a stop, not a failure.

**Environments and rendezvous**: :class:`ExportedVariables` sets ``MASTER_ADDR``-style variables for a run
and restores them at teardown; :func:`bind_listener` binds a listening socket before any rank starts (port 0:
no race with other programs), and a launcher hands its descriptor down under :data:`LISTEN_FD_VARIABLE` for
the serving rank to take with :func:`take_inherited_listener`; :func:`is_loopback` tells whether an address is
this machine's; :func:`find_free_port` asks the OS for a free port (racy: prefer :func:`bind_listener`);
:func:`is_interactive` says whether this is a REPL or notebook kernel.

**Files**: :func:`atomic_write` writes through a temporary file, fsync and rename (local paths) or a single
upload (fsspec URLs), so a reader never sees half a file; :func:`atomic_torch_save` does that for
``torch.save``; :func:`safe_torch_load` and :func:`torch_load_from` load with ``weights_only`` and turn
torch's unpickling errors into :class:`core.CheckpointError`; :func:`local_path`, :func:`is_url`,
:func:`filesystem`, :func:`open_for_reading`, :func:`exists`, :func:`list_names`, :func:`remove_path` and
:func:`join` handle local paths and fsspec URLs alike.

**Tensors and modules**: :func:`apply_to_tensors` maps a function over the tensors of nested lists, tuples
and dicts; :func:`hook_keys` and :func:`remove_added` record a module tree's hooks before a wrapper and remove
what the wrapper added at teardown; :func:`to_checkpoint` and :func:`restore_state` convert between a
``Lite.save`` state (modules, optimizers, plain values) and what is written, as the built-in strategies do.

**The Trainer's objects**: the Trainer sets its Module up wrapped in a :class:`StepModule` (whose forward runs
the current step method, the user's Module being ``step_module.module``) and saves its optimizers and schedulers
as :class:`StatefulList` entries; a strategy that restructures the model or saves optimizers its own way
recognises them by these classes.

**Whole numbers**: :func:`is_whole` says whether a value is an ``int`` that is not a ``bool`` (and at least a
minimum); :func:`check_whole` returns an argument that is one or raises :class:`core.ConfigurationError` naming
``Owner(name=value)``; :func:`read_whole` parses the text a launcher wrote into an environment variable (digits
only: no sign, no fraction) and names the variable, who sets it and the fix when it is not a whole number.

**Strategies**: :class:`SingleDeviceStrategy` is the single-process reference strategy (``single_device``)
that data-parallel strategies extend; :func:`check_reduce_op` validates ``reduce_op`` against
:data:`REDUCE_OPS`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

# Public name -> (module, attribute), imported on first use.
_LAZY: Final[dict[str, tuple[str, str]]] = {
    # process supervision
    "ERROR_FILE_VARIABLE": ("core.toolkit._supervisor", "ERROR_FILE_VARIABLE"),
    "PARENT_PID_VARIABLE": ("core.toolkit._supervisor", "PARENT_PID_VARIABLE"),
    "PREEMPTED_EXIT_CODE": ("core.toolkit._supervisor", "PREEMPTED_EXIT_CODE"),
    "Failure": ("core.toolkit._supervisor", "Failure"),
    "Supervisor": ("core.toolkit._supervisor", "Supervisor"),
    "Worker": ("core.toolkit._supervisor", "Worker"),
    "abort": ("core.toolkit._supervisor", "abort"),
    "set_parent_death_signal": ("core.toolkit._supervisor", "set_parent_death_signal"),
    "start_worker": ("core.toolkit._supervisor", "start_worker"),
    "supervised": ("core.toolkit._supervisor", "supervised"),
    "watch_parent": ("core.toolkit._supervisor", "watch_parent"),
    "write_failure": ("core.toolkit._supervisor", "write_failure"),
    # environments
    "ExportedVariables": ("core.builtin.environments", "ExportedVariables"),
    "find_free_port": ("core.builtin.environments", "find_free_port"),
    "is_interactive": ("core.registry._resolver", "is_interactive"),
    "LISTEN_FD_VARIABLE": ("core.toolkit._listeners", "LISTEN_FD_VARIABLE"),
    "bind_listener": ("core.toolkit._listeners", "bind_listener"),
    "is_loopback": ("core.toolkit._listeners", "is_loopback"),
    "take_inherited_listener": ("core.toolkit._listeners", "take_inherited_listener"),
    # files
    "atomic_write": ("core.toolkit._storage", "atomic_write"),
    "atomic_torch_save": ("core.builtin.checkpoint_io", "atomic_torch_save"),
    "safe_torch_load": ("core.builtin.checkpoint_io", "safe_torch_load"),
    "torch_load_from": ("core.builtin.checkpoint_io", "torch_load_from"),
    "local_path": ("core.toolkit._storage", "local_path"),
    "is_url": ("core.toolkit._storage", "is_url"),
    "filesystem": ("core.toolkit._storage", "filesystem"),
    "open_for_reading": ("core.toolkit._storage", "open_for_reading"),
    "exists": ("core.toolkit._storage", "exists"),
    "list_names": ("core.toolkit._storage", "list_names"),
    "remove_path": ("core.toolkit._storage", "remove"),
    "join": ("core.toolkit._storage", "join"),
    # tensors, modules, checkpoint state
    "apply_to_tensors": ("core.toolkit._collections", "apply_to_tensors"),
    "hook_keys": ("core.toolkit._module_additions", "hook_keys"),
    "remove_added": ("core.toolkit._module_additions", "remove_added"),
    "to_checkpoint": ("core.toolkit._checkpoint_state", "to_checkpoint"),
    "restore_state": ("core.toolkit._checkpoint_state", "restore"),
    "is_stateful": ("core.toolkit._checkpoint_state", "is_stateful"),
    "PRECISION_KEY": ("core.toolkit._checkpoint_state", "PRECISION_KEY"),
    "StatefulList": ("core.toolkit._trainer_objects", "StatefulList"),
    "StepModule": ("core.toolkit._trainer_objects", "StepModule"),
    # whole numbers
    "is_whole": ("core._checks", "is_whole"),
    "check_whole": ("core._checks", "check_whole"),
    "read_whole": ("core._checks", "read_whole"),
    # strategies
    "SingleDeviceStrategy": ("core.builtin.strategies", "SingleDeviceStrategy"),
    "check_reduce_op": ("core.builtin.strategies", "check_reduce_op"),
    "REDUCE_OPS": ("core.builtin.strategies", "REDUCE_OPS"),
}

if TYPE_CHECKING:
    from core._checks import check_whole, is_whole, read_whole
    from core.builtin.checkpoint_io import atomic_torch_save, safe_torch_load, torch_load_from
    from core.builtin.environments import ExportedVariables, find_free_port
    from core.builtin.strategies import REDUCE_OPS, SingleDeviceStrategy, check_reduce_op
    from core.registry._resolver import is_interactive
    from core.toolkit._checkpoint_state import PRECISION_KEY, is_stateful, to_checkpoint
    from core.toolkit._checkpoint_state import restore as restore_state
    from core.toolkit._collections import apply_to_tensors
    from core.toolkit._listeners import LISTEN_FD_VARIABLE, bind_listener, is_loopback, take_inherited_listener
    from core.toolkit._module_additions import hook_keys, remove_added
    from core.toolkit._storage import (
        atomic_write,
        exists,
        filesystem,
        is_url,
        join,
        list_names,
        local_path,
        open_for_reading,
    )
    from core.toolkit._storage import remove as remove_path
    from core.toolkit._supervisor import (
        ERROR_FILE_VARIABLE,
        PARENT_PID_VARIABLE,
        PREEMPTED_EXIT_CODE,
        Failure,
        Supervisor,
        Worker,
        abort,
        set_parent_death_signal,
        start_worker,
        supervised,
        watch_parent,
        write_failure,
    )
    from core.toolkit._trainer_objects import StatefulList, StepModule


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'core.toolkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "ERROR_FILE_VARIABLE",
    "LISTEN_FD_VARIABLE",
    "PARENT_PID_VARIABLE",
    "PRECISION_KEY",
    "PREEMPTED_EXIT_CODE",
    "REDUCE_OPS",
    "ExportedVariables",
    "Failure",
    "SingleDeviceStrategy",
    "StatefulList",
    "StepModule",
    "Supervisor",
    "Worker",
    "abort",
    "apply_to_tensors",
    "atomic_torch_save",
    "atomic_write",
    "bind_listener",
    "check_reduce_op",
    "check_whole",
    "exists",
    "filesystem",
    "find_free_port",
    "hook_keys",
    "is_interactive",
    "is_loopback",
    "is_stateful",
    "is_url",
    "is_whole",
    "join",
    "list_names",
    "local_path",
    "open_for_reading",
    "read_whole",
    "remove_added",
    "remove_path",
    "restore_state",
    "safe_torch_load",
    "set_parent_death_signal",
    "start_worker",
    "supervised",
    "take_inherited_listener",
    "to_checkpoint",
    "torch_load_from",
    "watch_parent",
    "write_failure",
]
