"""Claims of docs/lite.md, docs/user-guide.md and docs/fault-tolerance.md that no other test pins (issue 51).

Each test runs in this process on the CPU, in well under a second: the one-process preemption path (a SIGTERM to
this process, then ``maybe_save``), the compatibility message the user guide prints, and the way lite.md says to
save and load a model compiled after ``setup``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import cast

import pytest
import torch

import core
import core.lite
from core.fault_tolerance import MARKER_NAME, Preempted, ResumableCheckpoints


@pytest.fixture
def lite() -> core.Lite:
    return core.Lite(accelerator="cpu", devices=1)


def test_a_sigterm_stops_a_one_process_loop_at_the_next_maybe_save_with_status_75(
    lite: core.Lite, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fault-tolerance.md, "Preemption": the signal is only recorded; at the next ``maybe_save`` the step is saved
    with its marker and ``Preempted`` (a ``SystemExit`` with status 75) is raised after the printed message."""
    model = lite.setup(torch.nn.Linear(2, 2))
    state = {"model": model}
    previous = signal.getsignal(signal.SIGTERM)
    try:
        checkpoints = ResumableCheckpoints(lite, tmp_path, every_n_steps=100)
        os.kill(os.getpid(), signal.SIGTERM)  # recorded by the handler: this process goes on
        with pytest.raises(Preempted) as stopped:
            checkpoints.maybe_save(state, 3)  # not a multiple of every_n_steps: saved because of the notice
    finally:
        signal.signal(signal.SIGTERM, previous)  # the handler stays after a notice, until the process exits
    assert isinstance(stopped.value, SystemExit) and stopped.value.code == 75
    step_directory = tmp_path / "step-000000003"
    assert (step_directory / MARKER_NAME).exists()
    expected = (
        f"core: preempted by SIGTERM (received by global rank(s) [0]): every rank stopped after step 3 and saved a "
        f"resumable checkpoint at {step_directory / 'checkpoint.pt'}. Run the same command again to resume from it "
        f"(exit status 75)."
    )
    assert expected in capsys.readouterr().err
    assert ResumableCheckpoints(lite, tmp_path, every_n_steps=100, preemption_signals=()).restore(state) == 3


def test_preemption_signals_empty_installs_no_handler(lite: core.Lite, tmp_path: Path) -> None:
    """fault-tolerance.md: ``preemption_signals=()`` turns preemption handling off."""
    before = signal.getsignal(signal.SIGTERM)
    ResumableCheckpoints(lite, tmp_path, every_n_steps=10, preemption_signals=())
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_compatibility_message_of_the_user_guide() -> None:
    """user-guide.md, "Compatibility": a refused pair names both plugins, the rule and what to use instead."""
    with pytest.raises(core.ConfigurationError) as refused:
        core.resolve(accelerator="cpu", strategy="dp")
    assert str(refused.value).startswith(
        "The strategy 'dp' (core-ddp) does not support the accelerator 'cpu' (core); it declares: only "
        "accelerator ['cuda']. DataParallel splits each batch over several CUDA devices inside one process, so it "
        "needs "
    )


def _compiled_after_setup(lite: core.Lite, module: torch.nn.Module) -> core.lite.LiteModule:
    """``torch.compile(lite.setup(module))``; returns its ``_orig_mod``, the set-up module."""
    compiled = torch.compile(lite.setup(module))
    set_up = getattr(compiled, "_orig_mod", None)
    assert isinstance(set_up, core.lite.LiteModule)
    return set_up


def test_a_model_compiled_after_setup_saves_and_loads_through_its_set_up_module(
    lite: core.Lite, tmp_path: Path
) -> None:
    """lite.md, "torch.compile": with ``model = torch.compile(lite.setup(...))``, ``lite.save`` / ``lite.load`` /
    ``no_backward_sync`` take ``model._orig_mod`` (the set-up module), which saves plain keys and loads back; and
    they take the compiled wrapper itself in its place, as Fabric's do."""
    saved = _compiled_after_setup(lite, torch.nn.Linear(3, 2))
    lite.save(tmp_path / "model.pt", {"model": saved})
    assert not any(key.startswith("_orig_mod") for key in torch.load(tmp_path / "model.pt")["model"])
    loaded = _compiled_after_setup(lite, torch.nn.Linear(3, 2))
    assert lite.load(tmp_path / "model.pt", {"model": loaded}) == {}
    assert torch.equal(loaded.state_dict()["weight"], saved.state_dict()["weight"])
    with lite.no_backward_sync(loaded):
        pass


def test_a_model_compiled_after_setup_is_taken_in_place_of_its_set_up_module(lite: core.Lite, tmp_path: Path) -> None:
    saved = cast(torch.nn.Module, torch.compile(lite.setup(torch.nn.Linear(3, 2))))
    lite.save(tmp_path / "model.pt", {"model": saved})
    assert sorted(torch.load(tmp_path / "model.pt")["model"]) == ["bias", "weight"]  # no _orig_mod.
    loaded = cast(torch.nn.Module, torch.compile(lite.setup(torch.nn.Linear(3, 2))))
    assert lite.load(tmp_path / "model.pt", {"model": loaded}) == {}
    assert torch.equal(loaded.state_dict()["_orig_mod.weight"], saved.state_dict()["_orig_mod.weight"])
    with lite.no_backward_sync(loaded):
        lite.backward(loaded(torch.ones(1, 3)).sum(), model=loaded)
    with pytest.raises(core.ConfigurationError, match="passed only once"):
        lite.setup(loaded)
