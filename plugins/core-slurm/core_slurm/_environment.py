"""The ``slurm`` environment: processes started by ``srun`` (or an ``sbatch`` script of one task).

Variables read (all set by SLURM in every task):

- ranks: ``SLURM_NTASKS`` (world size), ``SLURM_PROCID`` (global), ``SLURM_LOCALID`` (local),
  ``SLURM_NODEID`` (node);
- the allocation, for validation: ``SLURM_NTASKS_PER_NODE``, ``SLURM_NNODES`` / ``SLURM_JOB_NUM_NODES``;
- the rendezvous: the first host of ``SLURM_STEP_NODELIST``, else ``SLURM_NODELIST``, else
  ``SLURM_JOB_NODELIST``; port ``MASTER_PORT`` when set, else ``15000 + the last four digits of
  SLURM_JOB_ID`` (Lightning's rule: every task computes the same port without talking);
- detection: ``SLURM_JOB_NAME`` (``bash`` and ``interactive`` mark an interactive allocation, which is left
  to other environments), ``SLURM_STEP_ID`` (present in tasks that ``srun`` started), and the MPI
  launchers' ``OMPI_COMM_WORLD_SIZE``, ``MV2_COMM_WORLD_SIZE`` and ``PMI_SIZE`` (ranks that ``mpirun``
  started inside an allocation belong to the ``mpi`` environment, not to the step whose ``SLURM_PROCID``
  they inherit: see ``started_by_mpi_launcher``).
"""

from __future__ import annotations

import os
import shutil
import signal
import warnings
from collections.abc import Callable
from typing import Any, Final

from core import ClusterInfo, ConfigurationError, CoreWarning, hookimpl
from core.toolkit import ExportedVariables, Launched, LauncherVariables, check_layout

from ._hostlist import first_host
from ._requeue import RequeueCallback, RequeueHandler

INTERACTIVE_JOB_NAMES: Final = ("bash", "interactive")
PORT_BASE: Final = 15000
DEFAULT_ADDRESS: Final = "127.0.0.1"
SLURM: Final = LauncherVariables(
    launcher="SLURM",
    malformed="SLURM sets it to one. Unset it, or run the script under srun.",
    unset="{name} is not set, so this process was not started by srun. The 'slurm' environment reads the ranks "
    "that srun gives each task: run `srun python script.py` inside the allocation, or pick another environment.",
)


def is_interactive() -> bool:
    """An interactive allocation (``salloc``, ``srun --pty bash``): processes are started by hand."""
    return os.environ.get("SLURM_JOB_NAME") in INTERACTIVE_JOB_NAMES


def started_by_srun() -> bool:
    """Whether this process is a task of a job step (``srun``), not the batch script itself."""
    return "SLURM_STEP_ID" in os.environ or "SLURM_STEPID" in os.environ


def started_by_mpi_launcher() -> bool:
    """An ``mpirun`` / ``mpiexec`` rank inside the allocation, whose ranks are the launcher's, not SLURM's.

    Open MPI and MVAPICH2 set ``OMPI_COMM_WORLD_SIZE`` / ``MV2_COMM_WORLD_SIZE``, which ``srun`` never does.
    ``srun --mpi=pmi2`` sets ``PMI_SIZE`` equal to ``SLURM_NTASKS``; Hydra (MPICH, Intel MPI) starts its ranks
    from one proxy task per node, so there ``PMI_SIZE`` differs, unless each node runs one rank, and then
    SLURM's ranks are the launcher's.
    """
    if "OMPI_COMM_WORLD_SIZE" in os.environ or "MV2_COMM_WORLD_SIZE" in os.environ:
        return True
    pmi_size = os.environ.get("PMI_SIZE")
    return pmi_size is not None and pmi_size != os.environ.get("SLURM_NTASKS")


def is_slurm_task() -> bool:
    """The detection rule: a SLURM task count, no interactive job name, and not an MPI launcher's rank."""
    return "SLURM_NTASKS" in os.environ and not is_interactive() and not started_by_mpi_launcher()


def main_address() -> str:
    """The first host of the step's (else the job's) node list: rank 0 runs there."""
    for name in ("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"):
        nodelist = os.environ.get(name, "").strip()
        if nodelist:
            return first_host(nodelist)
    return DEFAULT_ADDRESS


def main_port() -> int:
    """``MASTER_PORT`` when set; else 15000 plus the last four digits of the job id (15000 to 24999)."""
    explicit = SLURM.read_if_set("MASTER_PORT")
    if explicit is not None:
        return explicit
    job_id = os.environ.get("SLURM_JOB_ID", "")
    digits = job_id[-4:]
    if not digits.isdigit():
        raise ConfigurationError(
            f"Cannot derive the rendezvous port: SLURM_JOB_ID={job_id!r} does not end in digits. "
            f"Set MASTER_PORT to a free port shared by every task."
        )
    return PORT_BASE + int(digits)


