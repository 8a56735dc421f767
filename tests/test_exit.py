"""A process that built a Lite freezes the garbage collector's objects in its last exit handler (core/_exit.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# An exit handler registered before the Lite is built runs after the Lite's (handlers run last-registered first):
# it sees what core's handler left. Objects created after the Lite (a reference cycle) are collected as before.
SCRIPT = textwrap.dedent("""
    import atexit, gc, weakref
    atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
    from core import Lite
    lite = Lite(accelerator="cpu", devices=1)
    print("frozen while running:", gc.get_freeze_count() > 0, flush=True)

    class Node:
        pass

    node = Node()
    node.self = node
    alive = weakref.ref(node)
    del node
    gc.collect()
    print("cycle collected:", alive() is None, flush=True)
""")


@pytest.mark.parametrize(("setting", "frozen"), [(None, True), ("0", False)])
def test_the_last_exit_handler_freezes_unless_turned_off(setting: str | None, frozen: bool) -> None:
    environment = {key: value for key, value in os.environ.items() if key != "CORE_GC_FREEZE_AT_EXIT"}
    if setting is not None:
        environment["CORE_GC_FREEZE_AT_EXIT"] = setting
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                            env=environment | {"OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "frozen while running: False", "cycle collected: True", f"frozen at exit: {frozen}",
    ], result.stdout
