"""A run's teardown waits for gloo's worker threads to go idle: the process then ends cleanly.

A gloo worker thread frees a finished operation's tensors after the waiting rank moved on; freeing one Python knew
takes the GIL, and a worker that takes it while the interpreter shuts down aborts the process ("terminate called
without an active exception", exit 134) after a run that finished. Found as a rare abort at the end of DeepSpeed
ZeRO-3 jobs, whose process groups DeepSpeed keeps past the teardown. The job below provokes the same thing on
purpose, with real processes and gloo on loopback: each rank keeps a group of its own and leaves an all-gather on it
whose output, once the operation is freed on the worker, runs a 1.5-second callback (a weakref finalizer) on that
worker, while the rank function returns and the script ends. Without
:func:`core.toolkit.strategies._settle.settle` in the teardown the ranks abort (checked by making it return at
once); with it both exit 0 and both callbacks ran to their end.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch.distributed as dist

from core.toolkit.strategies._settle import settle

# What both jobs start with: a callback that runs Python code for 1.5 s on whichever thread frees the tensor it is
# attached to, and writes a file when it ends.
PREAMBLE = textwrap.dedent(
    """
    import os, sys, time, weakref
    from pathlib import Path
    import torch, torch.distributed as dist
    import core

    OUT = Path(sys.argv[1])

    def busy(rank):
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # Python code on gloo's worker thread, taking the GIL over and over
            pass
        (OUT / f"callback-{rank}").write_text("done")
    """
)

JOB = PREAMBLE + textwrap.dedent(
    """
    GROUPS = []  # the script keeps its group, as DeepSpeed keeps its own: destroying the world does not free it

    def main(lite):
        group = dist.new_group([0, 1])
        GROUPS.append(group)
        if lite.global_rank == 1:
            time.sleep(0.5)  # rank 0's all-gather waits for this one, then is freed on its worker
        gathered = [torch.empty(4) for _ in range(2)]
        work = dist.all_gather(gathered, torch.ones(4), group=group, async_op=True)
        weakref.finalize(gathered[0], busy, lite.global_rank)
        del gathered, work  # the worker thread now holds the operation's last reference
        if lite.global_rank == 1:
            time.sleep(0.7)  # rank 0 reaches the teardown barrier first and is released with rank 1
        return None

    core.Lite(accelerator="cpu", strategy="ddp", devices=2).launch(main)
    (OUT / f"ended-{int(__import__('os').environ.get('LOCAL_RANK', '0'))}").write_text("done")
    """
)


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
def test_a_worker_freeing_tensors_after_the_run_does_not_abort_the_process(tmp_path: Path) -> None:
    _run_job(tmp_path, JOB)


AFTER_THE_RUN = PREAMBLE + textwrap.dedent(
    """
    MODULES = []  # the script keeps its sharded module: the run keeps the default group for it until exit

    def main(lite):
        MODULES.append(lite.setup_module(torch.nn.Linear(4, 4)))

    core.Lite(accelerator="cpu", strategy="fsdp", devices=2).launch(main)
    # After the run, as a user gathers a sharded module's weights (full_tensor()): a collective on the kept group
    rank = dist.get_rank()
    if rank == 1:
        time.sleep(0.5)  # rank 0's all-gather waits for this one, then is freed on its worker
    gathered = [torch.empty(4) for _ in range(2)]
    work = dist.all_gather(gathered, torch.ones(4), async_op=True)
    weakref.finalize(gathered[0], busy, rank)
    del gathered, work  # the worker thread now holds the operation's last reference; the script ends
    (OUT / f"ended-{rank}").write_text("done")
    """
)


def _run_job(tmp_path: Path, job: str) -> None:
    script = tmp_path / "job.py"
    script.write_text(job)
    environment = {key: value for key, value in os.environ.items()
                   if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"}}
    environment["OMP_NUM_THREADS"] = "1"
    result = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                            timeout=150, env=environment, cwd=tmp_path)
    report = f"exit {result.returncode}\n--- stderr ---\n{result.stderr[-4000:]}"
    assert "terminate called" not in result.stderr, report
    assert result.returncode == 0, report
    assert sorted(path.name for path in tmp_path.glob("callback-*")) == ["callback-0", "callback-1"], report
    assert sorted(path.name for path in tmp_path.glob("ended-*")) == ["ended-0", "ended-1"], report


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.skipif(importlib.util.find_spec("core_fsdp") is None, reason="core-fsdp is not installed")
def test_a_collective_on_the_group_kept_for_a_sharded_module_is_settled_before_the_exit_destroys_it(
    tmp_path: Path,
) -> None:
    """The group a module left sharded needs is destroyed at exit (core.toolkit.strategies._sharding): an operation
    the script ran on it after the run (a ``full_tensor()`` of the weights) is freed on gloo's worker first. Found as
    a rare abort of tests/migration's p09 program on rank 1, which gathers its FSDP weights and ends."""
    _run_job(tmp_path, AFTER_THE_RUN)


@pytest.fixture
def gloo_group() -> object:
    """A one-process gloo group of this test process (its worker threads are real)."""
    dist.init_process_group("gloo", store=dist.HashStore(), world_size=1, rank=0)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


class _Worker(threading.Thread):
    """A thread named as gloo's workers are, doing what the test gives it: settle judges it like a real one."""

    def __init__(self, action: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.action = action
        self.named = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text("pt_gloo_runloop")
        self.named.set()
        self.action()
        self.done.set()


def _busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _asleep_then_running() -> None:
    time.sleep(0.3)
    _busy(0.3)


@pytest.mark.parametrize("action", [
    pytest.param(lambda: time.sleep(0.6), id="asleep outside a futex (time.sleep)"),
    pytest.param(lambda: threading.Event().wait(0.6), id="in a timed futex wait (the GIL, a collective)"),
    pytest.param(lambda: _busy(0.6), id="running Python code"),
    pytest.param(_asleep_then_running, id="asleep, then running"),
])
@pytest.mark.timeout(60)
def test_settle_waits_for_a_worker_that_is_not_idle(action: Callable[[], object]) -> None:
    worker = _Worker(action)
    worker.start()
    worker.named.wait()
    assert settle(timeout=20)
    assert worker.done.is_set()
    worker.join()


@pytest.mark.timeout(60)
def test_settle_gives_up_after_its_timeout() -> None:
    worker = _Worker(lambda: time.sleep(3))
    worker.start()
    worker.named.wait()
    started = time.monotonic()
    assert not settle(timeout=0.5)
    assert 0.5 <= time.monotonic() - started < 2.5
    worker.join()


@pytest.mark.timeout(60)
def test_settle_counts_a_worker_waiting_on_its_queue_as_idle() -> None:
    queue_empty = threading.Event()
    worker = _Worker(queue_empty.wait)  # an untimed wait, as gloo's worker waits for work
    worker.start()
    worker.named.wait()
    started = time.monotonic()
    assert settle(timeout=10)
    assert time.monotonic() - started < 2.0
    assert not worker.done.is_set()
    queue_empty.set()
    worker.join()


@pytest.mark.timeout(30)
def test_settle_returns_at_once_when_the_workers_are_idle(gloo_group: object) -> None:
    dist.barrier()
    started = time.monotonic()
    assert settle(timeout=10)
    assert time.monotonic() - started < 2.0


def test_settle_without_gloo_threads_returns_at_once() -> None:
    assert not dist.is_initialized()
    started = time.monotonic()
    assert settle(timeout=10)
    assert time.monotonic() - started < 0.5
