"""The kubeflow environment with the variables a PyTorchJob pod gets (one process per pod)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from core_kubeflow import KubeflowEnvironment

from core import ClusterInfo, ConfigurationError

WORKER_POD = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "4", "RANK": "2"}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = dict(os.environ)
    for name in [*WORKER_POD, "LOCAL_RANK"]:
        monkeypatch.delenv(name, raising=False)
    yield
    os.environ.clear()
    os.environ.update(saved)


def set_variables(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_each_pod_is_a_node_with_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, WORKER_POD)
    info = KubeflowEnvironment().environment_cluster_info(devices_per_node=1, num_nodes=4)
    assert info == ClusterInfo(
        world_size=4, global_rank=2, local_rank=0, node_rank=2, main_address="job-master-0", main_port=23456
    )


def test_local_rank_is_read_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, {**WORKER_POD, "LOCAL_RANK": "0"})
    assert KubeflowEnvironment().environment_cluster_info(devices_per_node=1, num_nodes=4).local_rank == 0


def test_never_detected_even_inside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, {**WORKER_POD, "KUBERNETES_PORT": "tcp://10.0.0.1:443"})
    assert KubeflowEnvironment().environment_detect() is None


@pytest.mark.parametrize("missing", ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"])
def test_a_missing_variable_is_named(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    set_variables(monkeypatch, {name: value for name, value in WORKER_POD.items() if name != missing})
    with pytest.raises(ConfigurationError, match=rf"^{missing} is not set.*PyTorchJob"):
        KubeflowEnvironment().environment_cluster_info(devices_per_node=1, num_nodes=4)


@pytest.mark.parametrize(("devices", "nodes"), [(2, 4), (1, 3)])
def test_validation_names_both_numbers(monkeypatch: pytest.MonkeyPatch, devices: int, nodes: int) -> None:
    set_variables(monkeypatch, WORKER_POD)
    with pytest.raises(ConfigurationError) as raised:
        KubeflowEnvironment().environment_validate_settings(devices_per_node=devices, num_nodes=nodes)
    message = str(raised.value)
    assert f"devices={devices} x num_nodes={nodes}" in message and "WORLD_SIZE=4 pods" in message


def test_validation_accepts_one_process_per_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, WORKER_POD)
    KubeflowEnvironment().environment_validate_settings(devices_per_node=1, num_nodes=4)
