"""The ``lsf`` environment: tasks started by ``jsrun`` in an LSF job (CSM systems such as Summit).

Variables read, as Lightning's LSFEnvironment documents them:

- ``JSM_NAMESPACE_SIZE``, ``JSM_NAMESPACE_RANK``, ``JSM_NAMESPACE_LOCAL_RANK``: world size, global and local
  rank, set by ``jsrun`` in every task;
- ``LSB_JOBID``: the job id; the port is ``10000 + LSB_JOBID % 1000`` unless ``MASTER_PORT`` is set;
- ``LSB_DJOB_RANKFILE``: a file with one host name per line (per slot). Its first line is the launch node,
  which runs the batch script but no task; the remaining hosts, in order of first appearance, are the
  compute nodes: the first is the main address and this host's position is the node rank. When the file is
  missing, ``LSB_MCPU_HOSTS`` (``"launch 1 host1 42 host2 42"``) and then ``LSB_HOSTS`` (one name per slot)
  give the same list.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Final

from core import ClusterInfo, ConfigurationError, hookimpl
from core.toolkit import ExportedVariables, Launched, LauncherVariables, check_layout

DETECTION_VARIABLES: Final = ("LSB_JOBID", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_LOCAL_RANK")
HOST_SOURCES: Final = ("LSB_DJOB_RANKFILE", "LSB_MCPU_HOSTS", "LSB_HOSTS")
PORT_BASE: Final = 10000
JSRUN: Final = LauncherVariables(
    launcher="LSF",
    malformed="jsrun sets it to one.",
    unset="{name} is not set, but the 'lsf' environment reads it from jsrun. Start the script with "
    "`jsrun ... python script.py` inside the LSF job, or pick another environment.",
)
RENDEZVOUS: Final = LauncherVariables(launcher="environment", malformed="set MASTER_PORT to a port every task shares.")


def _unique(hosts: list[str]) -> list[str]:
    return list(dict.fromkeys(hosts))


def _slot_hosts() -> tuple[str, list[str]]:
    """Every host name the job lists, one per slot, launch node first, and the variable it came from."""
    rankfile = os.environ.get("LSB_DJOB_RANKFILE", "").strip()
    if rankfile:
        try:
            text = Path(rankfile).read_text()
        except OSError as error:
            raise ConfigurationError(f"Cannot read LSB_DJOB_RANKFILE={rankfile!r}: {error}.") from None
        return "LSB_DJOB_RANKFILE", [line.strip() for line in text.splitlines() if line.strip()]
    mcpu = os.environ.get("LSB_MCPU_HOSTS", "").split()
    if mcpu:
        return "LSB_MCPU_HOSTS", mcpu[0::2]
    return "LSB_HOSTS", os.environ.get("LSB_HOSTS", "").split()


def compute_hosts() -> list[str]:
    """The job's compute nodes in order, without the launch node."""
    source, hosts = _slot_hosts()
    unique = _unique(hosts)
    if len(unique) < 2:
        raise ConfigurationError(
            f"{source} lists {unique or 'no hosts'}; expected the launch node followed by at least one compute "
            f"node. Run inside an LSF job started with bsub, with tasks started by jsrun."
        )
    return unique[1:]


def main_port() -> int:
    explicit = RENDEZVOUS.read_if_set("MASTER_PORT")
    return explicit if explicit is not None else PORT_BASE + JSRUN.read("LSB_JOBID") % 1000


class LSFEnvironment:
    """Ranks from jsrun, hosts from the LSF rank file."""

    kind: Final = "environment"
    name: Final = "lsf"
    priority: Final = 300

    def __init__(self) -> None:
        self._exported = ExportedVariables()

    @hookimpl
    def environment_detect(self) -> object | None:
        jsrun_task = all(os.environ.get(name) for name in DETECTION_VARIABLES)
        has_hosts = any(os.environ.get(name) for name in HOST_SOURCES)
        return self if jsrun_task and has_hosts else None

    @hookimpl
    def environment_creates_processes_externally(self) -> bool:
        return True

    @hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> ClusterInfo:
        hosts = compute_hosts()
        hostname = socket.gethostname()
        if hostname not in hosts:
            short = hostname.split(".")[0]
            matches = [index for index, host in enumerate(hosts) if host.split(".")[0] == short]
            if not matches:
                raise ConfigurationError(
                    f"This host, {hostname!r}, is not among the job's compute nodes {hosts} "
                    f"(from {_slot_hosts()[0]}); cannot tell its node rank."
                )
            node_rank = matches[0]
        else:
            node_rank = hosts.index(hostname)
        address, port = hosts[0], main_port()
        self._exported.set_rendezvous(address, port)
        return JSRUN.cluster_info(
            world_size="JSM_NAMESPACE_SIZE",
            global_rank="JSM_NAMESPACE_RANK",
            local_rank="JSM_NAMESPACE_LOCAL_RANK",
            node_rank=node_rank,
            main_address=address,
            main_port=port,
        )

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        world_size = JSRUN.read("JSM_NAMESPACE_SIZE")
        hosts = compute_hosts()
        check_layout(
            devices_per_node,
            num_nodes,
            nodes=Launched(
                len(hosts),
                f"the LSF job has {len(hosts)} compute node(s) ({', '.join(hosts)})",
                f"Make them agree: num_nodes={len(hosts)}, or bsub -nnodes {num_nodes}.",
            ),
            world_size=Launched(
                world_size,
                f"jsrun started JSM_NAMESPACE_SIZE={world_size} tasks",
                f"Make them agree, for example jsrun --nrs {num_nodes} --tasks_per_rs {devices_per_node}.",
            ),
        )

    @hookimpl
    def environment_teardown(self) -> None:
        self._exported.restore()

