"""Every variable-parsing rule of the slurm environment, with the variables srun sets."""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from core_slurm import SLURMEnvironment, main_address, main_port

import core
from core import ClusterInfo, ConfigurationError, CoreWarning

SRUN_TASK = {  # what srun gives task 5 of `srun --nodes=4 --ntasks-per-node=2` in job 123456
    "SLURM_JOB_ID": "123456",
    "SLURM_JOB_NAME": "train",
    "SLURM_NTASKS": "8",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_NNODES": "4",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "2",
    "SLURM_STEP_ID": "0",
    "SLURM_NODELIST": "gpu[007-010]",
}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = dict(os.environ)
    for name in list(os.environ):
        if name.startswith(("SLURM_", "OMPI_", "PMI_", "MASTER_")):
            monkeypatch.delenv(name)
    handler = signal.getsignal(signal.SIGUSR1)
    yield
    os.environ.clear()
    os.environ.update(saved)
    signal.signal(signal.SIGUSR1, handler)


def set_variables(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_ranks_address_and_port_come_from_srun_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, SRUN_TASK)
    info = SLURMEnvironment().environment_cluster_info(devices_per_node=2, num_nodes=4)
    assert info == ClusterInfo(
        world_size=8, global_rank=5, local_rank=1, node_rank=2, main_address="gpu007", main_port=15000 + 3456
    )


def test_the_step_node_list_wins_then_the_job_node_list_then_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    assert main_address() == "127.0.0.1"
    monkeypatch.setenv("SLURM_JOB_NODELIST", "big[01-99]")
    assert main_address() == "big01"
    monkeypatch.setenv("SLURM_NODELIST", "mid[3,5]")
    assert main_address() == "mid3"
    monkeypatch.setenv("SLURM_STEP_NODELIST", "rack[2-3]-n[7-8]")
    assert main_address() == "rack2-n7"


def test_port_is_derived_from_the_last_four_digits_of_the_job_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert main_port() == 15007
    monkeypatch.setenv("SLURM_JOB_ID", "98769999")
    assert main_port() == 24999
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert main_port() == 29500


def test_a_job_id_without_digits_asks_for_master_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "abc")
    with pytest.raises(ConfigurationError, match=r"SLURM_JOB_ID='abc'.*Set MASTER_PORT"):
        main_port()


# int() would take "-1", "+1" and "1_0"; SLURM never writes them, so they are refused like words.
@pytest.mark.parametrize("raw", ["five", "-1", "+1", "1_0"])
def test_a_non_numeric_rank_names_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    set_variables(monkeypatch, {**SRUN_TASK, "SLURM_PROCID": raw})
    with pytest.raises(ConfigurationError) as refused:
        SLURMEnvironment().environment_cluster_info(devices_per_node=2, num_nodes=4)
    assert str(refused.value) == (
        f"The SLURM variable SLURM_PROCID={raw!r} is not a whole number; SLURM sets it to one. Unset it, or run the "
        f"script under srun."
    )


def test_a_missing_rank_says_srun_did_not_start_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, {"SLURM_NTASKS": "2", "SLURM_JOB_ID": "1"})
    with pytest.raises(ConfigurationError, match=r"SLURM_PROCID is not set, so this process was not started by srun"):
        SLURMEnvironment().environment_cluster_info(devices_per_node=2, num_nodes=1)


@pytest.mark.parametrize(
    ("variables", "detected"),
    [
        ({}, False),
        (SRUN_TASK, True),
        ({**SRUN_TASK, "SLURM_JOB_NAME": "bash"}, False),
        ({**SRUN_TASK, "SLURM_JOB_NAME": "interactive"}, False),
        # mpirun inside an allocation: the ranks belong to the MPI launcher, not to the step's SLURM_PROCID.
        ({**SRUN_TASK, "OMPI_COMM_WORLD_SIZE": "8"}, False),
        ({**SRUN_TASK, "MV2_COMM_WORLD_SIZE": "8"}, False),
        ({**SRUN_TASK, "PMI_SIZE": "16", "PMI_RANK": "11"}, False),  # Hydra: two ranks per proxy task
        ({**SRUN_TASK, "PMI_SIZE": "8", "PMI_RANK": "5"}, True),  # srun --mpi=pmi2: SLURM's own ranks
        ({"SLURM_JOB_ID": "3"}, False),  # an allocation without a task count: not an srun task
    ],
)
@pytest.mark.filterwarnings("ignore::core.CoreWarning")  # srun may be installed here: the batch-shell warning
def test_detection(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], detected: bool) -> None:
    set_variables(monkeypatch, variables)
    environment = SLURMEnvironment()
    assert (environment.environment_detect() is environment) is detected