def _started_by_another_launcher() -> bool:
    """torchrun, an MPI launcher, or core's own (``LOCAL_RANK``) started this process: srun is not missing."""
    return started_by_mpi_launcher() or any(name in os.environ for name in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK"))


def _warn_if_srun_unused() -> None:
    """Inside a job's batch script with several tasks but not started by srun: the classic hang."""
    if (
        "SLURM_JOB_ID" in os.environ
        and not started_by_srun()
        and not is_interactive()
        and not _started_by_another_launcher()
        and os.environ.get("SLURM_NTASKS") != "1"
        and shutil.which("srun") is not None
    ):
        warnings.warn(
            f"This process runs in SLURM job {os.environ['SLURM_JOB_ID']} but was not started by srun "
            f"(SLURM_NTASKS={os.environ.get('SLURM_NTASKS', 'unset')}, no SLURM_STEP_ID). SLURM starts one "
            f"process per task only through srun: prepend it, as in `srun python script.py`.",
            CoreWarning,
            stacklevel=3,
        )


class SLURMEnvironment:
    """Ranks and rendezvous from ``srun``; auto-requeue on ``SIGUSR1``.

    :param auto_requeue: When a run starts, take over ``requeue_signal``: on it, call the callback given to
        :meth:`set_requeue_callback` (save a checkpoint) in every process, then requeue the job from rank 0.
    :param requeue_signal: The signal SLURM is asked to send (``#SBATCH --signal=USR1@90``).
    """

    kind: Final = "environment"
    name: Final = "slurm"
    priority: Final = 400

    def __init__(self, auto_requeue: bool = True, requeue_signal: int = signal.SIGUSR1) -> None:
        self.auto_requeue = auto_requeue
        self.requeue_signal = requeue_signal
        self.requeue_handler: RequeueHandler | None = None
        self._callback: RequeueCallback | None = None
        self._deferred = False
        self._exported = ExportedVariables()

    # -- requeue API, for the Trainer and for users with their own loop -----------------------------------

    def set_requeue_callback(self, callback: Callable[[], Any] | None, *, deferred: bool = False) -> bool:
        """Register what runs in every process before rank 0 requeues the job.

        :param callback: A function of no arguments, typically saving a checkpoint; ``None`` removes it.
        :param deferred: ``False``: the signal handler runs the callback and requeues at once. ``True``: the
            handler only sets :attr:`requeue_requested`; the loop agrees on it across ranks at a step
            boundary and calls :meth:`requeue` on every rank (safe for callbacks that run collectives).
        :return: Whether auto-requeue is on (``False`` when built with ``auto_requeue=False``).
        """
        self._callback, self._deferred = callback, deferred
        if self.requeue_handler is not None:
            self.requeue_handler.callback, self.requeue_handler.deferred = callback, deferred
        return self.auto_requeue

    @property
    def requeue_requested(self) -> bool:
        """Whether the requeue signal arrived in this process (what a deferred loop polls)."""
        return self.requeue_handler is not None and self.requeue_handler.received

    def requeue(self) -> None:
        """Run the callback here and, on global rank 0, requeue the job (a deferred loop calls this)."""
        handler = self.requeue_handler or RequeueHandler(SLURM.read("SLURM_PROCID", 0), self.requeue_signal)
        handler.callback = self._callback
        handler.run()

    def install_requeue_handler(self) -> RequeueHandler | None:
        """Take over the requeue signal now (done for you when a run starts); ``None`` when turned off."""
        if not self.auto_requeue:
            return None
        if self.requeue_handler is None:
            self.requeue_handler = RequeueHandler(SLURM.read("SLURM_PROCID", 0), self.requeue_signal)
        self.requeue_handler.callback, self.requeue_handler.deferred = self._callback, self._deferred
        self.requeue_handler.install()
        return self.requeue_handler

    # -- hooks ---------------------------------------------------------------------------------------------

    @hookimpl
    def core_attach(self, active: object) -> None:
        if "SLURM_JOB_ID" in os.environ:
            self.install_requeue_handler()

    @hookimpl
    def environment_detect(self) -> object | None:
        _warn_if_srun_unused()
        return self if is_slurm_task() else None

    @hookimpl
    def environment_creates_processes_externally(self) -> bool:
        return True

    @hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> ClusterInfo:
        address, port = main_address(), main_port()
        self._exported.set_rendezvous(address, port)
        return SLURM.cluster_info(
            world_size="SLURM_NTASKS",
            global_rank="SLURM_PROCID",
            local_rank="SLURM_LOCALID",
            node_rank="SLURM_NODEID",
            main_address=address,
            main_port=port,
        )

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        _warn_if_srun_unused()
        ntasks = SLURM.read("SLURM_NTASKS")
        if ntasks > 1 and not started_by_srun():
            raise ConfigurationError(
                f"SLURM allocated SLURM_NTASKS={ntasks} tasks, but this process was not started by srun, so it "
                f"is the only one and the others would wait for it forever. Start the script with "
                f"`srun python script.py` in the batch script."
            )
        per_node = SLURM.read_if_set("SLURM_NTASKS_PER_NODE")
        nodes = SLURM.read_if_set("SLURM_NNODES") or SLURM.read_if_set("SLURM_JOB_NUM_NODES")
        check_layout(
            devices_per_node,
            num_nodes,
            per_node=Launched(
                per_node,
                f"SLURM runs {per_node} task{'s' if per_node != 1 else ''} per node (--ntasks-per-node={per_node})",
                f"Make them agree: devices={per_node}, or --ntasks-per-node={devices_per_node}.",
            ),
            nodes=Launched(
                nodes,
                f"the SLURM job has {nodes} node(s) (--nodes={nodes})",
                f"Make them agree: num_nodes={nodes}, or --nodes={num_nodes}.",
            ),
            world_size=Launched(
                ntasks,
                f"SLURM started SLURM_NTASKS={ntasks} tasks",
                f"Make them agree, for example --nodes={num_nodes} --ntasks-per-node={devices_per_node}.",
            ),
        )

    @hookimpl
    def environment_teardown(self) -> None:
        if self.requeue_handler is not None:
            self.requeue_handler.uninstall()
        self._exported.restore()

