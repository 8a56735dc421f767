"""A private SLURM cluster for the tests (conftest.py's ``slurm_cluster``): munged, slurmctld, slurmd on loopback.

Everything lives in a temporary directory: ``slurm.conf`` (``SlurmctldHost=localhost(127.0.0.1)``, free
ports picked now, one node ``localhost`` with 4 CPUs on this 2-core machine, oversubscription allowed),
a fresh munge key and socket, state and spool directories and the daemons' logs.
``CommunicationParameters=NoCtldInAddrAny,NoInAddrAny`` makes slurmctld and slurmd listen on 127.0.0.1 instead of
every interface. Every SLURM command is run with ``SLURM_CONF`` pointing at that file and with the caller's own
``SLURM_*`` variables removed. The daemons are stopped at the end by the PIDs this fixture started, after the
cluster's jobs are cancelled.

The tests need Debian's ``slurm-wlm`` and ``munge`` (``scripts/system-deps.sh`` installs them). When they
are missing the tests skip with that reason, except on CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scontrol", "sinfo", "squeue", "scancel")
STARTUP_TIMEOUT = 60.0
# What the test process may have inherited from a scheduler or launcher; never passed on to the jobs.
LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MV2_", "LSB_", "JSM_", "TORCHELASTIC_", "MASTER_")
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def require_binaries(names: Sequence[str], install_hint: str) -> None:
    """Skip (fail on CI) when a program the test needs is not installed."""
    missing = [name for name in names if _which(name) is None]
    if not missing:
        return
    reason = f"missing {', '.join(missing)}; install them with: {install_hint}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run this test, but {reason}")
    pytest.skip(reason)


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.2) -> object:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


SLURM_CONF_TEMPLATE = """\
ClusterName=coretest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
JobRequeue=1
ReturnToService=2
SlurmdParameters=config_overrides
FirstJobId={first_job_id}
MailProg=/bin/true
KillWait=2
MessageTimeout=60
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
InactiveLimit=0
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=localhost NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""

CGROUP_CONF = "CgroupPlugin=autodetect\n"


