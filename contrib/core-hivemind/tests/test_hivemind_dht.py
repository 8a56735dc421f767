"""The DHT child skips a request it cannot unpickle because its sender exited; hivemind's own DHT dies of it.

What happened in busy test sessions (see core_hivemind/_dht.py): an averager process sent the DHT a request
carrying a handle and exited before the DHT child fetched it; the fetch ended in ``EOFError``, which killed the
DHT child. The race needs load to show, so the request here raises that ``EOFError`` itself when unpickled: the
same point of failure, every time.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

hivemind = pytest.importorskip("hivemind", reason="the DHT is hivemind's")

from core_hivemind import LOOPBACK_MADDRS, RobustDHT  # noqa: E402
from hivemind.utils import get_dht_time  # noqa: E402
from hivemind_harness import assert_loopback_only  # noqa: E402

from core.testing.sockets import SocketWatch  # noqa: E402


def _fetch_fails() -> None:
    raise EOFError("simulated: the sender's resource_sharer listener closed the connection")


class _HandleOfAnExitedProcess:
    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _fetch_fails, ()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("dht_class", "survives"), [(hivemind.DHT, False), (RobustDHT, True)])
def test_a_request_whose_handle_cannot_be_fetched_is_dropped_and_the_dht_goes_on(
    dht_class: type, survives: bool
) -> None:
    with SocketWatch() as watch:
        watch.watch(os.getpid())
        dht = dht_class(start=True, host_maddrs=list(LOOPBACK_MADDRS), nat_port_map=False, auto_nat=False,
                        use_relay=False)
        try:
            watch.poll()  # the DHT's sockets (and p2pd's) while they surely exist
            dht._outer_pipe.send(_HandleOfAnExitedProcess())
            dht.join(timeout=5)  # hivemind's DHT child dies at once; ours keeps serving
            assert dht.is_alive() is survives
            if survives:
                assert dht.store("after", "the bad request", get_dht_time() + 60)
                found = dht.get("after", latest=True)
                assert found is not None and found.value == "the bad request"
        finally:
            if dht.is_alive():
                dht.shutdown()
    assert_loopback_only(watch)
