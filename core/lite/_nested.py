"""A single-process ``Lite`` created inside a launched run (litgpt's merge on rank 0 of a 2-process fine-tune).

The launcher's variables (``WORLD_SIZE=2``, ``RANK``, ``LOCAL_RANK``, and ``python -m core.run``'s ``CORE_*``
defaults) describe the run already going on in this process, not a second ``Lite(devices=1)`` built inside it. As
Lightning's ``SingleDeviceStrategy`` ignores them, such a Lite resolves and connects with them hidden: world size 1,
rank 0, its own device. Only a Lite asking for exactly one process while another Lite of this process is running
counts as nested; anywhere else the variables are read (and a ``Lite(devices=1)`` under ``WORLD_SIZE=2`` is refused).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

LAUNCH_VARIABLES: Final = (
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE",
    "CORE_ACCELERATOR", "CORE_STRATEGY", "CORE_DEVICES", "CORE_NUM_NODES", "CORE_PRECISION",
)
"""Hidden from a nested single-process Lite: the ranks of torch's launchers and core.run's setting defaults."""

_SINGLE_STRATEGIES: Final = ("auto", "single_device")


class RunningLites:
    """How many Lite runs are going on in this process (entered at connect, left at teardown)."""

    def __init__(self) -> None:
        self.count = 0

    def enter(self) -> None:
        self.count += 1

    def leave(self) -> None:
        self.count = max(0, self.count - 1)


RUNNING: Final = RunningLites()


def is_nested_single_process(settings: Mapping[str, Any]) -> bool:
    """Whether a Lite with these settings is a one-process run inside a running one (see the module docstring)."""
    devices, strategy = settings["devices"], settings["strategy"]
    one_device = devices in (1, "1") or (isinstance(devices, (list, tuple)) and len(devices) == 1)
    return (RUNNING.count > 0 and one_device and settings["num_nodes"] == 1
            and isinstance(strategy, str) and strategy in _SINGLE_STRATEGIES)


@contextmanager
def launch_variables_hidden(hidden: bool) -> Iterator[None]:
    """With ``hidden``, :data:`LAUNCH_VARIABLES` are out of ``os.environ`` inside the block, and put back after."""
    if not hidden:
        yield
        return
    saved = {name: os.environ.pop(name) for name in LAUNCH_VARIABLES if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)
