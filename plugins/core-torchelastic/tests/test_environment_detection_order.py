"""Which environment auto-detection picks when the markers of several are present at once.

torchelastic > slurm > lsf > mpi > local, kubeflow never: torchrun may run inside a SLURM or LSF job
(its workers carry the job's variables too), mpirun may run inside one as well, and Kubeflow's variables are
those of any torchrun-style launch.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import core

MARKERS = {
    "torchelastic": {"TORCHELASTIC_RUN_ID": "r", "RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0",
                     "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"},
    "slurm": {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
              "SLURM_NODEID": "0", "SLURM_STEP_ID": "0", "SLURM_NODELIST": "localhost", "SLURM_JOB_NAME": "train"},
    "lsf": {"LSB_JOBID": "5", "JSM_NAMESPACE_SIZE": "1", "JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_LOCAL_RANK": "0",
            "LSB_MCPU_HOSTS": "launch 1 compute 42"},
    "mpi": {"PMI_SIZE": "1", "PMI_RANK": "0"},
}
ORDER = ["torchelastic", "slurm", "lsf", "mpi"]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = dict(os.environ)
    prefixes = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MV2_", "LSB_", "JSM_", "TORCHELASTIC_", "MASTER_")
    for name in list(os.environ):
        if name.startswith(prefixes) or name in ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", str(Path(os.__file__).parent))  # no srun here: no "srun unused" warning
    yield
    os.environ.clear()
    os.environ.update(saved)


def detected() -> str:
    return core.detect_environment()


def test_priorities_encode_the_documented_order() -> None:
    from core_kubeflow import KubeflowEnvironment
    from core_lsf import LSFEnvironment
    from core_mpi import MPIEnvironment
    from core_slurm import SLURMEnvironment
    from core_torchelastic import TorchElasticEnvironment

    (local,) = importlib.metadata.entry_points(group="core.environments", name="local")  # core's built-in
    priorities = [
        TorchElasticEnvironment.priority, SLURMEnvironment.priority, LSFEnvironment.priority,
        MPIEnvironment.priority, core.traits_of(local.load()()).priority,
    ]
    assert priorities == sorted(priorities, reverse=True) and priorities[-1] == -1000
    assert KubeflowEnvironment().environment_detect() is None


@pytest.mark.parametrize("present", range(len(ORDER)))
def test_the_highest_present_environment_wins(monkeypatch: pytest.MonkeyPatch, present: int) -> None:
    # Markers of every environment from `present` on are set at once, plus Kubeflow's (which look like torchrun's).
    for alias in ORDER[present:]:
        for name, value in MARKERS[alias].items():
            monkeypatch.setenv(name, value)
    assert detected() == ORDER[present]


def test_nothing_present_is_local() -> None:
    assert detected() == "local"


def test_kubeflow_is_used_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"MASTER_ADDR": "master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "1", "RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    assert detected() == "local"
    active = core.resolve(accelerator="cpu", strategy="single_device", devices=1, plugins=["kubeflow"])
    assert active.config.environment == "kubeflow"
    assert (active.cluster.main_address, active.cluster.main_port) == ("master-0", 23456)
