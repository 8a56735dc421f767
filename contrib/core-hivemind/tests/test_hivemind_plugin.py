"""core-hivemind without peers: listing, --check, options, the configuration errors users see."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from core_hivemind import INITIAL_PEERS_ENV, LOOPBACK_MADDRS, HivemindStrategy, peers_from_environment

import core


def test_listing_shows_the_strategy_without_importing_torch_or_hivemind() -> None:
    code = ("import sys; from core.plugins import main; main([]); "
            "print('imported:', sorted(m for m in ('torch', 'hivemind', 'core_hivemind') if m in sys.modules))")
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    rows = [line.split() for line in finished.stdout.splitlines() if "core-hivemind" in line]
    assert [row[:2] for row in rows] == [["strategy", "hivemind"]]
    assert "imported: []" in finished.stdout


def test_check_says_why_hivemind_is_unusable_when_it_is_missing_and_how_to_install_it() -> None:
    # The reason in full from --json: the table shortens long reasons below it (--check keeps 100 columns).
    code = "import sys; sys.modules['hivemind'] = None; from core.plugins import main; main(['--check', '--json'])"
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    rows = json.loads(finished.stdout)["plugins"]
    row = next(row for row in rows if (row["kind"], row["alias"]) == ("strategy", "hivemind"))
    assert row["check"] == "unavailable"
    assert "hivemind is not importable" in row["check_reason"]
    assert "install it: pip install 'hivemind>=1.1.12'" in row["check_reason"]


def test_check_says_usable_when_hivemind_is_installed() -> None:
    finished = subprocess.run([sys.executable, "-m", "core.plugins", "--check"], capture_output=True, text=True,
                              timeout=120)
    line = next(line for line in finished.stdout.splitlines() if line.startswith("strategy") and "hivemind" in line)
    assert "usable" in line and "unavailable" not in line


def test_network_defaults_stay_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INITIAL_PEERS_ENV, raising=False)
    strategy = HivemindStrategy(target_batch_size=64, batch_size=8)
    assert strategy.host_maddrs == list(LOOPBACK_MADDRS) == ["/ip4/127.0.0.1/tcp/0"]
    assert strategy.dht_options == {"nat_port_map": False, "auto_nat": False, "use_relay": False}
    assert strategy.initial_peers is None
    assert strategy.optimizer_options["delay_state_averaging"] is False


def test_initial_peers_come_from_the_argument_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = "/ip4/127.0.0.1/tcp/1/p2p/QmA", "/ip4/127.0.0.1/tcp/2/p2p/QmB"
    monkeypatch.setenv(INITIAL_PEERS_ENV, f"{first}, {second},")
    assert peers_from_environment() == [first, second]
    assert HivemindStrategy(target_batch_size=8).initial_peers == [first, second]
    assert HivemindStrategy(target_batch_size=8, initial_peers=second).initial_peers == [second]
    assert peers_from_environment({INITIAL_PEERS_ENV: " "}) is None


def test_options_are_checked_with_the_value_and_the_fix() -> None:
    with pytest.raises(core.ConfigurationError, match=r"target_batch_size=0\) must be a number > 0"):
        HivemindStrategy(target_batch_size=0)
    with pytest.raises(core.ConfigurationError, match=r"matchmaking_time=-1\) must be a number > 0"):
        HivemindStrategy(target_batch_size=8, matchmaking_time=-1)
    with pytest.raises(core.ConfigurationError, match=r"run_id=''\) must be a non-empty string"):
        HivemindStrategy(target_batch_size=8, run_id="")
    with pytest.raises(core.ConfigurationError, match=r"delay_grad_averaging=True\) needs delay_optimizer_step"):
        HivemindStrategy(target_batch_size=8, delay_grad_averaging=True)
    with pytest.raises(core.ConfigurationError, match="does not support the checkpoint_io 'distributed'"):
        core.resolve(accelerator="cpu", strategy="hivemind", plugins=["distributed"])


def test_a_run_without_the_batch_sizes_names_both_and_how_to_pass_them() -> None:
    lite = core.Lite(accelerator="cpu", strategy="hivemind")
    with pytest.raises(core.ConfigurationError) as raised:
        lite.launch(lambda lite: None)
    message = str(raised.value)
    assert "HivemindStrategy(target_batch_size=None, batch_size=None)" in message
    assert "strategy=HivemindStrategy(target_batch_size=<samples per collaborative step>" in message


def test_more_than_one_process_per_peer_is_refused() -> None:
    # A peer is one process; more peers are more runs of the script (with PL_INITIAL_PEERS), not devices=2.
    with pytest.raises(core.ConfigurationError, match="The strategy 'hivemind' runs at most 1 process"):
        core.resolve(accelerator="cpu", strategy="hivemind", devices=2)
