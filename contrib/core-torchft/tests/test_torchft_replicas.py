"""torchft_ddp with real replica groups on 127.0.0.1: one of three is SIGKILLed mid-training (inside a step, while
the others wait for its gradients in the allreduce), the other two keep stepping in the same processes, a new
group joins, receives the state and ends with the same weights and optimizer state as the others.

Each group is ``scripts/torchft_train.py`` in its own process (REPLICA_GROUP_ID 0 to 2 of NUM_REPLICA_GROUPS 3;
the group that joins takes the dead group's number, as a scheduler restarting it would). The groups start from
different random weights, so the first quorum must sync them too. Rates and times are printed (``-s``), never
asserted.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from torchft_harness import HEARTBEAT_TIMEOUT_MS, Group, lighthouse

from core.testing.sockets import SocketWatch

pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.timeout(240)]

AFTER_KILL = 100
"""Steps the survivors commit without the killed group before a new one starts."""
HOLD_AT = 30
"""The earliest step in whose backward pass the group to be killed stops (the first from it after all three groups
committed two steps together: the first quorums may form without a group that started late)."""


def wait_for_file(path: Path, group: Group, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert group.process.poll() is None, f"the group exited ({group.process.returncode}):\n{group.output()}"
        assert time.monotonic() < deadline, f"no {path.name} within {timeout} s:\n{group.output()}"
        time.sleep(0.02)


def rate(timeline: list[list[float]], start: float, end: float) -> float:
    """Committed steps per second between two wall-clock times."""
    inside = [(moment, step) for moment, step, _ in timeline if start <= moment <= end]
    if len(inside) < 2:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def finish(tmp_path: Path, groups: list[Group], extra_steps: int = 50) -> None:
    """Stop every group at a step none has reached yet (they step in one quorum) and wait for clean exits."""
    (tmp_path / "stop-at").write_text(str(max(group.step() for group in groups) + extra_steps))
    for group in groups:
        group.process.wait(timeout=120)
        assert group.process.returncode == 0, group.output()


# "one-late": group 1 starts 3 s after the others, so the first quorums are groups 0 and 2 alone and group 1 joins
# by receiving their state; the group to be killed must still wait until all three have stepped together.
@pytest.mark.parametrize("late", [0.0, 3.0], ids=["together", "one-late"])
def test_a_killed_group_leaves_the_others_stepping_and_a_new_group_catches_up(tmp_path: Path, late: float) -> None:
    pytest.importorskip("torchft")
    watch = SocketWatch(new_descendants=True)
    started: list[Group] = []
    with watch, lighthouse(watch, min_replicas=2) as address:
        try:
            started.append(Group(tmp_path, 0, address, 3, watch))
            started.append(Group(tmp_path, 2, address, 3, watch, "--hold-in-backward-at", str(HOLD_AT)))
            time.sleep(late)
            started.insert(1, Group(tmp_path, 1, address, 3, watch))
            survivors, victim = started[:2], started[2]
            # Killed in the middle of a step: inside its backward pass, while the others wait in the allreduce.
            wait_for_file(tmp_path / "holding-2", victim)
            os.kill(victim.process.pid, signal.SIGKILL)
            killed_at = time.time()
            step_at_kill = int((tmp_path / "holding-2").read_text())  # where all three stand: two wait in the allreduce
            assert step_at_kill >= HOLD_AT, step_at_kill
            for group in survivors:
                group.wait_for_step(step_at_kill + AFTER_KILL)  # two of them now, in the same processes
            joiner = Group(tmp_path, 2, address, 3, watch)
            started.append(joiner)
            joiner.wait_for_step(0, participants=3)
            finish(tmp_path, [*survivors, joiner])
        finally:
            for group in started:
                group.stop()
        watch.poll()

    records = [group.record() for group in [*survivors, joiner]]
    assert all(record is not None and record["done"] for record in records)
    first, second, last = (record or {} for record in records)

    # No restart: each survivor is the process it was, its step count never reset, through the kill and the join;
    # the step the kill broke (its allreduce lost a peer) was dropped, not applied, and the run went on.
    for group, record in zip(survivors, (first, second), strict=True):
        assert record["pid"] == group.process.pid
        assert any(size == 3 for moment, _, size in record["timeline"] if moment < killed_at)
        assert "should_commit completed should_commit=false" in group.log.read_text(), "no step failed at the kill"
        steps = [step for _, step, _ in record["timeline"]]
        assert steps == sorted(steps) and steps[-1] == record["step"], "a survivor's step went back"
        after_kill = [(step, size) for moment, step, size in record["timeline"] if moment > killed_at]
        assert sum(1 for _, size in after_kill if size == 2) >= AFTER_KILL // 2, "the survivors did not go on as two"
        assert max(step for step, _ in after_kill) >= step_at_kill + AFTER_KILL

    # The new group received the state of the survivors' step and then stepped with them, to the same weights.
    joined = last["timeline"]
    assert joined[0][1] >= step_at_kill + AFTER_KILL, f"the new group started at step {joined[0][1]}"
    assert any(size == 3 for _, _, size in joined)
    assert first["step"] == second["step"] == last["step"]
    for other in (second, last):
        assert other["weights"] == first["weights"], "the groups ended with different weights"
        assert other["momentum"] == first["momentum"], "the groups ended with different optimizer state"

    assert {record["gloo_interface"] for record in (first, second, last)} == {"lo"}
    assert watch.outside() == [], f"sockets outside 127.0.0.1: {watch.outside()}"
    report(first["timeline"], killed_at, joiner.started, last["ready"], joined[0])


def report(
    timeline: list[list[float]], killed_at: float, joiner_started: float, joiner_ready: float, joined: list[float]
) -> None:
    """Steps per second of group 0 before and after the kill, how long it waited, how long the joiner took."""
    before = [moment for moment, _, _ in timeline if moment <= killed_at]
    after = [moment for moment, _, size in timeline if moment > killed_at and size == 2]
    print(
        f"\ngroup 0: {rate(timeline, killed_at - 2.0, killed_at):.1f} steps/s with 3 groups in the 2 s before the "
        f"kill, {rate(timeline, after[0], after[0] + 2.0):.1f} steps/s with 2 groups in the 2 s after it resumed; "
        f"paused {after[0] - before[-1]:.2f} s (lighthouse heartbeat timeout {HEARTBEAT_TIMEOUT_MS} ms)\n"
        f"new group: process start to set up {joiner_ready - joiner_started:.2f} s, then "
        f"{joined[0] - joiner_ready:.2f} s to its first committed step {int(joined[1])} "
        f"(quorum, the others' state received, one step); "
        f"{rate(timeline, joined[0], joined[0] + 2.0):.1f} steps/s for group 0 with 3 groups again"
    )


def test_two_groups_train_like_one_process_on_the_whole_batch(tmp_path: Path) -> None:
    """Two groups x 16 rows from the first step to the last: the same weights as 1 process x 32 rows (plain torch),
    and bit-identical weights and optimizer state across the groups."""
    pytest.importorskip("torchft")
    watch = SocketWatch(new_descendants=True)
    with watch, lighthouse(watch, min_replicas=2) as address:  # the first quorum waits for both groups
        groups = [Group(tmp_path, number, address, 2, watch, "--same-start") for number in (0, 1)]
        try:
            (tmp_path / "stop-at").write_text("60")
            for group in groups:
                group.process.wait(timeout=120)
                assert group.process.returncode == 0, group.output()
        finally:
            for group in groups:
                group.stop()
        watch.poll()
    records: list[dict[str, Any]] = [group.record() or {} for group in groups]
    assert [record["step"] for record in records] == [60, 60]
    assert records[0]["weights"] == records[1]["weights"]
    assert records[0]["momentum"] == records[1]["momentum"]
    assert all(size == 2 for record in records for _, _, size in record["timeline"])
    for name, expected in records[0]["reference"].items():
        worst = max(abs(a - e) for a, e in zip(records[0]["weights"][name], expected, strict=True))
        assert worst <= 1e-6, f"2 groups x 16 rows differ from 1 process x 32 rows in {name!r} by {worst:.3g}"
    assert watch.outside() == [], f"sockets outside 127.0.0.1: {watch.outside()}"
