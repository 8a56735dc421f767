"""The built-in ``async`` checkpoint_io: copy first, write in the background, in order, errors never lost."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import core
from core.builtin import async_checkpoint_io
from core.builtin.async_checkpoint_io import AsyncCheckpointIO, snapshot
from core.builtin.checkpoint_io import TorchCheckpointIO
from core.testing import CheckpointIOConformance


class Gate:
    """Holds the background writer at its start until released, so a test controls when writes happen."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opened = threading.Event()
        self.started = threading.Event()
        real = async_checkpoint_io.atomic_torch_save

        def gated(checkpoint: Any, path: Any, storage_options: Any = None, **options: Any) -> None:
            self.started.set()
            if not self.opened.wait(timeout=30):
                raise TimeoutError("the test never opened the gate")
            real(checkpoint, path, storage_options, **options)

        monkeypatch.setattr(async_checkpoint_io, "atomic_torch_save", gated)

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def io() -> Iterator[AsyncCheckpointIO]:
    plugin = AsyncCheckpointIO()
    yield plugin
    with contextlib.suppress(core.CheckpointError):  # tests that provoke failures check them themselves
        plugin.checkpoint_io_teardown()


def save(io: AsyncCheckpointIO, checkpoint: dict[str, Any], path: Path | str) -> None:
    io.checkpoint_io_save(checkpoint=checkpoint, path=str(path), storage_options=None)


def load(io: TorchCheckpointIO, path: Path | str) -> dict[str, Any]:
    return io.checkpoint_io_load(path=str(path), map_location="cpu", weights_only=True)


def test_the_file_equals_a_synchronous_save(io: AsyncCheckpointIO, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 3, "name": "run"}
    save(io, state, tmp_path / "async.pt")
    TorchCheckpointIO().checkpoint_io_save(checkpoint=state, path=str(tmp_path / "sync.pt"), storage_options=None)
    io.checkpoint_io_teardown()
    assert (tmp_path / "async.pt").read_bytes() == (tmp_path / "sync.pt").read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["async.pt", "sync.pt"]


