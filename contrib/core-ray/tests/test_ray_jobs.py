"""core-ray against a real Ray cluster on 127.0.0.1, started by this module and stopped by its pids.

Every job runs its ranks as Ray actors of that cluster; the same script launched locally by the strategy is the
reference. Every socket of the cluster's processes and of the drivers is watched: none may be bound to, listen
on every interface, or connect to an address outside loopback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from ray_cluster import SCRIPTS, RayCluster, run_driver, running_cluster

from core.testing.sockets import SocketWatch

pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    pytest.importorskip("ray")
    with running_cluster(num_cpus=4) as running:
        yield running


@pytest.fixture
def watch(cluster: RayCluster) -> Iterator[SocketWatch]:
    watching = SocketWatch()
    watching.watch_group(cluster.group)
    watching.start()
    yield watching
    watching.stop()
    assert watching.outside() == [], f"sockets outside 127.0.0.1: {watching.outside()}"


def local_run(arguments: list[str], timeout: float = 150) -> None:
    """The reference: the same script, its ranks launched on this machine by the strategy itself."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    finished = subprocess.run([sys.executable, *arguments], env={**environment, "OMP_NUM_THREADS": "1"},
                              capture_output=True, text=True, timeout=timeout)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]


def trained(out: Path) -> dict[str, Any]:
    return json.loads((out / "result.json").read_text())


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Any]]:
    """What ray_train.py trains to with 2 local ranks, per strategy: run once per strategy for the module (the
    ddp 2x1 and 1x2 layouts share it: 2 nodes x 1 device is the same world of 2 to the math)."""
    results: dict[str, dict[str, Any]] = {}

    def reference(strategy: str) -> dict[str, Any]:
        if strategy not in results:
            local = tmp_path_factory.mktemp(f"local-{strategy}")
            local_run([str(SCRIPTS / "ray_train.py"), str(local), strategy, "2", "local"])
            results[strategy] = trained(local)
        return results[strategy]

    return reference


def ran_in_cluster(cluster: RayCluster, result: dict[str, Any]) -> None:
    """The ranks were processes started by the cluster's raylet, not the driver or its children."""
    assert result["environment"] == "ray_worker"
    assert len(set(result["pids"])) == result["world_size"] and result["driver_pid"] not in result["pids"]
    assert set(result["parents"]) <= set(cluster.pids()), (result["parents"], cluster.pids())


@pytest.mark.parametrize(("strategy", "devices", "num_nodes"), [("ddp", 2, 1), ("fsdp", 2, 1), ("ddp", 1, 2)])
def test_two_actors_train_to_the_weights_of_the_local_launch(
    cluster: RayCluster, watch: SocketWatch, tmp_path: Path, local_reference: Callable[[str], dict[str, Any]],
    strategy: str, devices: int, num_nodes: int,
) -> None:
    on_ray = tmp_path / "ray"
    on_ray.mkdir()
    finished = run_driver(cluster, [str(SCRIPTS / "ray_train.py"), str(on_ray), strategy, str(devices), "ray",
                                    str(num_nodes)], watch)
    assert finished.returncode == 0, finished.output[-6000:]
    result = trained(on_ray)
    assert (result["strategy"], result["world_size"]) == (strategy, 2)
    ran_in_cluster(cluster, result)
    reference = local_reference(strategy)
    assert reference["environment"] == "local"
    assert result["state"] == reference["state"], "the Ray actors trained to other weights than the local launch"


