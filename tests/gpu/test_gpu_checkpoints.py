"""On a real CUDA device: the ``async`` checkpoint_io saving device tensors.

The save must copy the state off the device without holding the training loop for the whole copy (pinned host
buffers, allocated by the first save and reused, filled by asynchronous copies ordered on the device's stream, and
written by the background thread): a save call in steady state must block for less than half of what a plain
synchronous copy of the whole state to host memory takes, measured here (a save that makes that plain copy itself
blocks for about as long as the copy, so the margin separates the two whatever the noise). The file must hold
the values of the moment of the save even though the loop changes the device tensors in place right after the call
returns. Marked ``gpu``: skipped with its reason where torch sees no CUDA device. (The ``distributed`` round trip on
the device is in test_gpu_strategies.py, inside its NCCL job.)
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from core import Lite
from core.builtin.async_checkpoint_io import AsyncCheckpointIO

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() False)"),
]

TENSORS, ELEMENTS = 4, 16 * 2**20  # 4 x 64 MiB of float32 on the device


def device_state() -> dict[str, torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(0)
    return {f"w{i}": torch.randn(ELEMENTS, device="cuda", generator=generator) for i in range(TENSORS)}


def synchronous_copy_seconds(state: dict[str, torch.Tensor]) -> float:
    """The whole state copied to (pageable) host memory the plain way, median of 3."""
    samples = []
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        copies = {name: tensor.to("cpu") for name, tensor in state.items()}
        samples.append(time.perf_counter() - start)
        del copies
    return statistics.median(samples)


def test_async_save_from_device_blocks_less_than_a_whole_copy_and_saves_the_values_of_the_moment(
    tmp_path: Path,
) -> None:
    state = device_state()
    copy_s = synchronous_copy_seconds(state)
    io = AsyncCheckpointIO()
    blocked, expected = [], []
    try:
        for index in range(3):
            expected.append({name: tensor.to("cpu", copy=True) for name, tensor in state.items()})
            io.wait()  # the previous write is done: time only this save's own work
            torch.cuda.synchronize()
            start = time.perf_counter()
            io.checkpoint_io_save({"state": state, "index": index}, str(tmp_path / f"{index}.ckpt"), None)
            blocked.append(time.perf_counter() - start)
            for tensor in state.values():  # the loop goes on at once and changes the weights in place
                tensor.add_(1.0)
    finally:
        io.checkpoint_io_teardown()
    for index in range(3):
        loaded = io.checkpoint_io_load(str(tmp_path / f"{index}.ckpt"), "cpu", True)
        assert loaded["index"] == index
        for name, tensor in expected[index].items():
            assert torch.equal(loaded["state"][name], tensor), f"save {index}: {name} differs from its moment's value"
    steady = statistics.median(blocked[1:])  # the first save may allocate its pinned buffers
    samples = [round(seconds * 1e3, 1) for seconds in blocked]
    megabytes = TENSORS * ELEMENTS * 4 / 2**20
    assert steady < 0.5 * copy_s, (f"an async save blocked {steady * 1e3:.1f} ms (samples {samples} ms); a plain "
                                   f"copy of the whole {megabytes:.0f} MiB state takes {copy_s * 1e3:.1f} ms")


def test_lite_async_checkpoint_of_a_cuda_model_round_trips(tmp_path: Path) -> None:
    def body(lite: Lite) -> tuple[float, str]:
        torch.manual_seed(0)
        module = nn.Linear(256, 256)
        model, optimizer = lite.setup(module, torch.optim.Adam(module.parameters(), lr=0.1))
        model(lite.to_device(torch.randn(4, 256))).sum().backward()
        optimizer.step()
        saved = {name: p.detach().clone() for name, p in model.named_parameters()}
        lite.save(tmp_path / "model.ckpt", {"model": model, "optimizer": optimizer})
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.mul_(0)
        lite.load(tmp_path / "model.ckpt", {"model": model, "optimizer": optimizer})
        difference = max(float((saved[name] - p).abs().max()) for name, p in model.named_parameters())
        return difference, str(next(model.parameters()).device)

    difference, device = Lite(accelerator="cuda", devices=1, plugins=["async"]).launch(body)
    assert difference == 0.0
    assert device == "cuda:0"
