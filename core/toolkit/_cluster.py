"""What every cluster environment does with its launcher's variables: read the ranks, check the layout.

A launcher (``srun``, ``torchrun``, ``mpirun``, a scheduler's own) writes each process's place in the job into
environment variables. :class:`LauncherVariables` reads them, with the launcher's words in every error, and builds
the :class:`core.ClusterInfo` (:func:`cluster_info_from` builds it from an environment's own record of the ranks);
:func:`check_layout` refuses a ``devices`` x ``num_nodes`` that disagrees with what the launcher started, in one
wording for every environment. Public through :mod:`core.toolkit`; no torch here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, Protocol

import attrs

from core._checks import read_whole
from core._errors import ConfigurationError
from core._records import ClusterInfo

DEFAULT_UNSET: Final = "{name} is not set; {launcher} sets it in every process it starts."


@attrs.frozen(kw_only=True)
class LauncherVariables:
    """The variables a launcher sets in every process it starts, and how to word an error about one of them.

    ``TORCHRUN = LauncherVariables(launcher="torchrun", malformed="torchrun sets it to one.")``, then
    ``TORCHRUN.read("RANK")`` is the rank, and ``TORCHRUN.cluster_info(world_size="WORLD_SIZE", ...)`` the record.

    :param launcher: Who sets the variables, as the messages name it: ``The torchrun variable RANK='x' is ...``.
    :param malformed: The fix when a value is not a whole number (:func:`core.toolkit.read_whole`'s ``hint``).
    :param unset: The message when a variable the environment needs is unset or blank; ``{name}`` and
        ``{launcher}`` stand for the variable and the launcher. Say how to start the process so that it is set.
    """

    launcher: str
    malformed: str = ""
    unset: str = DEFAULT_UNSET

    def read_if_set(self, name: str, *, environ: Mapping[str, str] | None = None) -> int | None:
        """The whole number in variable ``name``; ``None`` when it is unset or blank.

        :raises core.ConfigurationError: the text is not a whole number (it names the variable, its text,
            the launcher and ``malformed``).
        """
        raw = (os.environ if environ is None else environ).get(name)
        if raw is None or not raw.strip():
            return None
        return read_whole(name, raw, source=self.launcher, hint=self.malformed)

    def read(self, name: str, default: int | None = None, *, environ: Mapping[str, str] | None = None) -> int:
        """The whole number in variable ``name``; ``default`` when it is unset or blank and a default is given.

        :raises core.ConfigurationError: the variable is unset with no default (the ``unset`` message), or
            its text is not a whole number.
        """
        value = self.read_if_set(name, environ=environ)
        if value is not None:
            return value
        if default is not None:
            return default
        raise self.unset_error(name)

    def read_text(self, name: str, default: str | None = None, *, environ: Mapping[str, str] | None = None) -> str:
        """The text of variable ``name``, stripped (an address, a job id); ``default`` when unset or blank.

        :raises core.ConfigurationError: the variable is unset with no default (the ``unset`` message).
        """
        text = (os.environ if environ is None else environ).get(name, "").strip()
        if text:
            return text
        if default is not None:
            return default
        raise self.unset_error(name)

    def unset_error(self, name: str) -> ConfigurationError:
        """The error that says variable ``name`` is missing (for a variable the environment checks itself)."""
        return ConfigurationError(self.unset.format(name=name, launcher=self.launcher))

    def cluster_info(
        self,
        *,
        world_size: str | int,
        global_rank: str | int,
        local_rank: str | int,
        node_rank: str | int,
        main_address: str,
        main_port: str | int,
        environ: Mapping[str, str] | None = None,
    ) -> ClusterInfo:
        """This process's :class:`core.ClusterInfo`, each number read from the variable named (with :meth:`read`)
        or given as a number where the environment works it out otherwise (LSF's node rank from its host list).

        Read in the order of the arguments, so the first missing variable is the one named.
        """

        def number(source: str | int) -> int:
            return self.read(source, environ=environ) if isinstance(source, str) else source

        return ClusterInfo(
            world_size=number(world_size),
            global_rank=number(global_rank),
            local_rank=number(local_rank),
            node_rank=number(node_rank),
            main_address=main_address,
            main_port=number(main_port),
        )


class RankRecord(Protocol):
    """What :func:`cluster_info_from` reads: any record of a process's ranks (an attrs class, a named tuple)."""

    @property
    def world_size(self) -> int: ...
    @property
    def global_rank(self) -> int: ...
    @property
    def local_rank(self) -> int: ...
    @property
    def node_rank(self) -> int: ...


def cluster_info_from(ranks: RankRecord, main_address: str, main_port: int) -> ClusterInfo:
    """The :class:`core.ClusterInfo` of a process whose ranks an environment keeps in its own record (read once
    from the launcher's variables, as the ``mpi`` environment's ``MPIRanks``), with the rendezvous it worked out.
    """
    return ClusterInfo(
        world_size=ranks.world_size,
        global_rank=ranks.global_rank,
        local_rank=ranks.local_rank,
        node_rank=ranks.node_rank,
        main_address=main_address,
        main_port=main_port,
    )


@attrs.frozen
class Launched:
    """One count of what a launcher started, and the words for a requested layout that disagrees with it.

    :param count: The number, as the launcher's variables say; ``None`` where they do not say it (not checked).
    :param says: What the launcher did, as the second half of a sentence, naming the variable or flag and its
        value: ``"SLURM started SLURM_NTASKS=8 tasks"``.
    :param fix: How to make them agree, a whole sentence: ``"Make them agree: devices=2, or --ntasks-per-node=4."``.
    """

    count: int | None
    says: str
    fix: str


def check_layout(
    devices_per_node: int,
    num_nodes: int,
    *,
    per_node: Launched | None = None,
    nodes: Launched | None = None,
    world_size: Launched | None = None,
) -> None:
    """Refuse a requested ``devices_per_node`` x ``num_nodes`` that disagrees with what the launcher started.

    Checks, in this order, the processes on this node, the nodes, and the processes in all; a count not passed,
    or passed with ``count=None`` (the launcher did not say), is not checked. The refusal states what was
    requested, then the ``says`` and ``fix`` of the count that disagrees::

        devices=4 per node was requested, but SLURM runs 2 tasks per node (--ntasks-per-node=2). Make them ...
        num_nodes=3 was requested, but the SLURM job has 4 node(s) (--nodes=4). Make them agree: ...
        devices x num_nodes = 1 x 4 = 4 processes were requested, but SLURM started SLURM_NTASKS=8 tasks. ...

    :raises core.ConfigurationError: a count disagrees.
    """
    if per_node is not None and per_node.count not in (None, devices_per_node):
        _refuse(f"devices={devices_per_node} per node was requested", per_node)
    if nodes is not None and nodes.count not in (None, num_nodes):
        _refuse(f"num_nodes={num_nodes} was requested", nodes)
    processes = devices_per_node * num_nodes
    if world_size is not None and world_size.count not in (None, processes):
        _refuse(
            f"devices x num_nodes = {devices_per_node} x {num_nodes} = {processes} processes were requested", world_size
        )


def _refuse(requested: str, launched: Launched) -> None:
    raise ConfigurationError(f"{requested}, but {launched.says}. {launched.fix}")
