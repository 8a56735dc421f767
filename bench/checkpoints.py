"""Checkpoints: the atomic ``torch`` checkpoint_io against a bare ``torch.save``, and the loop's step time
while an ``async`` save is in flight against no save. The 2-rank ``distributed`` save is bench/distributed_save.py."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from bench._harness import Result, alternate
from core.builtin.async_checkpoint_io import AsyncCheckpointIO
from core.builtin.checkpoint_io import TorchCheckpointIO


def _state(megabytes: int) -> dict[str, torch.Tensor]:
    per_tensor = 4 * 1024 * 1024 // 4  # 4 MB float32 tensors
    return {f"w{i}": torch.randn(per_tensor) for i in range(max(1, megabytes // 4))}


def _timed(action: object) -> float:
    start = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - start


def save_vs_bare(megabytes: int, repetitions: int) -> Result:
    state = _state(megabytes)
    io = TorchCheckpointIO()
    with tempfile.TemporaryDirectory() as tmp:
        bare_path, ours_path = Path(tmp) / "bare.pt", str(Path(tmp) / "ours.pt")
        bare, ours, _, _ = alternate(
            lambda: _timed(lambda: torch.save(state, bare_path)),
            lambda: _timed(lambda: io.checkpoint_io_save(checkpoint=state, path=ours_path, storage_options=None)),
            repetitions,
        )
    return Result(
        f"torch checkpoint_io save of {megabytes} MB (atomic, fsync) vs bare torch.save", ours, bare, "s",
        "close to 1x (the fsync is the price of atomicity)", met=ours / bare < 1.5,
    )


def checksum_cost(megabytes: int, repetitions: int) -> list[Result]:
    """Save and load through the ``torch`` checkpoint_io with its xxHash checksums (the default) and without."""
    state = _state(megabytes)
    sealed, plain = TorchCheckpointIO(), TorchCheckpointIO(checksums=False)
    with tempfile.TemporaryDirectory() as tmp:
        sealed_path, plain_path = str(Path(tmp) / "sealed.pt"), str(Path(tmp) / "plain.pt")
        saved, unsealed, _, _ = alternate(
            lambda: _timed(lambda: sealed.checkpoint_io_save(checkpoint=state, path=sealed_path, storage_options=None)),
            lambda: _timed(lambda: plain.checkpoint_io_save(checkpoint=state, path=plain_path, storage_options=None)),
            repetitions,
        )
        loaded, unverified, _, _ = alternate(
            lambda: _timed(lambda: sealed.checkpoint_io_load(path=sealed_path, map_location="cpu", weights_only=True)),
            lambda: _timed(lambda: plain.checkpoint_io_load(path=plain_path, map_location="cpu", weights_only=True)),
            repetitions,
        )
    return [
        Result(
            f"torch checkpoint_io save of {megabytes} MB with checksums vs checksums=False", saved, unsealed, "s",
            "<= 1.05x (the issue's target: xxHash while the file is written)", met=saved / unsealed <= 1.05,
        ),
        Result(
            f"torch checkpoint_io load of {megabytes} MB with checksum verification vs checksums=False", loaded,
            unverified, "s", "reported (verification reads the file once more)", met=None,
        ),
    ]


def _steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer, count: int) -> float:
    data = torch.randn(64, 256)
    start = time.perf_counter()
    for _ in range(count):
        optimizer.zero_grad()
        model(data).square().mean().backward()
        optimizer.step()
    return (time.perf_counter() - start) / count


def async_step_time(megabytes: int, repetitions: int, steps: int) -> Result:
    torch.set_num_threads(1)
    state = _state(megabytes)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    io = AsyncCheckpointIO()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "async.pt")

        def during_save() -> float:
            io.checkpoint_io_save(checkpoint=state, path=path, storage_options=None)
            seconds = _steps(model, optimizer, steps)
            io.checkpoint_io_teardown()  # wait for the write, outside the timed steps
            return seconds

        quiet, busy, _, _ = alternate(lambda: _steps(model, optimizer, steps), during_save, repetitions)
    return Result(
        f"step time while an async save of {megabytes} MB is written vs no save (1 torch thread)", busy, quiet, "s",
        "close to 1x on 2 cores (the write takes the other core)", met=busy / quiet < 1.25,
        note="includes the copy to CPU memory before the save returns",
    )


def run(megabytes: int) -> list[Result]:
    repetitions = 5 if megabytes >= 100 else 1
    steps = 40 if megabytes >= 100 else 3
    return [save_vs_bare(megabytes, repetitions), *checksum_cost(megabytes, repetitions),
            async_step_time(megabytes, repetitions, steps)]
