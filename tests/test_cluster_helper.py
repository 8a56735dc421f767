"""core.toolkit's cluster helpers: LauncherVariables reads a launcher's rank variables with its words in every
error, cluster_info / cluster_info_from build the ClusterInfo, and check_layout refuses a devices x num_nodes
that disagrees with what the launcher started, naming both, the variable and the fix."""

from __future__ import annotations

import re

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import core
from core.toolkit import Launched, LauncherVariables, check_layout, cluster_info_from

TORCHRUN = LauncherVariables(
    launcher="torchrun",
    malformed="torchrun sets it to one.",
    unset="{name} is not set; start the script with `torchrun --nproc-per-node N script.py`.",
)
BLANK = st.sampled_from(["", " ", "\t", " \n "])
# Every text that is not decimal digits with spaces around, and not blank (blank is read as unset).
NOT_DIGITS = st.one_of(
    st.text().filter(lambda text: text.strip() != "" and re.fullmatch(r"\s*[0-9]+\s*", text) is None),
    st.sampled_from(["-1", "+3", "1.0", "1e3", "1_000", "٣", "0x10", "four", "2 3"]),
)

# ------------------------------------------------------------------------------------------- reading


@given(st.integers(min_value=0, max_value=10**12), BLANK, BLANK)
def test_reads_the_digits_a_launcher_writes_with_spaces_around(number: int, before: str, after: str) -> None:
    environ = {"RANK": f"{before}{number}{after}"}
    assert TORCHRUN.read("RANK", environ=environ) == number
    assert TORCHRUN.read_if_set("RANK", environ=environ) == number
    assert TORCHRUN.read("RANK", 7, environ=environ) == number  # a default only stands in for an unset variable


@given(NOT_DIGITS)
def test_refuses_any_other_text_naming_the_variable_its_text_the_launcher_and_the_fix(raw: str) -> None:
    for read in (TORCHRUN.read, TORCHRUN.read_if_set):
        with pytest.raises(core.ConfigurationError) as refused:
            read("RANK", environ={"RANK": raw})
        assert str(refused.value) == (
            f"The torchrun variable RANK={raw!r} is not a whole number; torchrun sets it to one."
        )


@given(st.one_of(st.none(), BLANK), st.integers(min_value=0, max_value=100))
def test_an_unset_or_blank_variable_is_the_default_or_the_unset_message(raw: str | None, default: int) -> None:
    environ = {} if raw is None else {"GROUP_RANK": raw}
    assert TORCHRUN.read_if_set("GROUP_RANK", environ=environ) is None
    assert TORCHRUN.read("GROUP_RANK", default, environ=environ) == default
    with pytest.raises(core.ConfigurationError) as refused:
        TORCHRUN.read("GROUP_RANK", environ=environ)
    assert str(refused.value) == "GROUP_RANK is not set; start the script with `torchrun --nproc-per-node N script.py`."


def test_the_default_unset_message_names_the_variable_and_the_launcher() -> None:
    variables = LauncherVariables(launcher="the 'acme' launcher")
    with pytest.raises(core.ConfigurationError) as refused:
        variables.read("ACME_RANK", environ={})
    assert str(refused.value) == "ACME_RANK is not set; the 'acme' launcher sets it in every process it starts."
    with pytest.raises(core.ConfigurationError) as refused:
        variables.read("ACME_RANK", environ={"ACME_RANK": "x"})
    assert str(refused.value) == "The the 'acme' launcher variable ACME_RANK='x' is not a whole number."


def test_read_text_strips_and_falls_back_like_read() -> None:
    assert TORCHRUN.read_text("MASTER_ADDR", environ={"MASTER_ADDR": " node-a\n"}) == "node-a"
    assert TORCHRUN.read_text("MASTER_ADDR", "127.0.0.1", environ={"MASTER_ADDR": " "}) == "127.0.0.1"
    with pytest.raises(core.ConfigurationError, match=r"^MASTER_ADDR is not set; start the script with `torchrun"):
        TORCHRUN.read_text("MASTER_ADDR", environ={})


def test_reads_the_process_environment_when_no_mapping_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORE_TEST_CLUSTER_RANK", "3")
    monkeypatch.delenv("CORE_TEST_CLUSTER_UNSET", raising=False)
    assert TORCHRUN.read("CORE_TEST_CLUSTER_RANK") == 3
    assert TORCHRUN.read_if_set("CORE_TEST_CLUSTER_UNSET") is None


# ------------------------------------------------------------------------------------- ClusterInfo

WORKER = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1", "MASTER_PORT": "29400"}


def test_cluster_info_reads_each_named_variable_and_takes_numbers_as_they_are() -> None:
    info = TORCHRUN.cluster_info(
        world_size="WORLD_SIZE", global_rank="RANK", local_rank="LOCAL_RANK", node_rank=1,
        main_address="node-a", main_port="MASTER_PORT", environ=WORKER,
    )
    assert info == core.ClusterInfo(
        world_size=4, global_rank=3, local_rank=1, node_rank=1, main_address="node-a", main_port=29400
    )


