"""Checkpoint safety through `Lite`: a file that would run code when unpickled is refused and runs nothing,
and a save killed half-way leaves the previous checkpoint loadable."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import core


class CreatesMarker:
    """Unpickling this object opens (creates) the marker file: the smallest proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def write_malicious_checkpoint(path: Path, marker: Path) -> None:
    torch.save({"model": {"weight": torch.ones(2)}, "step": 3, "payload": CreatesMarker(marker)}, path)


def load_through_lite(path: Path, **options: Any) -> dict[str, Any]:
    def load(lite: core.Lite) -> dict[str, Any]:
        return lite.load(path, {"step": 0}, **options)

    result = core.Lite(accelerator="cpu", devices=1).launch(load)
    assert result is not None  # one process: rank 0's result
    return result


def test_a_checkpoint_that_would_run_code_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    path, marker = tmp_path / "evil.ckpt", tmp_path / "marker"
    write_malicious_checkpoint(path, marker)

    with pytest.raises(core.CheckpointError) as error:
        load_through_lite(path)

    message = str(error.value)
    assert "Refused to load" in message and "evil.ckpt" in message
    assert "Nothing from it was executed" in message and "weights_only=False" in message
    assert not marker.exists()


def test_weights_only_false_is_the_explicit_opt_in_that_does_run_the_code(tmp_path: Path) -> None:
    # The control for the test above: the file really does run code once the user opts in.
    path, marker = tmp_path / "evil.ckpt", tmp_path / "marker"
    write_malicious_checkpoint(path, marker)

    remainder = load_through_lite(path, weights_only=False)

    assert marker.exists()
    assert set(remainder) == {"model", "payload"}


SAVER = """
    import sys
    import torch
    import core

    path, mode = sys.argv[1], sys.argv[2]
    big = {"generation": 2, "weights": torch.ones(64 * 1024 * 1024)}  # 256 MB

    def main(lite):
        lite.save(path, {"generation": 1, "weights": torch.ones(4)})
        print("first saved", flush=True)
        if mode == "lite":
            lite.save(path, big)
        else:
            torch.save(big, path)  # the non-atomic way, for the control
        print("second saved", flush=True)

    core.Lite(accelerator="cpu", devices=1).launch(main)
"""


def kill_during_second_save(tmp_path: Path, mode: str, attempts: int = 3) -> tuple[Path, str]:
    """Run the saver and SIGKILL it while the big save is being written; return the target and the output.

    On a loaded machine this process may not be scheduled before the save completes; such a run proves
    nothing, so it is tried again in a fresh directory.
    """
    for attempt in range(attempts):
        directory = tmp_path / f"attempt-{attempt}"
        directory.mkdir()
        target, output = _kill_once(directory, mode)
        if "second saved" not in output:
            return target, output
    raise AssertionError(f"The save finished before the kill in {attempts} attempts; the machine is too slow.")


def _kill_once(tmp_path: Path, mode: str) -> tuple[Path, str]:
    script = tmp_path / "saver.py"
    script.write_text(textwrap.dedent(SAVER))
    target = tmp_path / "run.ckpt"
    process = subprocess.Popen(
        [sys.executable, str(script), str(target), mode], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "first saved"
    first_size = target.stat().st_size
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        temporary = [p for p in tmp_path.glob(".run.ckpt.*.tmp") if p.exists()]
        writing = temporary if mode == "lite" else [target]
        sizes = [p.stat().st_size for p in writing if p.exists()]
        if any(size > 1_000_000 and size != first_size for size in sizes):
            break
        time.sleep(0.0005)
    process.send_signal(signal.SIGKILL)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    return target, output


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_previous_checkpoint_loads_after_a_killed_save(tmp_path: Path) -> None:
    target, output = kill_during_second_save(tmp_path, "lite")
    assert "second saved" not in output  # the kill really came during the save

    def load(lite: core.Lite) -> dict[str, Any]:
        return lite.load(target)

    checkpoint = core.Lite(accelerator="cpu", devices=1).launch(load)
    assert checkpoint is not None
    assert checkpoint["generation"] == 1 and torch.equal(checkpoint["weights"], torch.ones(4))
    # What the kill left behind: a partial temporary file next to the target, never the target itself.
    (stray,) = target.parent.glob(".run.ckpt.*.tmp")
    assert 1_000_000 < stray.stat().st_size < 256 * 1024 * 1024


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_same_kill_truncates_a_plain_torch_save(tmp_path: Path) -> None:
    # The control: the kill lands mid-write, so without the atomic rename the old checkpoint is gone.
    target, output = kill_during_second_save(tmp_path, "plain")
    assert "second saved" not in output

    def load(lite: core.Lite) -> dict[str, Any]:
        return lite.load(target)

    with pytest.raises(core.CheckpointError, match="corrupt or truncated"):
        core.Lite(accelerator="cpu", devices=1).launch(load)
