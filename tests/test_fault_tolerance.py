"""Resumable checkpoints for Lite loops, in one process: layout, markers, rotation, cleanup, exact resume."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import core
from core.builtin import async_checkpoint_io
from core.builtin.async_checkpoint_io import AsyncCheckpointIO
from core.fault_tolerance import CheckpointDirectory, ResumableCheckpoints
from core.fault_tolerance import _resumer as _fault_tolerance

JOBS = Path(__file__).parent / "checkpoint_jobs"
sys.path.insert(0, str(JOBS))
import resumable_train  # noqa: E402  (the job script: its loop runs in this process here)

sys.path.remove(str(JOBS))


@pytest.fixture(autouse=True)
def _no_inherited_ranks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    inherited = ("CORE_GLOBAL_SEED", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")
    for variable in inherited:
        monkeypatch.delenv(variable, raising=False)
    yield


def plugin(io: str) -> object:
    return AsyncCheckpointIO() if io == "async" else io


def train(out: Path, io: str, stop_at: int = -1) -> None:
    """The job script's loop on one process: 3 epochs of 20 batches, checkpoints every 10 steps."""
    arguments = argparse.Namespace(out=str(out), kill_at=-1, kill_rank=0, stop_at=stop_at)
    core.seed_everything(7, verbose=False)
    core.Lite(accelerator="cpu", devices=1, plugins=[plugin(io)]).launch(resumable_train.train, arguments)


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    loaded: dict[str, torch.Tensor] = torch.load(out / "final.pt", weights_only=True)
    return loaded


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    out = tmp_path_factory.mktemp("uninterrupted")
    train(out, "torch")
    return final_weights(out)


# Stopped mid-epoch (27: epoch 1, batch 7) and right after a save at an epoch's end (40).
@pytest.mark.parametrize(("io", "stop_at"), [("torch", 27), ("torch", 40), ("async", 40), ("distributed", 27)])
def test_a_stopped_run_resumed_ends_bitwise_like_an_uninterrupted_one(
    tmp_path: Path, io: str, stop_at: int, uninterrupted: dict[str, torch.Tensor]
) -> None:
    train(tmp_path, io, stop_at=stop_at)
    assert not (tmp_path / "final.pt").exists()
    saved = CheckpointDirectory(str(tmp_path / "checkpoints")).steps()
    newest = max(step for step, complete in saved.items() if complete)
    last_saved = stop_at // 10 * 10
    # With async, a run that dies right after a save may not have written that save's marker yet.
    assert newest == last_saved or (io == "async" and newest == last_saved - 10), saved
    train(tmp_path, io)
    resumed = final_weights(tmp_path)
    assert resumed.keys() == uninterrupted.keys()
    for name in resumed:
        assert torch.equal(resumed[name], uninterrupted[name]), name
    progress = (tmp_path / "progress-0.txt").read_text()
    # A checkpoint taken after an epoch's last batch belongs to that epoch.
    assert f"resumed at step {newest} epoch {(newest - 1) // 20}" in progress


def run(function: Any, *args: Any, plugins: list[object] | None = None) -> Any:
    return core.Lite(accelerator="cpu", devices=1, plugins=plugins).launch(function, *args)


def small_state() -> dict[str, Any]:
    model = torch.nn.Linear(3, 2)
    return {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1), "note": "a"}


def test_layout_markers_and_rotation(tmp_path: Path) -> None:
    def loop(lite: core.Lite) -> int:
        state = small_state()
        checkpoints = ResumableCheckpoints(lite, tmp_path, every_n_steps=5, keep=2)
        assert checkpoints.restore(state) == 0 and checkpoints.latest is None
        saved = [step for step in range(1, 24) if checkpoints.maybe_save(state, step)]
        assert saved == [5, 10, 15, 20]
        return checkpoints.step

    assert run(loop) == 20
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step-000000015", "step-000000020"]
    for step in ("step-000000015", "step-000000020"):
        assert sorted(path.name for path in (tmp_path / step).iterdir()) == ["COMPLETE", "checkpoint.pt"]
    marker = torch.load(tmp_path / "step-000000020" / "COMPLETE", weights_only=True)
    assert marker == {"format": "core.resumable/1", "step": 20, "world_size": 1, "checkpoint_io": "torch",
                      "strategy": "single_device"}