def test_the_state_is_copied_before_save_returns(
    io: AsyncCheckpointIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(monkeypatch)
    weight = torch.zeros(1000)
    save(io, {"weight": weight, "nested": [weight, {"bias": torch.ones(2)}]}, tmp_path / "c.pt")
    assert gate.started.wait(timeout=10)
    weight.add_(5.0)  # the training step that follows changes the tensors in place
    gate.open()
    io.wait()
    loaded = load(io, tmp_path / "c.pt")
    assert torch.equal(loaded["weight"], torch.zeros(1000))
    assert loaded["nested"][0] is loaded["weight"]  # a tensor reachable twice stays one tensor
    assert torch.equal(loaded["nested"][1]["bias"], torch.ones(2))


def test_snapshot_shares_no_tensor_and_keeps_containers() -> None:
    shared = torch.arange(4.0, requires_grad=True)
    state = {"a": shared, "b": (shared, [1, "x"]), "c": {"d": torch.ones(1)}}
    copied = snapshot(state)
    assert copied["a"] is copied["b"][0] and copied["a"] is not shared
    assert copied["a"].data_ptr() != shared.data_ptr() and not copied["a"].requires_grad
    assert copied["b"][1] == [1, "x"] and isinstance(copied["b"], tuple)


def test_a_second_save_waits_for_the_first_and_writes_land_in_order(
    io: AsyncCheckpointIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(monkeypatch)
    target = tmp_path / "c.pt"
    save(io, {"version": torch.tensor(1)}, target)
    assert gate.started.wait(timeout=10)
    returned = threading.Event()

    def save_second() -> None:
        save(io, {"version": torch.tensor(2)}, target)
        returned.set()

    second = threading.Thread(target=save_second)
    second.start()
    time.sleep(0.3)
    assert not returned.is_set(), "the second save returned while the first was still being written"
    assert io.pending == 1
    gate.open()
    second.join(timeout=20)
    assert returned.is_set()
    io.wait()
    assert int(load(io, target)["version"]) == 2


def test_a_removal_waits_for_the_write_in_flight(
    io: AsyncCheckpointIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(monkeypatch)
    target = tmp_path / "c.pt"
    save(io, {"v": torch.ones(1)}, target)
    assert gate.started.wait(timeout=10)
    threading.Timer(0.3, gate.open).start()
    io.checkpoint_io_remove(path=str(target))  # would otherwise run before the write lands, and be undone by it
    assert io.pending == 0
    assert not target.exists()


def blocked_path(tmp_path: Path) -> Path:
    """A path whose parent directory cannot be created (a file stands there): the write fails late."""
    (tmp_path / "blocker").write_text("a file, not a directory")
    return tmp_path / "blocker" / "c.pt"


def test_a_background_error_is_raised_by_the_next_save(io: AsyncCheckpointIO, tmp_path: Path) -> None:
    target = tmp_path / "c.pt"
    save(io, {"v": torch.ones(3)}, target)
    save(io, {"v": torch.zeros(3)}, blocked_path(tmp_path))  # returns: the failure happens in the background
    with pytest.raises(core.CheckpointError) as excinfo:
        save(io, {"v": torch.zeros(3)}, target)
    message = str(excinfo.value)
    assert f"background save to {str(tmp_path / 'blocker' / 'c.pt')!r} failed" in message
    assert "FileExistsError" in message or "NotADirectoryError" in message
    assert isinstance(excinfo.value.__cause__, OSError)
    # The failed save was not retried and the error was reported once: the next save goes through.
    assert torch.equal(load(io, target)["v"], torch.ones(3))
    save(io, {"v": torch.zeros(3)}, target)
    io.wait()
    assert torch.equal(load(io, target)["v"], torch.zeros(3))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["blocker", "c.pt"]


def test_an_object_that_cannot_be_pickled_fails_in_the_background(io: AsyncCheckpointIO, tmp_path: Path) -> None:
    class Unpicklable:
        def __reduce__(self) -> tuple[object, ...]:
            raise RuntimeError("cannot pickle this")

    save(io, {"v": Unpicklable()}, tmp_path / "c.pt")
    with pytest.raises(core.CheckpointError, match="RuntimeError: cannot pickle this"):
        io.wait()
    assert list(tmp_path.iterdir()) == []


def test_a_background_error_is_raised_at_teardown(tmp_path: Path) -> None:
    io = AsyncCheckpointIO()
    save(io, {"v": torch.ones(1)}, blocked_path(tmp_path))
    with pytest.raises(core.CheckpointError, match=r"background save to .*blocker.*c\.pt.* failed"):
        io.checkpoint_io_teardown()
    io.checkpoint_io_teardown()  # reported once; a second teardown has nothing left to raise


def test_a_background_error_ends_a_lite_run(tmp_path: Path) -> None:
    def train(lite: core.Lite) -> None:
        lite.save(blocked_path(tmp_path), {"v": torch.ones(1)})

    lite = core.Lite(accelerator="cpu", devices=1, plugins=[AsyncCheckpointIO()])
    with pytest.raises(core.CheckpointError, match=r"background save to .*blocker.*c\.pt.* failed"):
        lite.launch(train)


def test_lite_saves_and_loads_through_it(tmp_path: Path) -> None:
    def train(lite: core.Lite) -> tuple[str, float]:
        model = lite.setup(torch.nn.Linear(4, 1))
        torch.nn.init.constant_(model.weight, 0.5)
        lite.save(tmp_path / "c.pt", {"model": model, "step": 7})
        torch.nn.init.constant_(model.weight, -1.0)  # changed right after save returned
        state: dict[str, Any] = {"model": model, "step": 0}
        lite.load(tmp_path / "c.pt", state)
        return lite.active.config.checkpoint_io, float(model.weight.detach().mean())

    lite = core.Lite(accelerator="cpu", devices=1, plugins=[AsyncCheckpointIO()])
    assert lite.launch(train) == ("async", 0.5)


def test_the_alias_selects_it() -> None:
    lite = core.Lite(accelerator="cpu", devices=1, plugins=["async"])
    assert isinstance(lite.active.checkpoint_io, AsyncCheckpointIO)


def _step_seconds(model: torch.nn.Module, optimizer: torch.optim.Optimizer, until: Any) -> list[float]:
    inputs = torch.randn(64, 256)
    times: list[float] = []
    while not until(len(times)):
        start = time.perf_counter()
        optimizer.zero_grad()
        model(inputs).square().mean().backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return times


@pytest.mark.timeout(120)
def test_the_loop_goes_on_while_a_large_state_is_written(io: AsyncCheckpointIO, tmp_path: Path) -> None:
    """Timing is reported, not asserted (bench/ measures it); the loop must take steps while the write is
    under way, which a synchronous save would not allow."""
    torch.manual_seed(0)
    # One compute thread: intra-op threads spinning for a core the writer holds would measure oversubscription.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    state: dict[str, Any] = {"model": model.state_dict(), "ballast": torch.randn(25_000_000)}  # 100 MB
    start = time.perf_counter()
    TorchCheckpointIO().checkpoint_io_save(checkpoint=state, path=str(tmp_path / "sync.pt"), storage_options=None)
    sync_seconds = time.perf_counter() - start

    baseline = _step_seconds(model, optimizer, lambda steps: steps >= 200)
    start = time.perf_counter()
    save(io, state, tmp_path / "async.pt")
    blocked_seconds = time.perf_counter() - start
    during = _step_seconds(model, optimizer, lambda steps: io.pending == 0)
    io.wait()
    torch.set_num_threads(threads)
    ratio = statistics.median(during) / statistics.median(baseline)
    print(
        f"\nsync save {sync_seconds * 1e3:.0f} ms; async save blocked {blocked_seconds * 1e3:.0f} ms, then "
        f"{len(during)} steps during the write; median step time during / without: {ratio:.2f}"
    )
    assert len(during) > 1
    assert torch.equal(load(io, tmp_path / "async.pt")["ballast"], state["ballast"])


class TestAsyncConformance(CheckpointIOConformance):
    """The conformance kit every checkpoint_io passes."""

    alias = "async"

    def test_failed_save_keeps_the_previous_checkpoint(self, plugin: object, tmp_path: Path) -> None:
        """The kit's version expects the failing save call to raise; here the failure surfaces at the next call."""
        path = tmp_path / "state.ckpt"
        self.save(plugin, {"v": torch.ones(3)}, path)

        class Unpicklable:
            def __reduce__(self) -> tuple[object, ...]:
                raise RuntimeError("cannot pickle this")

        self.save(plugin, {"model": torch.ones(3), "bad": Unpicklable()}, path)
        with pytest.raises(core.CheckpointError, match="cannot pickle this"):
            self.load(plugin, path)
        assert torch.equal(self.load(plugin, path)["v"], torch.ones(3))
