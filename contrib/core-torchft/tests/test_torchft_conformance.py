"""core's strategy kit on ``torchft_ddp``: one replica group (one process) against a lighthouse on 127.0.0.1.

The kit's job is one process because the strategy says ``max_processes = 1``: a replica group here is one
process, and groups are started independently (by a scheduler, or by the test in test_torchft_replicas.py),
never by the strategy's own launcher. So in this job the collectives act on one process (they are ``Lite``'s
collectives inside a group), ``barrier`` is skipped by the kit, and the equivalence check trains through
torchft's ``Manager``, ``Optimizer`` and DDP wrapper with a quorum of one group against a plain 1-process
reference (it proves the wrappers and the commit protocol leave the arithmetic alone). Equivalence across
groups (2 groups x 16 rows = 1 process x 32 rows) and identical weights across groups are checked in
test_torchft_replicas.py. The checkpoint round trip and the clean end apply as written.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from torchft_harness import lighthouse

from core.testing import StrategyConformance
from core.testing.sockets import SocketWatch

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.fixture(scope="module")
def watch() -> Iterator[SocketWatch]:
    """A lighthouse on 127.0.0.1 that the kit's job finds through TORCHFT_LIGHTHOUSE, and a watch on sockets."""
    pytest.importorskip("torchft")
    with (SocketWatch(new_descendants=True) as watching, lighthouse(watching) as address,
          pytest.MonkeyPatch.context() as patch):
        patch.setenv("TORCHFT_LIGHTHOUSE", address)
        patch.setenv("CORE_TORCHFT_HOST", "127.0.0.1")
        patch.delenv("GLOO_SOCKET_IFNAME", raising=False)  # the strategy picks the loopback interface itself
        yield watching


class TestTorchFTStrategy(StrategyConformance):
    alias = "torchft_ddp"

    @pytest.fixture(autouse=True)
    def _lighthouse(self, watch: SocketWatch) -> SocketWatch:
        return watch

    def test_the_job_ran_one_group_with_sockets_on_loopback(self, job: Any, watch: SocketWatch) -> None:
        assert job.world_size == 1 and job.returncode == 0, job.describe()
        # torchft's manager logs each quorum and commit: the steps went through it, advertised on loopback.
        assert "should_commit completed should_commit=true" in job.stderr, job.describe()
        assert 'address: "http://127.0.0.1:' in job.stderr, job.describe()
        watch.poll()
        assert watch.outside() == [], f"sockets outside 127.0.0.1: {watch.outside()}"