def test_incomplete_checkpoints_are_ignored_and_removed(tmp_path: Path) -> None:
    def save_some(lite: core.Lite) -> None:
        checkpoints = ResumableCheckpoints(lite, tmp_path, every_n_steps=1, keep=5)
        state = small_state()
        for step in (10, 20, 30):
            with torch.no_grad():
                state["model"].weight.fill_(step)
            checkpoints.save(state, step)

    run(save_some)
    # What crashes leave: a newer step without its marker (killed mid-save), a bare directory, a stray file.
    (tmp_path / "step-000000030" / "COMPLETE").unlink()
    (tmp_path / "step-000000040").mkdir()
    (tmp_path / "step-000000040" / ".checkpoint.pt.x.tmp").write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("not a checkpoint")

    def resume(lite: core.Lite) -> tuple[int, float, str | None]:
        state = small_state()
        checkpoints = ResumableCheckpoints(lite, tmp_path, every_n_steps=1)
        step = checkpoints.restore(state)
        return step, float(state["model"].weight.detach().mean()), checkpoints.latest

    step, value, latest = run(resume)
    assert (step, value) == (20, 20.0)
    assert latest == str(tmp_path / "step-000000020" / "checkpoint.pt")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt", "step-000000010", "step-000000020"]


def test_plain_values_come_back_and_reserved_keys_are_refused(tmp_path: Path) -> None:
    def save(lite: core.Lite) -> None:
        state = {**small_state(), "note": "saved", "epoch_losses": [0.5, 0.25]}
        ResumableCheckpoints(lite, tmp_path, every_n_steps=3).maybe_save(state, 3)
        with pytest.raises(core.ConfigurationError, match=r"reserved for resumable checkpoints"):
            ResumableCheckpoints(lite, tmp_path, every_n_steps=3).save({"core/rng": 1}, 6)

    def resume(lite: core.Lite) -> dict[str, Any]:
        state = {**small_state(), "note": "fresh", "epoch_losses": []}
        assert ResumableCheckpoints(lite, tmp_path, every_n_steps=3).restore(state) == 3
        return {"note": state["note"], "epoch_losses": state["epoch_losses"]}

    run(save)
    assert run(resume) == {"note": "saved", "epoch_losses": [0.5, 0.25]}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({"every_n_steps": 0}, "every_n_steps=0"), ({"every_n_steps": 2, "keep": 0}, "keep=0"),
     ({"every_n_steps": True}, "every_n_steps=True")],
)
def test_bad_settings_are_refused(tmp_path: Path, arguments: dict[str, Any], message: str) -> None:
    def make(lite: core.Lite) -> None:
        ResumableCheckpoints(lite, tmp_path, **arguments)

    with pytest.raises(core.ConfigurationError, match=message):
        run(make)


def test_with_async_the_marker_is_written_after_the_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened, started = threading.Event(), threading.Event()
    real = async_checkpoint_io.atomic_torch_save

    def gated(checkpoint: Any, path: Any, storage_options: Any = None, **options: Any) -> None:
        if str(path).endswith("checkpoint.pt"):
            started.set()
            assert opened.wait(timeout=30)
        real(checkpoint, path, storage_options, **options)

    monkeypatch.setattr(async_checkpoint_io, "atomic_torch_save", gated)
    step_directory = tmp_path / "step-000000002"

    def loop(lite: core.Lite) -> list[bool]:
        state = small_state()
        checkpoints = ResumableCheckpoints(lite, tmp_path, every_n_steps=2)
        seen = []
        assert checkpoints.maybe_save(state, 2)  # returns while the state is still being written
        assert started.wait(timeout=10)
        seen.append((step_directory / "COMPLETE").exists())
        opened.set()
        lite.active.checkpoint_io.wait()
        seen.append((step_directory / "COMPLETE").exists())  # the state is there, its marker not yet written
        assert not checkpoints.maybe_save(state, 3)  # the next step's call writes the marker, now that it can
        lite.active.checkpoint_io.wait()
        seen.append((step_directory / "COMPLETE").exists())
        return seen

    assert run(loop, plugins=[AsyncCheckpointIO()]) == [False, False, True]


def test_a_url_directory_through_fsspec(tmp_path: Path) -> None:
    import fsspec

    root = f"memory://resumable-{tmp_path.name}"

    def loop(lite: core.Lite) -> int:
        state = small_state()
        checkpoints = ResumableCheckpoints(lite, root, every_n_steps=2, keep=1)
        for step in range(1, 7):
            checkpoints.maybe_save(state, step)
        return ResumableCheckpoints(lite, root, every_n_steps=2).restore(small_state())

    try:
        assert run(loop) == 6
        assert fsspec.filesystem("memory").ls(root.removeprefix("memory://"), detail=False) == [
            f"/resumable-{tmp_path.name}/step-000000006"
        ]
    finally:
        fsspec.filesystem("memory").rm(root.removeprefix("memory://"), recursive=True)


def test_the_directory_reports_completeness(tmp_path: Path) -> None:
    directory = _fault_tolerance.CheckpointDirectory(str(tmp_path))
    assert directory.steps() == {} and directory.newest_complete() is None
    (tmp_path / "step-000000003").mkdir()
    (tmp_path / "step-000000003" / "COMPLETE").write_bytes(b"")
    (tmp_path / "step-000000007").mkdir()
    (tmp_path / "step-x").mkdir()
    assert directory.steps() == {3: True, 7: False} and directory.newest_complete() == 3
