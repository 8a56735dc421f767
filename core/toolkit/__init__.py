"""The plugin toolkit: what a launcher, environment, strategy or checkpoint_io needs besides the hooks.

Everything a first-party plugin uses from the core lives here or in :mod:`core` itself, so that an outside
author can copy any first-party plugin and depend on documented names only. These names are covered by the
compatibility policy (docs/compatibility.md): they change only with a deprecation period, like hooks.

``import core.toolkit`` stays as light as ``import core`` (environment plugins read their variables with it): what
needs torch lives in public submodules, :mod:`core.toolkit.tensors`, :mod:`core.toolkit.checkpoint`,
:mod:`core.toolkit.precisions` and :mod:`core.toolkit.strategies`. Their names were once reached here too; that still
works, with a :class:`core.CoreDeprecationWarning` naming the new path (see docs/compatibility.md).

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
:class:`LauncherVariables` reads the whole numbers a launcher sets in each process (with the launcher's words in
every error) and builds the :class:`core.ClusterInfo` from them (:func:`cluster_info_from` builds it from an
environment's own record of the ranks); :func:`check_layout` refuses a ``devices`` x ``num_nodes`` that disagrees
with what the launcher started, each count given as a :class:`Launched` (the number, what the launcher did, and
the fix).

**Files**: :func:`atomic_write` writes through a temporary file, fsync and rename (local paths) or a single
upload (fsspec URLs), so a reader never sees half a file; :func:`local_path`, :func:`is_url`,
:func:`filesystem`, :func:`open_for_reading`, :func:`exists`, :func:`list_names`, :func:`remove_path` and
:func:`join` handle local paths and fsspec URLs alike.

**Outside engines**: :class:`OptionalEngine` imports a library a plugin drives (Ray, Horovod, torchft, hivemind)
only when a run needs it, and says in one sentence why it cannot be used here and the command that fixes it
(``unavailable_reason``, the plugin trait) or raises :class:`core.PluginUnavailableError` (``load``).
:func:`require_accelerator` raises that error, with the way out, when an accelerator plugin cannot run here.
:func:`quieted` holds an engine's logger at a higher level around a call whose messages are expected there.

**Whole numbers**: :func:`is_whole` says whether a value is an ``int`` that is not a ``bool`` (and at least a
minimum); :func:`check_whole` returns an argument that is one or raises :class:`core.ConfigurationError` naming
``Owner(name=value)``; :func:`read_whole` parses the text a launcher wrote into an environment variable (digits
only: no sign, no fraction) and names the variable, who sets it and the fix when it is not a whole number.

**Submodules that import torch**: :mod:`core.toolkit.tensors` (``apply_to_tensors``, the one walker over nested
tensors; ``hook_keys`` and ``remove_added`` for module hooks); :mod:`core.toolkit.checkpoint` (``to_checkpoint``,
``restore_state``, ``atomic_torch_save``, ``safe_torch_load``, ...); :mod:`core.toolkit.strategies`
(``SingleDeviceStrategy``, the reference single-process strategy, and what process-group strategies build on);
:mod:`core.toolkit.precisions` (``LinearFilter``, ``swap_linear_layers``, ``layers_of_type``: what a precision that
replaces layers needs).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Final

from core._checks import check_whole, is_whole, read_whole
from core._errors import CoreDeprecationWarning
from core.registry import is_interactive
from core.toolkit._cluster import Launched, LauncherVariables, check_layout, cluster_info_from
from core.toolkit._engines import OptionalEngine, quieted, require_accelerator
from core.toolkit._environment import ExportedVariables, find_free_port
from core.toolkit._listeners import LISTEN_FD_VARIABLE, bind_listener, is_loopback, take_inherited_listener
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

MOVED: Final[dict[str, str]] = {
    "apply_to_tensors": "core.toolkit.tensors",
    "hook_keys": "core.toolkit.tensors",
    "remove_added": "core.toolkit.tensors",
    "PRECISION_KEY": "core.toolkit.checkpoint",
    "atomic_torch_save": "core.toolkit.checkpoint",
    "is_stateful": "core.toolkit.checkpoint",
    "restore_state": "core.toolkit.checkpoint",
    "safe_torch_load": "core.toolkit.checkpoint",
    "to_checkpoint": "core.toolkit.checkpoint",
    "torch_load_from": "core.toolkit.checkpoint",
    "REDUCE_OPS": "core.toolkit.strategies",
    "SingleDeviceStrategy": "core.toolkit.strategies",
    "check_reduce_op": "core.toolkit.strategies",
    "StatefulList": "core.module",
    "StepModule": "core.module",
}
"""Names this module no longer defines -> their public home. They resolve, with a deprecation warning, until 0.3."""


def __getattr__(name: str) -> Any:
    home = MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'core.toolkit' has no attribute {name!r}")
    warnings.warn(
        f"core.toolkit.{name} moved to {home}.{name} (it needs torch, which core.toolkit no longer imports); "
        f"import it from there: `from {home} import {name}`. The old path works until core 0.3.",
        CoreDeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)


__all__ = [
    "ERROR_FILE_VARIABLE",
    "LISTEN_FD_VARIABLE",
    "PARENT_PID_VARIABLE",
    "PREEMPTED_EXIT_CODE",
    "ExportedVariables",
    "Failure",
    "Launched",
    "LauncherVariables",
    "OptionalEngine",
    "Supervisor",
    "Worker",
    "abort",
    "atomic_write",
    "bind_listener",
    "check_layout",
    "check_whole",
    "cluster_info_from",
    "exists",
    "filesystem",
    "find_free_port",
    "is_interactive",
    "is_loopback",
    "is_url",
    "is_whole",
    "join",
    "list_names",
    "local_path",
    "open_for_reading",
    "quieted",
    "read_whole",
    "remove_path",
    "require_accelerator",
    "set_parent_death_signal",
    "start_worker",
    "supervised",
    "take_inherited_listener",
    "watch_parent",
    "write_failure",
]