def test_srun_is_detected_by_core_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, {**SRUN_TASK, "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1",
                                "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"})
    active = core.resolve(accelerator="cpu", strategy="single_device", devices=1)
    try:
        assert active.config.environment == "slurm"
        assert active.config.distributions["environment"] == "core-slurm"
        assert active.cluster.main_address == "gpu007"
    finally:
        active.hook.environment_teardown()


@pytest.mark.parametrize(
    ("overrides", "devices", "nodes", "fragments"),
    [
        ({}, 4, 4, ["devices=4 per node", "--ntasks-per-node=2"]),
        ({}, 2, 3, ["num_nodes=3", "has 4 node(s)"]),
        ({"SLURM_NTASKS_PER_NODE": ""}, 1, 4, ["1 x 4 = 4", "SLURM_NTASKS=8"]),
        ({"SLURM_STEP_ID": None}, 2, 4, ["SLURM_NTASKS=8 tasks", "not started by srun"]),
    ],
)
def test_validation_names_both_numbers(
    monkeypatch: pytest.MonkeyPatch, overrides: dict[str, str | None], devices: int, nodes: int, fragments: list[str]
) -> None:
    set_variables(monkeypatch, SRUN_TASK)
    for name, value in overrides.items():
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoreWarning)
        with pytest.raises(ConfigurationError) as raised:
            SLURMEnvironment().environment_validate_settings(devices_per_node=devices, num_nodes=nodes)
    for fragment in fragments:
        assert fragment in str(raised.value)


def test_validation_accepts_the_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, SRUN_TASK)
    SLURMEnvironment().environment_validate_settings(devices_per_node=2, num_nodes=4)


@pytest.fixture
def srun_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake = tmp_path / "srun"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    return fake


@pytest.mark.parametrize(
    ("variables", "warns"),
    [
        ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "2"}, True),  # a batch script that forgot srun
        ({"SLURM_JOB_ID": "9"}, True),  # ... and did not ask for tasks at all
        ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "1"}, False),  # one task needs no srun
        ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}, False),  # started by srun
        ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "2", "SLURM_JOB_NAME": "interactive"}, False),
        ({}, False),  # a login node: srun exists, no job, nothing to say
        ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "2", "OMPI_COMM_WORLD_SIZE": "2"}, False),  # mpirun started it
        ({"SLURM_JOB_ID": "9", "SLURM_NTASKS": "2", "TORCHELASTIC_RUN_ID": "x"}, False),  # torchrun started it
    ],
)
def test_warns_when_srun_exists_but_did_not_start_the_process(
    monkeypatch: pytest.MonkeyPatch, srun_on_path: Path, variables: dict[str, str], warns: bool
) -> None:
    set_variables(monkeypatch, variables)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SLURMEnvironment().environment_detect()
    messages = [str(w.message) for w in caught if issubclass(w.category, CoreWarning)]
    if warns:
        assert len(messages) == 1 and "was not started by srun" in messages[0] and "srun python" in messages[0]
    else:
        assert messages == []


def test_no_warning_without_srun_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    set_variables(monkeypatch, {"SLURM_JOB_ID": "9", "SLURM_NTASKS": "2"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SLURMEnvironment().environment_detect()


def test_master_variables_are_exported_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, {**SRUN_TASK, "MASTER_ADDR": "stale-host"})
    environment = SLURMEnvironment()
    environment.environment_cluster_info(devices_per_node=2, num_nodes=4)
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("gpu007", "18456")
    environment.environment_teardown()
    assert os.environ["MASTER_ADDR"] == "stale-host" and "MASTER_PORT" not in os.environ


def test_a_run_installs_the_requeue_handler_and_teardown_removes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, {**SRUN_TASK, "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1",
                                "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"})
    before = signal.getsignal(signal.SIGUSR1)
    environment = SLURMEnvironment()
    active = core.resolve(accelerator="cpu", strategy="single_device", devices=1, plugins=[environment])
    assert active.config.environment == "slurm" and active.plugins["environment"] is environment
    assert environment.requeue_handler is not None and environment.requeue_handler.installed
    assert signal.getsignal(signal.SIGUSR1) != before
    active.hook.environment_teardown()
    assert signal.getsignal(signal.SIGUSR1) == before


def test_auto_requeue_false_leaves_the_signal_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, {**SRUN_TASK, "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1",
                                "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"})
    before = signal.getsignal(signal.SIGUSR1)
    environment = SLURMEnvironment(auto_requeue=False)
    core.resolve(accelerator="cpu", strategy="single_device", devices=1, plugins=[environment])
    assert environment.requeue_handler is None
    assert signal.getsignal(signal.SIGUSR1) == before
    assert environment.set_requeue_callback(lambda: None) is False
