"""Damaged checkpoints of every checkpoint_io raise CheckpointError, and lose nothing.

Random bytes, truncated and bit-flipped copies of a good checkpoint (for ``torch``, ``async`` and
``distributed``) are loaded into a model and its optimizer: only :class:`core.CheckpointError` may escape,
the objects keep their values (nothing is half loaded), and the good checkpoint is untouched on disk and
still loads. A module whose keys or shapes differ gets the first mismatches named with both shapes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import core

IOS = ["torch", "async", pytest.param("distributed", marks=pytest.mark.skipif(
    importlib.util.find_spec("core_dcp") is None, reason="core-dcp is not installed"))]


def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def snapshot(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    tensors = [tensor.detach().clone() for tensor in model.state_dict().values()]
    for state in optimizer.state_dict()["state"].values():
        tensors += [value.clone() for value in state.values() if isinstance(value, torch.Tensor)]
    return tensors


def digest(path: Path) -> str:
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return hashlib.sha256(b"".join(f.read_bytes() for f in files if f.is_file())).hexdigest()


def damaged_copy(good: Path, target: Path, data: st.DataObject, how: str) -> Path:
    """A copy of ``good`` at ``target`` with one file replaced, truncated or bit-flipped."""
    if good.is_dir():
        shutil.copytree(good, target)
        victim = data.draw(st.sampled_from(sorted(p for p in target.iterdir() if p.is_file())), label="file")
    else:
        shutil.copy(good, target)
        victim = target
    content = victim.read_bytes()
    if how == "random":
        content = data.draw(st.binary(max_size=2048), label="bytes")
    elif how == "truncated":
        content = content[: data.draw(st.integers(0, max(len(content) - 1, 0)), label="length")]
    else:
        position = data.draw(st.integers(0, len(content) - 1), label="position")
        bit = data.draw(st.integers(0, 7), label="bit")
        content = content[:position] + bytes([content[position] ^ (1 << bit)]) + content[position + 1:]
    victim.write_bytes(content)
    return target


@pytest.mark.parametrize("io", IOS)
@pytest.mark.parametrize("how", ["random", "truncated", "bit-flipped"])
def test_a_damaged_checkpoint_raises_checkpoint_error_and_loses_nothing(tmp_path: Path, io: str, how: str) -> None:
    def run(lite: core.Lite) -> None:
        model, optimizer = lite.setup(*build())
        model(torch.randn(3, 4)).sum().backward()
        optimizer.step()  # optimizer state exists
        good = tmp_path / "good.ckpt"
        lite.save(good, {"model": model, "optimizer": optimizer, "step": 1})
        wait = getattr(lite.active.checkpoint_io, "wait", None)  # 'async' writes in the background
        if wait is not None:
            wait()
        good_digest = digest(good)
        attempts = iter(range(10**6))

        @settings(max_examples=60, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
        @given(data=st.data())
        def check(data: st.DataObject) -> None:
            target = damaged_copy(good, tmp_path / f"damaged-{next(attempts)}.ckpt", data, how)
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.add_(1.0)  # the values a failed load must leave alone
            before = snapshot(model, optimizer)
            state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 0}
            try:
                lite.load(target, state)
            except core.CheckpointError as error:
                assert str(target) in str(error)
                assert all(torch.equal(a, b) for a, b in zip(before, snapshot(model, optimizer), strict=True))
                assert state["step"] == 0
            # (A flipped bit in padding or in a value may still load: that is not an error.)
            assert digest(good) == good_digest
            restored: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 0}
            lite.load(good, restored)
            assert restored["step"] == 1

        check()

    core.Lite(accelerator="cpu", devices=1, plugins=[io]).launch(run)


def test_random_bytes_are_called_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a checkpoint")

    def run(lite: core.Lite) -> None:
        with pytest.raises(core.CheckpointError) as excinfo:
            lite.load(path)
        message = str(excinfo.value)
        assert f"{str(path)!r} is not a checkpoint: torch.save writes a zip archive" in message
        assert "starts with 74 68 65 73" in message  # "thes"
        assert "objects other than tensors" not in message

    core.Lite(accelerator="cpu", devices=1).launch(run)


def test_a_module_of_another_shape_gets_the_mismatching_keys_with_both_shapes(tmp_path: Path) -> None:
    def run(lite: core.Lite) -> None:
        model, _ = lite.setup(*build())
        lite.save(tmp_path / "small.ckpt", {"model": model})
        torch.manual_seed(0)
        wider = lite.setup(torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)))
        before = snapshot(wider, torch.optim.SGD(wider.parameters(), lr=0.1))
        with pytest.raises(core.CheckpointError) as excinfo:
            lite.load(tmp_path / "small.ckpt", {"model": wider})
        message = str(excinfo.value)
        assert "entry 'model' does not fit the Sequential: 3 tensor(s) of another shape:" in message
        assert "0.weight: checkpoint (8, 4) vs module (16, 4)" in message
        assert "2.weight: checkpoint (2, 8) vs module (2, 16)" in message
        assert "RuntimeError" not in message
        assert all(torch.equal(a, b) for a, b in zip(before, snapshot(wider, torch.optim.SGD(wider.parameters())),
                                                     strict=True))

        extra = torch.nn.Sequential(*build()[0].children(), torch.nn.Linear(2, 2))
        lacks = r"2 key\(s\) the module has and the checkpoint lacks: \['3.weight', '3.bias'\]"
        with pytest.raises(core.CheckpointError, match=lacks):
            lite.load(tmp_path / "small.ckpt", {"model": lite.setup(extra)})

    core.Lite(accelerator="cpu", devices=1).launch(run)


def test_an_optimizer_over_other_parameters_is_refused_before_the_model_changes(tmp_path: Path) -> None:
    def run(lite: core.Lite) -> None:
        model, optimizer = lite.setup(*build())
        lite.save(tmp_path / "both.ckpt", {"model": model, "optimizer": optimizer})
        fresh_model, _ = build()
        with torch.no_grad():
            for parameter in fresh_model.parameters():
                parameter.zero_()
        partial = torch.optim.Adam(list(fresh_model.parameters())[:2])
        fresh_model, partial = lite.setup(fresh_model, partial)
        with pytest.raises(core.CheckpointError, match=r"parameter groups of sizes \[4\], but this Adam has \[2\]"):
            lite.load(tmp_path / "both.ckpt", {"model": fresh_model, "optimizer": partial})
        assert all(float(parameter.detach().abs().sum()) == 0.0 for parameter in fresh_model.parameters())

    core.Lite(accelerator="cpu", devices=1).launch(run)
