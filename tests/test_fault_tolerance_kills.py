"""Real kills: SIGKILL a worker of a torchrun job mid-epoch, and processes in the middle of saves.

``CORE_KILL_TRIALS`` sets how many kills per checkpoint_io the save test makes (3 by default, as `make test` runs
it; 20 for a longer look).
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from core.fault_tolerance import CheckpointDirectory

JOBS = Path(__file__).parent / "checkpoint_jobs"
TRIALS = int(os.environ.get("CORE_KILL_TRIALS", "3"))
_INHERITED = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
              "LOCAL_WORLD_SIZE", "CORE_RUN_ERROR_FILE", "CORE_RUN_PARENT_PID", "CORE_GLOBAL_SEED"}


def environment() -> dict[str, str]:
    clean = {key: value for key, value in os.environ.items()
             if key not in _INHERITED and not key.startswith(("SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_"))}
    clean.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    return clean


def session_processes(session: int) -> list[int]:
    """Pids of the live processes of a session (every process a job started, however deep)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] != "Z" and int(fields[3]) == session:
                    found.append(int(entry))
    return found


@contextlib.contextmanager
def started(arguments: list[str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    """A job in its own session; every process of it is killed on the way out."""
    process = subprocess.Popen(arguments, cwd=cwd, env=environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def run_to_end(arguments: list[str], cwd: Path, timeout: float) -> str:
    with started(arguments, cwd) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{arguments} did not finish within {timeout} s")
        assert process.returncode == 0, output[-6000:]
        return output


def same_weights(left: Path, right: Path) -> bool:
    first, second = torch.load(left, weights_only=True), torch.load(right, weights_only=True)
    return first.keys() == second.keys() and all(torch.equal(first[name], second[name]) for name in first)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_torchrun_restarts_a_killed_worker_and_the_run_ends_bitwise_like_an_uninterrupted_one(tmp_path: Path) -> None:
    script = str(JOBS / "resumable_train.py")
    run_to_end([sys.executable, script, str(tmp_path / "reference")], tmp_path, timeout=150)

    # 2 ranks x batch 16 over 320 samples: 10 steps per epoch, checkpoints at multiples of 10. A step in the
    # middle of epoch 1 or 2, the rank at random.
    kill_at = random.choice([step for step in range(11, 30) if step % 10])
    kill_rank = random.choice([0, 1])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                "--max-restarts", "3", "--monitor-interval", "0.2"]
    output = run_to_end([*torchrun, script, str(tmp_path / "killed"), "--kill-at", str(kill_at),
                         "--kill-rank", str(kill_rank)], tmp_path, timeout=240)

    # The first attempt never finished (its rank was killed); the second resumed and did.
    assert not (tmp_path / "killed" / "progress-0.txt").exists(), output[-4000:]
    progress = (tmp_path / "killed" / "progress-1.txt").read_text()
    assert f"attempt 1 resumed at step {kill_at // 10 * 10} epoch {kill_at // 10 - 1}" in progress, (kill_at, progress)
    assert same_weights(tmp_path / "killed" / "final.pt", tmp_path / "reference" / "final.pt"), (kill_at, kill_rank)


class Lines:
    """The lines a job prints, read by a thread, so that a test can wait for one with a timeout."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert process.stdout is not None
        stream = process.stdout

        def forward_lines() -> None:
            for line in stream:
                self.lines.put(line)

        threading.Thread(target=forward_lines, daemon=True).start()

    def wait_for(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if line.startswith(prefix):
                return line.strip()
        printed = "".join(self.seen)[-6000:]
        pytest.fail(f"no line starting with {prefix!r} within {timeout} s; the job printed:\n{printed}")


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("io", ["torch", "async", "distributed"])
def test_a_kill_at_any_moment_of_a_save_leaves_the_newest_complete_checkpoint_loadable(tmp_path: Path, io: str) -> None:
    """Each trial restarts the job, which restores and checks the newest complete checkpoint, then saves back to
    back until it is SIGKILLed at a random moment (distributed: a random one of its 2 ranks)."""
    directory = tmp_path / "checkpoints"
    arguments = [sys.executable, str(JOBS / "save_loop.py"), str(directory), io]
    random_delays = random.Random(os.getpid())
    for trial in range(TRIALS + 1):
        expected = CheckpointDirectory(str(directory)).newest_complete() or 0
        with started(arguments, tmp_path) as process:
            lines = Lines(process)
            restored = lines.wait_for("RESTORED", timeout=120)
            assert restored == f"RESTORED {expected}", (trial, restored, ''.join(lines.seen))
            lines.wait_for("READY", timeout=30)
            if trial == TRIALS:
                break  # the last start only checks what the last kill left
            time.sleep(random_delays.uniform(0.3, 1.5))
            victims = session_processes(process.pid)
            os.kill(random_delays.choice(victims), signal.SIGKILL)
        steps = CheckpointDirectory(str(directory)).steps()
        assert sum(steps.values()) <= 3, steps  # keep=2, plus one whose marker landed just before the kill
    assert CheckpointDirectory(str(directory)).newest_complete(), "no checkpoint was ever completed"
