"""The lsf environment with the variables and rank file that ``jsrun`` gives a task.

LSF itself cannot run here (it is proprietary: no Debian package, no way to start bsub/jsrun), so these
tests build what an LSF job hands its tasks: a real rank file on disk and the JSM_* / LSB_* variables, with
this machine's real host name among the compute nodes so the node rank is read as in a job.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from core_lsf import LSFEnvironment, compute_hosts

import core
from core import ClusterInfo, ConfigurationError

HOST = socket.gethostname()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = dict(os.environ)
    for name in list(os.environ):
        if name.startswith(("LSB_", "JSM_", "MASTER_")):
            monkeypatch.delenv(name)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def rankfile(tmp_path: Path) -> Path:
    """Launch node first, then two compute nodes with 3 slots each; this machine is the second."""
    path = tmp_path / "rankfile"
    path.write_text("\n".join(["batch1", *["compute-a"] * 3, *[HOST] * 3]) + "\n")
    return path


def jsrun_task(monkeypatch: pytest.MonkeyPatch, rankfile: Path, rank: int = 4, local_rank: int = 1) -> None:
    for name, value in {
        "LSB_JOBID": "123456",
        "LSB_DJOB_RANKFILE": str(rankfile),
        "JSM_NAMESPACE_SIZE": "6",
        "JSM_NAMESPACE_RANK": str(rank),
        "JSM_NAMESPACE_LOCAL_RANK": str(local_rank),
    }.items():
        monkeypatch.setenv(name, value)


def test_ranks_from_jsrun_and_hosts_from_the_rank_file(monkeypatch: pytest.MonkeyPatch, rankfile: Path) -> None:
    jsrun_task(monkeypatch, rankfile)
    environment = LSFEnvironment()
    assert environment.environment_detect() is environment
    info = environment.environment_cluster_info(devices_per_node=3, num_nodes=2)
    # The launch node is skipped: compute-a is the main address; this machine is node 1; port 10000 + 456.
    assert info == ClusterInfo(
        world_size=6, global_rank=4, local_rank=1, node_rank=1, main_address="compute-a", main_port=10456
    )
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("compute-a", "10456")
    environment.environment_teardown()
    assert "MASTER_ADDR" not in os.environ


def test_master_port_wins(monkeypatch: pytest.MonkeyPatch, rankfile: Path) -> None:
    jsrun_task(monkeypatch, rankfile)
    monkeypatch.setenv("MASTER_PORT", "29111")
    assert LSFEnvironment().environment_cluster_info(devices_per_node=3, num_nodes=2).main_port == 29111


def test_hosts_from_lsb_mcpu_hosts_then_lsb_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LSB_HOSTS", f"batch2 {HOST} {HOST} other other")
    assert compute_hosts() == [HOST, "other"]
    monkeypatch.setenv("LSB_MCPU_HOSTS", f"batch1 1 first 42 {HOST} 42")
    assert compute_hosts() == ["first", HOST]


def test_this_host_missing_from_the_job_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    elsewhere = tmp_path / "rankfile"
    elsewhere.write_text("batch1\nnode-x\nnode-y\n")
    jsrun_task(monkeypatch, elsewhere)
    with pytest.raises(ConfigurationError, match=rf"This host, '{HOST}', is not among .*'node-x', 'node-y'"):
        LSFEnvironment().environment_cluster_info(devices_per_node=3, num_nodes=2)


def test_an_unreadable_rank_file_names_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    jsrun_task(monkeypatch, tmp_path / "missing")
    with pytest.raises(ConfigurationError, match=r"Cannot read LSB_DJOB_RANKFILE=.*missing"):
        compute_hosts()


def test_a_rank_file_with_only_the_launch_node_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lonely = tmp_path / "rankfile"
    lonely.write_text("batch1\nbatch1\n")
    monkeypatch.setenv("LSB_DJOB_RANKFILE", str(lonely))
    with pytest.raises(ConfigurationError, match=r"lists \['batch1'\]; expected the launch node followed by"):
        compute_hosts()


@pytest.mark.parametrize(
    ("devices", "nodes", "fragments"),
    [
        (3, 3, ["num_nodes=3", "has 2 compute node(s)"]),
        (2, 2, ["2 x 2 = 4", "JSM_NAMESPACE_SIZE=6"]),
    ],
)
def test_validation_names_both_numbers(
    monkeypatch: pytest.MonkeyPatch, rankfile: Path, devices: int, nodes: int, fragments: list[str]
) -> None:
    jsrun_task(monkeypatch, rankfile)
    with pytest.raises(ConfigurationError) as raised:
        LSFEnvironment().environment_validate_settings(devices_per_node=devices, num_nodes=nodes)
    for fragment in fragments:
        assert fragment in str(raised.value)


def test_not_detected_without_jsrun_variables(monkeypatch: pytest.MonkeyPatch, rankfile: Path) -> None:
    monkeypatch.setenv("LSB_JOBID", "1")
    monkeypatch.setenv("LSB_DJOB_RANKFILE", str(rankfile))
    assert LSFEnvironment().environment_detect() is None  # an LSF job, but this process was not started by jsrun


def test_resolve_detects_lsf(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    single = tmp_path / "rankfile"
    single.write_text(f"batch1\n{HOST}\n")
    jsrun_task(monkeypatch, single, rank=0, local_rank=0)
    monkeypatch.setenv("JSM_NAMESPACE_SIZE", "1")
    active = core.resolve(accelerator="cpu", strategy="single_device", devices=1)
    try:
        assert active.config.environment == "lsf"
        assert active.cluster.main_address == HOST
    finally:
        active.hook.environment_teardown()
