"""core.testing.sockets: the socket watch the loopback-only tests of Ray, torchft and hivemind share. Real child
processes open real sockets; only a UDP socket is "connected" to the documentation address 192.0.2.53, which
sends no packet."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core import CoreError
from core.testing.sockets import SocketWatch, is_outside_loopback, nameservers

RESOLVER = "192.0.2.53"  # TEST-NET-1: never routed; given to the watch as the resolver instead of resolv.conf's

# Opens the sockets named on its command line, prints "ready" and waits to be killed.
OPENER = """
import socket, sys, time
kept = []
for what in sys.argv[1:]:
    if what == "any":
        s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen()
    elif what == "loopback":
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
    elif what == "udp-any":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 0))
    else:  # "dns:<address>": what libc's resolver opens; connecting a UDP socket sends nothing
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((what[4:], 53))
    kept.append(s)
print("ready", flush=True)
time.sleep(120)
"""


@contextmanager
def opener(*sockets: str, new_session: bool = False) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen([sys.executable, "-c", OPENER, *sockets], stdout=subprocess.PIPE, text=True,
                             start_new_session=new_session)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        yield child
    finally:
        child.kill()
        child.wait()


@pytest.mark.timeout(60)
def test_every_interface_is_outside_loopback_and_the_resolver_lookup_is_kept_apart() -> None:
    with SocketWatch(resolvers=frozenset({RESOLVER})) as watch, opener("any", "loopback", "udp-any",
                                                                        f"dns:{RESOLVER}") as child:
        watch.watch(child.pid)
        watch.poll()
    outside = watch.outside()
    assert sorted((entry.kind, entry.status, entry.local) for entry in outside) == [
        ("tcp", "LISTEN", "0.0.0.0"), ("udp", "NONE", "0.0.0.0")], outside
    assert all(entry.pid == child.pid for entry in outside)
    assert [(entry.kind, entry.remote, entry.remote_port) for entry in watch.resolver_lookups] == [
        ("udp", RESOLVER, 53)]
    assert {(entry.status, entry.local) for entry in watch.sockets} >= {("LISTEN", "127.0.0.1")}
    assert "python" in " ".join(watch.process_names())


@pytest.mark.timeout(60)
def test_without_the_resolver_exception_a_udp_socket_to_port_53_is_outside() -> None:
    with SocketWatch(resolvers=frozenset()) as watch, opener(f"dns:{RESOLVER}") as child:
        watch.watch(child.pid)
        watch.poll()
    assert [(entry.kind, entry.remote) for entry in watch.outside()] == [("udp", RESOLVER)]
    assert watch.resolver_lookups == set()


@pytest.mark.timeout(60)
def test_a_group_is_watched_after_its_leader_exits(tmp_path: Path) -> None:
    # The leader starts a listener in its own group, then exits: the listener is re-parented, still in the group.
    leader = ("import subprocess, sys\n"
              "child = subprocess.Popen([sys.executable, '-c', sys.argv[1], 'any'], stdout=open(sys.argv[2], 'w'),\n"
              "                         stderr=subprocess.DEVNULL)\n"
              "print(child.pid)\n")
    with SocketWatch() as by_group:
        started = subprocess.run([sys.executable, "-c", leader, OPENER, str(tmp_path / "out")], text=True,
                                 capture_output=True, check=True, start_new_session=True, timeout=30)
        orphan = int(started.stdout)
        try:
            by_group.watch_group(os.getpgid(orphan))
            deadline = time.monotonic() + 30  # a busy machine starts Python slowly
            while (tmp_path / "out").read_text() != "ready\n" and time.monotonic() < deadline:
                time.sleep(0.1)
            assert (tmp_path / "out").read_text() == "ready\n", "the orphaned listener did not start in 30 s"
            by_group.poll()
        finally:
            os.kill(orphan, 9)
    assert [entry.pid for entry in by_group.outside()] == [orphan]


@pytest.mark.timeout(60)
def test_new_descendants_are_watched_when_asked_and_older_ones_are_not() -> None:
    with opener("any") as older, SocketWatch(new_descendants=True) as watch, opener("any") as newer:
        watch.poll()
    assert [entry.pid for entry in watch.outside()] == [newer.pid]  # older was there before the watch
    assert older.pid not in watch.processes


@pytest.mark.timeout(60)
def test_alive_lists_what_still_runs_and_forgets_what_exited() -> None:
    with SocketWatch() as watch, opener("loopback") as child:
        watch.watch(child.pid)
        watch.poll()
        assert [process.pid for process in watch.alive()] == [child.pid]
    assert watch.alive(grace=5) == []


def test_the_addresses_and_the_resolv_conf_parser(tmp_path: Path) -> None:
    assert not is_outside_loopback("") and not is_outside_loopback("127.0.0.1") and not is_outside_loopback("::1")
    assert not is_outside_loopback("::ffff:127.0.0.1")
    assert is_outside_loopback("10.1.2.3") and is_outside_loopback("::ffff:10.1.2.3")
    assert not is_outside_loopback("0.0.0.0") and is_outside_loopback("0.0.0.0", local=True)
    assert is_outside_loopback("::", local=True)
    conf = tmp_path / "resolv.conf"
    conf.write_text("# generated\nnameserver 10.255.255.53\nnameserver   ::1\nnameserver\nsearch example\n"
                    "options ndots:1\n")
    assert nameservers(conf) == frozenset({"10.255.255.53", "::1"})
    assert nameservers(tmp_path / "missing") == frozenset()


def test_misuse_is_a_core_error() -> None:
    with pytest.raises(CoreError, match=r"SocketWatch\(interval=0\): expected a number of seconds > 0"):
        SocketWatch(interval=0)
    watch = SocketWatch().start()
    try:
        with pytest.raises(CoreError, match="already started; make a new SocketWatch per job"):
            watch.start()
    finally:
        watch.stop()


def test_without_psutil_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil now raises ImportError
    with pytest.raises(CoreError, match=r"psutil, which is not installed .*pip install psutil") as raised:
        SocketWatch()
    assert f"the environment at {sys.prefix}:" in str(raised.value)