def test_a_trainer_job_on_actors_fits_and_validates_like_the_local_launch(
    cluster: RayCluster, watch: SocketWatch, tmp_path: Path
) -> None:
    import torch

    on_ray, local = tmp_path / "ray", tmp_path / "local"
    on_ray.mkdir()
    local.mkdir()
    finished = run_driver(cluster, [str(SCRIPTS / "ray_trainer.py"), str(on_ray), "ray"], watch)
    assert finished.returncode == 0, finished.output[-6000:]
    local_run([str(SCRIPTS / "ray_trainer.py"), str(local), "local"])
    # The driver's own Module got the weights trained in the actors (the Trainer's result of another process).
    result, reference = torch.load(on_ray / "trainer.pt"), torch.load(local / "trainer.pt")
    assert result["global_step"] == reference["global_step"] == 8
    assert result["validate"] == reference["validate"]
    for name, value in reference["state"].items():
        assert torch.equal(result["state"][name], value), name


def test_an_exception_on_one_rank_fails_the_job_with_its_traceback(
    cluster: RayCluster, watch: SocketWatch, tmp_path: Path
) -> None:
    finished = run_driver(cluster, [str(SCRIPTS / "ray_fail.py"), str(tmp_path), "raise"], watch)
    assert finished.returncode != 0
    assert "RayRankFailedError: core-ray: global rank 1 of 2 (Ray actor pid" in finished.output
    assert "failed: it raised:" in finished.output
    assert 'raise ValueError("rank 1 gave up at step 5")' in finished.output
    assert "ValueError: rank 1 gave up at step 5" in finished.output
    rank0 = json.loads((tmp_path / "rank-0.json").read_text())
    assert not psutil.pid_exists(rank0["pid"]) or psutil.Process(rank0["pid"]).status() == psutil.STATUS_ZOMBIE


def test_a_killed_worker_fails_the_job_fast_with_the_cause(
    cluster: RayCluster, watch: SocketWatch, tmp_path: Path
) -> None:
    process = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "ray_fail.py"), str(tmp_path), "kill"], env=cluster.job_environment(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    watch.watch_group(process.pid)
    try:
        victim = _wait_for_step(tmp_path / "rank-1.json", 20, process)
        os.kill(victim["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        output, _ = process.communicate(timeout=120)
        seconds = time.monotonic() - killed_at
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    print(f"the driver ended {seconds:.2f} s after rank 1's actor was killed")
    assert process.returncode != 0
    assert f"global rank 1 of 2 (Ray actor pid {victim['pid']} on 127.0.0.1) failed: its actor died" in output
    assert "The actor died unexpectedly" in output  # Ray's own account of the death
    # Fast: rank 0 was stopped long before the end of its 200 000 steps, and its actor is gone.
    survivor = json.loads((tmp_path / "rank-0.json").read_text())
    assert survivor["step"] < 200_000 // 10
    assert not psutil.pid_exists(survivor["pid"]) or psutil.Process(survivor["pid"]).status() == psutil.STATUS_ZOMBIE


def test_resources_the_cluster_cannot_grant_are_named(cluster: RayCluster, watch: SocketWatch, tmp_path: Path) -> None:
    script = tmp_path / "too_big.py"
    script.write_text(
        "from core import Lite\n"
        "from core_ray import RayLauncher\n"
        "launcher = RayLauncher(num_cpus_per_worker=3, placement_timeout=2)\n"
        "Lite(accelerator='cpu', strategy='ddp', devices=2, plugins=[launcher]).launch(print)\n"
    )
    finished = run_driver(cluster, [str(script)], watch)
    assert finished.returncode != 0
    assert "ConfigurationError: plugins=['ray'] asked the Ray cluster for 1 node(s) with {'CPU': 6.0} each" in (
        finished.output
    )
    assert "The cluster has" in finished.output and "'CPU': 4.0" in finished.output
    assert "Lower devices / num_nodes / RayLauncher(num_cpus_per_worker=...)" in finished.output


def _wait_for_step(record: Path, step: int, process: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the job ended before rank 1 reached step {step}:\n{process.communicate()[0]}")
        try:
            found: dict[str, Any] = json.loads(record.read_text())
        except (OSError, ValueError):
            found = {"step": -1}
        if found["step"] >= step:
            return found
        time.sleep(0.05)
    raise AssertionError(f"rank 1 did not reach step {step} within {timeout} s")
