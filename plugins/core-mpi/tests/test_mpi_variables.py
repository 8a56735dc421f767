"""The rank, node and rendezvous rules of the mpi environment for each MPI flavour."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from core_mpi import MPIEnvironment, hnp_address, read_ranks, rendezvous_port

from core import ClusterInfo, ConfigurationError

OPEN_MPI = {  # rank 5 of `mpirun -n 8 --npernode 4` on two nodes
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    "OMPI_COMM_WORLD_NODE_RANK": "1",  # not a node index: ignored
    "OMPI_MCA_ess_base_jobid": "1978466305",
    "PMIX_NAMESPACE": "1978466305",
    "OMPI_MCA_orte_hnp_uri": "1978466304.0;tcp://10.1.2.3:34205;tcp6://[fd00::2]:34525",
}
MPICH = {"PMI_SIZE": "6", "PMI_RANK": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "3", "PMI_KVSNAME": "kvs_77_0"}
MVAPICH = {
    "MV2_COMM_WORLD_SIZE": "4", "MV2_COMM_WORLD_RANK": "3", "MV2_COMM_WORLD_LOCAL_RANK": "1",
    "MV2_COMM_WORLD_LOCAL_SIZE": "2", "MPIRUN_ID": "991",
    "PMI_SIZE": "4", "PMI_RANK": "3",  # some MVAPICH2 builds set these too: its own variables win
}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = dict(os.environ)
    for name in list(os.environ):
        if name.startswith(("OMPI_", "PMI_", "PMIX_", "MV2_", "MPI_", "MPIRUN_", "MASTER_")):
            monkeypatch.delenv(name)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        (OPEN_MPI, ("Open MPI", 8, 5, 1, 4, 1, "1978466305")),
        (MPICH, ("MPICH", 6, 4, 1, 3, 1, "kvs_77_0")),
        (MVAPICH, ("MVAPICH2", 4, 3, 1, 2, 1, "991")),
        ({"PMI_SIZE": "3", "PMI_RANK": "2"}, ("MPICH", 3, 2, 2, 3, 0, None)),  # no local variables: one node
    ],
)
def test_ranks_of_each_flavour(variables: dict[str, str], expected: tuple[object, ...]) -> None:
    ranks = read_ranks(variables)
    assert (
        ranks.flavour, ranks.world_size, ranks.global_rank, ranks.local_rank, ranks.local_size, ranks.node_rank,
        ranks.job_id,
    ) == expected


def test_inconsistent_ranks_are_refused_with_every_number() -> None:
    with pytest.raises(ConfigurationError, match=r"OMPI_COMM_WORLD_RANK=9, OMPI_COMM_WORLD_SIZE=8"):
        read_ranks({**OPEN_MPI, "OMPI_COMM_WORLD_RANK": "9"})


def test_a_non_numeric_rank_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match=r"PMI_RANK='x' is not a whole number"):
        read_ranks({"PMI_SIZE": "2", "PMI_RANK": "x"})


def test_no_launcher_names_the_variables_it_looked_for() -> None:
    with pytest.raises(ConfigurationError, match=r"OMPI_COMM_WORLD_SIZE, MV2_COMM_WORLD_SIZE, PMI_SIZE is set"):
        read_ranks({})


def test_the_port_is_a_pure_function_of_the_job_id() -> None:
    assert rendezvous_port("1978466305") == rendezvous_port("1978466305")
    ports = {rendezvous_port(str(job)) for job in range(200)}
    assert all(20000 <= port < 30000 for port in ports)
    assert len(ports) > 190  # different jobs, different ports (almost always)


def test_the_launcher_host_comes_from_the_hnp_uri() -> None:
    assert hnp_address(OPEN_MPI) == "10.1.2.3"
    assert hnp_address({}) is None


def set_variables(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_cluster_info_across_two_nodes_uses_the_launcher_host(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, OPEN_MPI)
    environment = MPIEnvironment()
    info = environment.environment_cluster_info(devices_per_node=4, num_nodes=2)
    assert info == ClusterInfo(
        world_size=8, global_rank=5, local_rank=1, node_rank=1, main_address="10.1.2.3",
        main_port=rendezvous_port("1978466305"),
    )
    assert os.environ["MASTER_ADDR"] == "10.1.2.3"
    environment.environment_teardown()
    assert "MASTER_ADDR" not in os.environ and "MASTER_PORT" not in os.environ


def test_one_node_rendezvous_on_loopback_and_master_variables_win(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, {**OPEN_MPI, "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "5"})
    info = MPIEnvironment().environment_cluster_info(devices_per_node=8, num_nodes=1)
    assert (info.main_address, info.node_rank) == ("127.0.0.1", 0)
    set_variables(monkeypatch, {"MASTER_ADDR": "head", "MASTER_PORT": "29400"})
    info = MPIEnvironment().environment_cluster_info(devices_per_node=8, num_nodes=1)
    assert (info.main_address, info.main_port) == ("head", 29400)


def test_several_nodes_without_any_address_ask_for_master_addr(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, MPICH)
    with pytest.raises(ConfigurationError, match=r"spans 2 nodes.*MASTER_ADDR=\$\(hostname\)"):
        MPIEnvironment().environment_cluster_info(devices_per_node=3, num_nodes=2)


def test_no_job_id_asks_for_master_port(monkeypatch: pytest.MonkeyPatch) -> None:
    set_variables(monkeypatch, {"PMI_SIZE": "2", "PMI_RANK": "0"})
    with pytest.raises(ConfigurationError, match=r"no job identifier.*MASTER_PORT=29500"):
        MPIEnvironment().environment_cluster_info(devices_per_node=2, num_nodes=1)


@pytest.mark.parametrize(
    ("devices", "nodes", "fragments"),
    [
        (2, 2, ["devices=2 per node", "started 4 processes on this node"]),
        (4, 3, ["4 x 3 = 12", "started 8", "num_nodes=2"]),
    ],
)
def test_validation_names_both_numbers(
    monkeypatch: pytest.MonkeyPatch, devices: int, nodes: int, fragments: list[str]
) -> None:
    set_variables(monkeypatch, OPEN_MPI)
    with pytest.raises(ConfigurationError) as raised:
        MPIEnvironment().environment_validate_settings(devices_per_node=devices, num_nodes=nodes)
    for fragment in fragments:
        assert fragment in str(raised.value)


def test_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    environment = MPIEnvironment()
    assert environment.environment_detect() is None
    set_variables(monkeypatch, {"PMI_SIZE": "2", "PMI_RANK": "1"})
    assert environment.environment_detect() is environment
