"""The requeue handler in this process: a real SIGUSR1, and a stand-in `scontrol` that records its arguments.

The real `scontrol requeue` against the private cluster is tested in test_slurm_requeue.py.
"""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from core_slurm import RequeueHandler, SLURMEnvironment, requeue_job, requeue_target

from core import ConfigurationError, CoreWarning


@pytest.fixture(autouse=True)
def restore_sigusr1() -> Iterator[None]:
    handler = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, handler)


@pytest.fixture
def scontrol_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake `scontrol` first on PATH; it appends its arguments to the returned file."""
    log = tmp_path / "scontrol.log"
    fake = tmp_path / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit ${{FAKE_SCONTROL_EXIT:-0}}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    for name in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    return log


def send_sigusr1() -> None:
    os.kill(os.getpid(), signal.SIGUSR1)
    # The Python-level handler runs at the next bytecode boundary of the main thread; give it one.
    for _ in range(3):
        pass


def test_the_target_is_the_array_task_when_there_is_one() -> None:
    assert requeue_target({"SLURM_JOB_ID": "12"}) == "12"
    assert requeue_target({"SLURM_JOB_ID": "12", "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "2"}) == "10_2"
    assert requeue_target({}) is None


def test_requeue_refuses_an_id_that_is_not_a_job_id() -> None:
    with pytest.raises(ConfigurationError, match=r"Cannot requeue SLURM job '12; rm -rf /'"):
        requeue_job("12; rm -rf /")


def test_rank_zero_saves_then_requeues_on_sigusr1(scontrol_log: Path) -> None:
    events: list[str] = []
    handler = RequeueHandler(global_rank=0)
    handler.callback = lambda: events.append("saved" if not scontrol_log.exists() else "saved after requeue")
    assert handler.install()
    send_sigusr1()
    assert events == ["saved"]
    assert handler.received
    assert scontrol_log.read_text() == "requeue 4242\n"


def test_an_array_task_is_requeued_as_job_underscore_task(scontrol_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4200")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    RequeueHandler(global_rank=0).install()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no callback" warning: that one is only logged
        send_sigusr1()
    assert scontrol_log.read_text() == "requeue 4200_7\n"


def test_other_ranks_save_but_do_not_requeue(scontrol_log: Path) -> None:
    saved = []
    handler = RequeueHandler(global_rank=3)
    handler.callback = lambda: saved.append(True)
    handler.install()
    send_sigusr1()
    assert saved == [True]
    assert not scontrol_log.exists()


def test_a_failing_save_propagates_and_does_not_requeue(scontrol_log: Path) -> None:
    def broken_save() -> None:
        raise OSError("disk full")

    handler = RequeueHandler(global_rank=0)
    handler.callback = broken_save
    handler.install()
    with pytest.raises(OSError, match="disk full"):
        send_sigusr1()
    assert not scontrol_log.exists()


def test_a_failing_scontrol_is_a_warning_with_its_exit_code(
    scontrol_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SCONTROL_EXIT", "5")
    handler = RequeueHandler(global_rank=0)
    with pytest.warns(CoreWarning, match=r"`scontrol requeue 4242` failed with exit code 5"):
        handler.run()


def test_the_previous_handler_still_runs_and_comes_back_on_uninstall(scontrol_log: Path) -> None:
    calls = []

    def previous(signum: int, frame: object) -> None:
        calls.append(signum)

    signal.signal(signal.SIGUSR1, previous)
    handler = RequeueHandler(global_rank=1)
    handler.install()
    send_sigusr1()
    assert calls == [signal.SIGUSR1]
    handler.uninstall()
    assert signal.getsignal(signal.SIGUSR1) is previous


def test_the_environment_passes_the_callback_to_its_handler(
    scontrol_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_PROCID", "0")
    environment = SLURMEnvironment()
    saved = []
    assert environment.set_requeue_callback(lambda: saved.append("checkpoint")) is True
    handler = environment.install_requeue_handler()
    assert handler is not None and handler.installed
    send_sigusr1()
    assert saved == ["checkpoint"]
    assert scontrol_log.read_text() == "requeue 4242\n"
    environment.environment_teardown()
    assert signal.getsignal(signal.SIGUSR1) != handler._on_signal


def test_a_second_handler_replaces_a_forgotten_one_instead_of_requeuing_twice(scontrol_log: Path) -> None:
    before = signal.getsignal(signal.SIGUSR1)
    forgotten, current = RequeueHandler(global_rank=0), RequeueHandler(global_rank=0)
    saves: list[str] = []
    forgotten.callback, current.callback = (lambda: saves.append("forgotten")), (lambda: saves.append("current"))
    forgotten.install()
    current.install()
    send_sigusr1()
    assert saves == ["current"]
    assert scontrol_log.read_text() == "requeue 4242\n"
    forgotten.uninstall()  # no longer owns the signal: changes nothing
    current.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == before


def test_deferred_mode_only_records_the_signal_until_the_loop_requeues(
    scontrol_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_PROCID", "0")
    environment = SLURMEnvironment()
    saved: list[int] = []
    environment.set_requeue_callback(lambda: saved.append(1), deferred=True)
    environment.install_requeue_handler()
    assert not environment.requeue_requested
    send_sigusr1()
    assert environment.requeue_requested
    assert saved == [] and not scontrol_log.exists()  # nothing ran inside the signal handler
    environment.requeue()  # what the loop does at its next step boundary
    assert saved == [1]
    assert scontrol_log.read_text() == "requeue 4242\n"
    environment.environment_teardown()