@pytest.mark.parametrize("missing", ["WORLD_SIZE", "RANK", "LOCAL_RANK", "GROUP_RANK", "MASTER_PORT"])
def test_cluster_info_names_the_variable_that_is_missing(missing: str) -> None:
    environ = {name: value for name, value in WORKER.items() if name != missing}
    with pytest.raises(core.ConfigurationError) as refused:
        TORCHRUN.cluster_info(
            world_size="WORLD_SIZE", global_rank="RANK", local_rank="LOCAL_RANK", node_rank="GROUP_RANK",
            main_address="node-a", main_port="MASTER_PORT", environ=environ,
        )
    assert str(refused.value).startswith(f"{missing} is not set; start the script with `torchrun")


def test_cluster_info_keeps_the_records_own_checks() -> None:
    with pytest.raises(core.ConfigurationError, match=r"global_rank 4 is outside a world of size 4"):
        TORCHRUN.cluster_info(
            world_size="WORLD_SIZE", global_rank=4, local_rank=0, node_rank=0, main_address="a", main_port=1,
            environ=WORKER,
        )


@attrs.frozen
class Ranks:
    world_size: int
    global_rank: int
    local_rank: int
    node_rank: int
    local_size: int  # what the environment keeps besides: not read


def test_cluster_info_from_a_record_of_ranks() -> None:
    info = cluster_info_from(Ranks(8, 5, 1, 2, 2), "10.1.2.3", 20451)
    assert info == core.ClusterInfo(
        world_size=8, global_rank=5, local_rank=1, node_rank=2, main_address="10.1.2.3", main_port=20451
    )


# -------------------------------------------------------------------------------------- the layout


def per_node(count: int | None) -> Launched:
    return Launched(count, f"SLURM runs {count} tasks per node (--ntasks-per-node={count})",
                    f"Make them agree: devices={count}, or --ntasks-per-node=N.")


def nodes(count: int | None) -> Launched:
    return Launched(count, f"the SLURM job has {count} node(s) (--nodes={count})", "Make them agree: --nodes=N.")


def world(count: int | None) -> Launched:
    return Launched(count, f"SLURM started SLURM_NTASKS={count} tasks", "Make them agree: --ntasks=N.")


COUNTS = st.integers(min_value=1, max_value=64)


@given(COUNTS, COUNTS, COUNTS, COUNTS, COUNTS)
def test_check_layout_accepts_exactly_an_agreeing_layout_and_refuses_the_first_count_that_disagrees(
    devices: int, num_nodes: int, started_per_node: int, started_nodes: int, started: int
) -> None:
    launched = {"per_node": per_node(started_per_node), "nodes": nodes(started_nodes), "world_size": world(started)}
    expected = None
    if started_per_node != devices:
        expected = (
            f"devices={devices} per node was requested, but SLURM runs {started_per_node} tasks per node "
            f"(--ntasks-per-node={started_per_node}). Make them agree: devices={started_per_node}, or "
            f"--ntasks-per-node=N."
        )
    elif started_nodes != num_nodes:
        expected = (
            f"num_nodes={num_nodes} was requested, but the SLURM job has {started_nodes} node(s) "
            f"(--nodes={started_nodes}). Make them agree: --nodes=N."
        )
    elif started != devices * num_nodes:
        expected = (
            f"devices x num_nodes = {devices} x {num_nodes} = {devices * num_nodes} processes were requested, "
            f"but SLURM started SLURM_NTASKS={started} tasks. Make them agree: --ntasks=N."
        )
    if expected is None:
        check_layout(devices, num_nodes, **launched)
        return
    with pytest.raises(core.ConfigurationError) as refused:
        check_layout(devices, num_nodes, **launched)
    assert str(refused.value) == expected


@given(COUNTS, COUNTS, COUNTS)
def test_a_count_the_launcher_does_not_report_is_not_checked(devices: int, num_nodes: int, started: int) -> None:
    check_layout(devices, num_nodes)
    check_layout(devices, num_nodes, per_node=per_node(None), nodes=nodes(None), world_size=world(None))
    check_layout(devices, num_nodes, per_node=per_node(devices), world_size=world(devices * num_nodes))
    if started != devices * num_nodes:
        with pytest.raises(core.ConfigurationError, match=rf"^devices x num_nodes = {devices} x {num_nodes} = "):
            check_layout(devices, num_nodes, per_node=per_node(None), world_size=world(started))


def test_the_helpers_are_public_names_of_the_toolkit() -> None:
    import core.toolkit

    assert {"Launched", "LauncherVariables", "check_layout", "cluster_info_from"} <= set(core.toolkit.__all__)