class SlurmCluster:
    """A running private cluster: its configuration, and helpers to run SLURM commands against it."""

    @property
    def daemon_pids(self) -> dict[str, int]:
        """The PIDs of the daemons this cluster started, by name."""
        return {name: process.pid for name, process in self._daemons}

    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self._daemons: list[tuple[str, subprocess.Popen[bytes]]] = []

    @property
    def env(self) -> dict[str, str]:
        """This process's environment without scheduler or launcher variables, pointed at the private cluster."""
        env = {
            name: value for name, value in os.environ.items()
            if not name.startswith(LAUNCHER_PREFIXES) and name not in LAUNCHER_VARIABLES
        }
        env["SLURM_CONF"] = str(self.conf)
        return env

    # -- lifecycle -----------------------------------------------------------------------------------------

    def write_config(self) -> None:
        for directory in ("munge", "state", "spool"):
            (self.root / directory).mkdir(mode=0o755, exist_ok=True)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.conf.write_text(
            SLURM_CONF_TEMPLATE.format(
                root=self.root,
                ctld_port=_free_port(),
                slurmd_port=_free_port(),
                user="root" if os.geteuid() == 0 else os.environ.get("USER", "root"),
                # Job ids (and so the slurm environment's port, 15000 + last 4 digits) differ between sessions.
                first_job_id=int.from_bytes(os.urandom(2), "big") % 9000 + 1000,
            )
        )
        (self.root / "cgroup.conf").write_text(CGROUP_CONF)

    def start(self) -> None:
        munge_dir = self.root / "munge"
        self._spawn("munged", [
            "munged", "--foreground", "--force",
            f"--socket={munge_dir / 'munge.socket'}", f"--key-file={munge_dir / 'munge.key'}",
            f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={munge_dir / 'munged.log'}",
            f"--seed-file={munge_dir / 'munged.seed'}",
        ])
        wait_until(lambda: (munge_dir / "munge.socket").exists(), 15, "munged's socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", "localhost"])
        wait_until(self.node_idle, STARTUP_TIMEOUT, "the node to be idle in sinfo")

    def _spawn(self, name: str, command: list[str]) -> None:
        executable = _which(command[0])
        assert executable is not None, f"{command[0]} vanished after the check"
        with open(self.root / f"{name}.out", "wb") as output:
            process = subprocess.Popen(
                [executable, *command[1:]], stdout=output, stderr=subprocess.STDOUT, env=self.env,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self._daemons.append((name, process))
        time.sleep(0.1)
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited at once with code {process.returncode}:\n{self.logs()}")

    def node_idle(self) -> bool:
        for name, process in self._daemons:
            if process.poll() is not None:
                raise RuntimeError(f"{name} died with exit code {process.returncode}:\n{self.logs()}")
        result = self.run(["sinfo", "--noheader", "--format=%t"], check=False, timeout=10)
        return result.returncode == 0 and result.stdout.strip() == "idle"

    def stop(self) -> None:
        """Cancel what is left, then stop the daemons this fixture started, by their PIDs."""
        if any(process.poll() is None for name, process in self._daemons if name == "slurmctld"):
            self.cancel_all()
        for _name, process in reversed(self._daemons):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _name, process in reversed(self._daemons):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self._daemons.clear()

    def cancel_all(self) -> None:
        jobs = self.run(["squeue", "--noheader", "--format=%i"], check=False, timeout=10).stdout.split()
        if not jobs:
            return
        self.run(["scancel", *jobs], check=False, timeout=10)
        with contextlib.suppress(TimeoutError):
            wait_until(
                lambda: not self.run(["squeue", "--noheader"], check=False, timeout=10).stdout.strip(),
                20, "the cancelled jobs to end",
            )

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.glob("*.out")) + sorted(self.root.glob("*.log")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    # -- commands ------------------------------------------------------------------------------------------

    def run(
        self, command: Sequence[str], *, check: bool = True, timeout: float = 120,
        env: Mapping[str, str] | None = None, cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a SLURM command (``srun``, ``sbatch``, ...) against this cluster."""
        result = subprocess.run(
            list(command), env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout,
            cwd=cwd or self.root, stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(command)} exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            )
        return result

    def srun(self, args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return self.run(["srun", *args], **kwargs)  # type: ignore[arg-type]

    def sbatch(self, args: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 30) -> str:
        """Submit a batch job and return its id."""
        result = self.run(["sbatch", "--parsable", *args], env=env, timeout=timeout, check=False)
        job_id = result.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise AssertionError(f"sbatch {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return job_id

    def wait_for_end(self, job_id: str, timeout: float = 120) -> dict[str, str]:
        """Poll until the job ended (quicker than ``sbatch --wait``, which backs off to half a minute)."""
        ended = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
        wait_until(lambda: self.job(job_id).get("JobState") in ended, timeout, f"job {job_id} to end")
        return self.job(job_id)

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a mapping (JobState, Restarts, ...); empty once SLURM forgot the job."""
        result = self.run(["scontrol", "--oneliner", "show", "job", job_id], check=False, timeout=10)
        return dict(re.findall(r"(\w+)=(\S*)", result.stdout)) if result.returncode == 0 else {}


@contextlib.contextmanager
def private_cluster() -> Iterator[SlurmCluster]:
    """Start the private cluster; stop it and remove its directory on exit."""
    require_binaries(SLURM_BINARIES, "scripts/system-deps.sh (apt-get install slurm-wlm munge)")
    root = Path(tempfile.mkdtemp(prefix="core-slurm-"))
    root.chmod(0o755)  # munged wants the socket's directory searchable by everyone
    cluster = SlurmCluster(root)
    try:
        cluster.write_config()
        cluster.start()
    except BaseException:
        logs = cluster.logs()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"the private SLURM cluster did not start:\n{logs}")
    try:
        yield cluster
    finally:
        cluster.stop()
        if os.environ.get("CORE_KEEP_SLURM_DIR"):
            print(f"SLURM test cluster kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def json_reports(output: str) -> list[dict[str, object]]:
    """Every JSON object in a job's merged output: ranks print at once, so two objects can share a line."""
    import json

    decoder = json.JSONDecoder()
    reports = []
    index = output.find('{"')
    while index != -1:
        report, end = decoder.raw_decode(output, index)
        reports.append(report)
        index = output.find('{"', end)
    return reports
