"""The torchelastic environment's rules, with the variables torchrun sets in each worker."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from core_torchelastic import TorchElasticEnvironment

from core import ClusterInfo, ConfigurationError

WORKER = {  # worker 3 of `torchrun --nnodes 2 --nproc-per-node 2`, on node 1
    "TORCHELASTIC_RUN_ID": "job-7",
    "WORLD_SIZE": "4",
    "RANK": "3",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "node-a",
    "MASTER_PORT": "29400",
}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = dict(os.environ)
    for name in [*WORKER, "TORCHELASTIC_RESTART_COUNT"]:
        monkeypatch.delenv(name, raising=False)
    yield
    os.environ.clear()
    os.environ.update(saved)


def set_variables(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_ranks_and_store_come_from_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, WORKER)
    info = TorchElasticEnvironment().environment_cluster_info(devices_per_node=2, num_nodes=2)
    assert info == ClusterInfo(
        world_size=4, global_rank=3, local_rank=1, node_rank=1, main_address="node-a", main_port=29400
    )


def test_detected_only_with_torchruns_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    environment = TorchElasticEnvironment()
    # The rank variables alone are what core.run and the ddp launcher set for their children: left to `local`.
    set_variables(monkeypatch, {name: value for name, value in WORKER.items() if name != "TORCHELASTIC_RUN_ID"})
    assert environment.environment_detect() is None
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-7")
    assert environment.environment_detect() is environment
    assert environment.environment_creates_processes_externally() is True


def test_a_missing_variable_says_how_to_start_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, {**WORKER, "GROUP_RANK": ""})
    with pytest.raises(ConfigurationError, match=r"GROUP_RANK is not set.*torchrun --nproc-per-node N"):
        TorchElasticEnvironment().environment_cluster_info(devices_per_node=2, num_nodes=2)


@pytest.mark.parametrize("raw", ["three", "-1", " 2.0"])
def test_a_non_numeric_rank_names_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    set_variables(monkeypatch, {**WORKER, "RANK": raw})
    with pytest.raises(ConfigurationError) as refused:
        TorchElasticEnvironment().environment_cluster_info(devices_per_node=2, num_nodes=2)
    assert str(refused.value) == f"The torchrun variable RANK={raw!r} is not a whole number; torchrun sets it to one."


@pytest.mark.parametrize(
    ("devices", "nodes", "fragments"),
    [
        (3, 2, ["devices=3 per node", "--nproc-per-node=2"]),
        (2, 3, ["2 x 3 = 6", "WORLD_SIZE is 4", "num_nodes=2"]),
    ],
)
def test_validation_names_both_numbers(
    monkeypatch: pytest.MonkeyPatch, devices: int, nodes: int, fragments: list[str]
) -> None:
    set_variables(monkeypatch, WORKER)
    with pytest.raises(ConfigurationError) as raised:
        TorchElasticEnvironment().environment_validate_settings(devices_per_node=devices, num_nodes=nodes)
    for fragment in fragments:
        assert fragment in str(raised.value)
