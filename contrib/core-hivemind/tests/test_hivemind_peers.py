"""Three real hivemind peers on 127.0.0.1: averaging, a late joiner, a peer killed mid-training.

Every test also checks, from the sockets of the peers and of everything they started (p2pd), that nothing
listened on or connected to an address outside loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hivemind_harness import SCRIPTS, Collaboration, assert_loopback_only, kill_all

from core.testing.sockets import SocketWatch

# serial: the peers share work only when they hear each other's progress (through the DHT) and meet in
# hivemind's matchmaking windows in time; under two busy pytest workers on 2 cores three peers trained alone.
pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.serial, pytest.mark.timeout(180)]

PEERS = ("a", "b", "c")

AVERAGED_TOLERANCE = 1e-6
"""How far apart two peers' averaged weights may be. hivemind's all-reduce returns each peer the difference between
the average and its own part, which the peer adds to its own tensor (``tensor.add_(delta)``), so the peers' float32
results can differ in the last bit (a stress run saw 1 ULP, 9e-10 on a weight of 0.0128). A peer left out of a
round, or one that stepped alone, ends 1e-3 or more away."""


def largest_difference(one: dict[str, list[float]], other: dict[str, list[float]]) -> float:
    assert one.keys() == other.keys()
    return max(abs(x - y) for name in one for x, y in zip(one[name], other[name], strict=True))


@pytest.fixture
def collaboration(tmp_path: Path) -> Iterator[Collaboration]:
    with SocketWatch() as watch:
        peers = Collaboration(tmp_path, watch)
        try:
            yield peers
        finally:
            peers.stop()


def test_three_peers_started_together_average_to_the_same_weights(collaboration: Collaboration) -> None:
    # delay_state_averaging=False (the strategy's default) and a start barrier: every averaging round has all 3.
    # A peer learns the others' samples from the DHT, which hivemind's progress tracker reads at most every 0.5 s:
    # steps of a few milliseconds (this model) each reached the 24 samples alone before the others' reports
    # arrived (30 steps in a CI run on an idle machine), so each step here lasts 1 s, as a real step would.
    # hivemind leaves out of a round a peer whose next all-reduce chunk takes longer than next_chunk_timeout
    # (default: matchmaking_time, 3 s here; the reducers get twice that), and the round then averages what came
    # ("Averaging: received 11.3% results"): on a loaded 2-core machine, with three peers and their p2p daemons,
    # a chunk took longer once (a second `make test`, each test about 1.5x its usual time) and peer b ended with
    # other weights than a. The window to find each other stays 3 s; a chunk of a round already formed may take 10 s
    # (averaging_timeout, 15 s, still bounds the whole round).
    for name in PEERS:
        collaboration.start(name, barrier=list(PEERS), matchmaking_time=3.0, averager_opts={"target_group_size": 3},
                            step_seconds=1.0, next_chunk_timeout=10.0)
    results = {name: collaboration.finish(name) for name in PEERS}
    assert {result["epoch"] for result in results.values()} == {3}
    assert results["a"]["initial"] == results["b"]["initial"] == results["c"]["initial"]
    assert results["a"]["parameters"] != results["a"]["initial"]
    for name in ("b", "c"):
        difference = largest_difference(results[name]["parameters"], results["a"]["parameters"])
        assert difference <= AVERAGED_TOLERANCE, f"peer {name}'s weights differ from a's by up to {difference:.1e}"
    # 3 epochs of 24 samples at 8 per step: 9 steps in all when the peers share the work, 27 if each went alone.
    assert sum(result["steps"] for result in results.values()) < 27
    assert_loopback_only(collaboration.watch)
    assert collaboration.watch.alive(grace=15) == [], "the peers left processes behind (p2pd not stopped by teardown)"


def test_a_peer_that_joins_late_downloads_the_state_of_the_running_ones(collaboration: Collaboration) -> None:
    for name in ("a", "b"):  # they train 2 epochs, then keep serving their state until released
        collaboration.start(name, barrier=["a", "b"], epochs=2, hold=True, target_batch_size=16,
                            averager_opts={"target_group_size": 2})
    trained = {name: collaboration.read(f"result-{name}.json") for name in ("a", "b")}
    assert largest_difference(trained["a"]["parameters"], trained["b"]["parameters"]) <= AVERAGED_TOLERANCE
    # The joiner starts from other weights (another seed) and trains nothing itself (epochs=0).
    collaboration.start("late", init_seed=1, epochs=0, target_batch_size=16)
    late = collaboration.finish("late")
    assert late["initial"] != trained["a"]["initial"]
    assert late["joined"]["epoch"] == trained["a"]["epoch"] == 2
    # A download, not an average: exactly the weights of the peer it came from.
    assert late["joined"]["parameters"] in (trained["a"]["parameters"], trained["b"]["parameters"])
    (collaboration.out / "release").touch()
    for name in ("a", "b"):
        collaboration.finish(name)
    assert_loopback_only(collaboration.watch)
    assert collaboration.watch.alive(grace=15) == [], "the peers left processes behind (p2pd not stopped by teardown)"


def test_a_peer_killed_mid_training_leaves_the_others_training(collaboration: Collaboration) -> None:
    for name in PEERS:
        collaboration.start(name, barrier=list(PEERS), epochs=5, averaging_timeout=5.0)
    collaboration.wait_for_epoch("c", 2)
    collaboration.watch.poll()  # the sockets of c and its p2pd, before they go
    collaboration.kill("c")
    at_kill = {name: collaboration.read(f"progress-{name}.json") for name in ("a", "b")}
    survivors = {name: collaboration.finish(name) for name in ("a", "b")}
    for name, result in survivors.items():
        assert result["epoch"] == 5 > at_kill[name]["epoch"], f"peer {name} stopped at epoch {result['epoch']}"
        assert result["steps"] > at_kill[name]["steps"]
    assert collaboration.peers["c"].process.returncode == -9
    assert_loopback_only(collaboration.watch)
    assert collaboration.watch.alive(grace=15) == [], "the peers left processes behind (p2pd not stopped by teardown)"


def test_an_optimizer_hivemind_recreates_keeps_training_and_steps_the_scheduler_per_epoch(tmp_path: Path) -> None:
    # offload_optimizer=True: hivemind builds the optimizer from its class and param groups, and the scheduler
    # from scheduler_fn; StepLR(gamma=0.5) must halve the rate once per hivemind epoch (2 steps of 8 of 16).
    out = tmp_path / "lone.json"
    with SocketWatch() as watch:
        process = subprocess.Popen([sys.executable, str(SCRIPTS / "lone.py"), str(out)], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        watch.watch(process.pid)
        try:
            output = process.communicate(timeout=120)[0].decode(errors="replace")
            left = watch.alive(grace=15)
        finally:
            kill_all(watch.alive())  # only on failure: a hang, or processes the peer left behind
    assert process.returncode == 0, output[-4000:]
    assert left == [], "the peer left processes behind (p2pd not stopped by teardown)"
    result = json.loads(out.read_text())
    assert result["moved"] and result["steps"] == 6
    assert result["rates"] == [[0, 0.1], [1, 0.05], [1, 0.05], [2, 0.025], [2, 0.025], [3, 0.0125]]
    assert_loopback_only(watch)
