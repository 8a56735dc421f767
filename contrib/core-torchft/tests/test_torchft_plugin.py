"""core-torchft without replica groups: listing, --check, options, the lighthouse command, a missing lighthouse."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from core_torchft import INSTALL, TorchFTStrategy
from core_torchft.lighthouse import advertised
from torchft_harness import SCRIPTS, group_environment, lighthouse

import core
from core.testing.sockets import SocketWatch


def test_listing_shows_the_strategy_without_importing_torch_or_torchft() -> None:
    code = ("import sys; from core.plugins import main; main([]); "
            "print('imported:', sorted(m for m in ('torch', 'torchft', 'core_torchft') if m in sys.modules))")
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    rows = [line.split()[:3] for line in finished.stdout.splitlines() if "core-torchft" in line]
    assert rows == [["strategy", "torchft_ddp", "core-torchft"]]
    assert "imported: []" in finished.stdout


def test_check_says_why_torchft_is_unusable_when_it_is_missing_and_how_to_install_it() -> None:
    # The reason in full from --json: the table shortens long reasons below it (--check keeps 100 columns).
    code = "import sys; sys.modules['torchft'] = None; from core.plugins import main; main(['--check', '--json'])"
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    rows = json.loads(finished.stdout)["plugins"]
    row = next(row for row in rows if (row["kind"], row["alias"]) == ("strategy", "torchft_ddp"))
    assert row["check"] == "unavailable"
    assert "torchft is not importable" in row["check_reason"]
    assert f"install it: {INSTALL}" in row["check_reason"] and INSTALL == "pip install 'torchft>=0.2'"


def test_a_run_with_torchft_missing_fails_naming_the_fix() -> None:
    code = ("import sys; sys.modules['torchft'] = None\n"
            "from core import Lite\n"
            "Lite(accelerator='cpu', strategy='torchft_ddp', devices=1).launch(print)\n")
    environment = group_environment("http://127.0.0.1:1", 1)
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env=environment)
    assert finished.returncode != 0
    assert "PluginUnavailableError: strategy='torchft_ddp' cannot run: torchft is not importable" in finished.stderr
    assert INSTALL in finished.stderr


def test_a_run_without_a_lighthouse_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHFT_LIGHTHOUSE", raising=False)
    lite = core.Lite(accelerator="cpu", strategy="torchft_ddp", devices=1)
    with pytest.raises(core.ConfigurationError, match=re.escape("python -m core_torchft.lighthouse --min-replicas 1")):
        lite.launch(print)


def test_options_and_replica_groups_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(core.ConfigurationError, match=r"TorchFTStrategy\(timeout=0\) must be a positive duration"):
        TorchFTStrategy(timeout=0)
    with pytest.raises(core.ConfigurationError, match=r"^TorchFTStrategy\(min_replica_size=0\): expected a whole num"):
        TorchFTStrategy(min_replica_size=0)
    with pytest.raises(core.ConfigurationError, match=r"TorchFTStrategy\(init_sync='no'\): expected True or False"):
        TorchFTStrategy(init_sync="no")  # type: ignore[arg-type]
    with pytest.raises(core.ConfigurationError, match="replica group 2 is outside num_replica_groups=2"):
        TorchFTStrategy(replica_group=2, num_replica_groups=2).groups()
    monkeypatch.setenv("REPLICA_GROUP_ID", "one")
    refusal = (r"^The torchft variable REPLICA_GROUP_ID='one' is not a whole number; set it to a whole number, or "
               r"pass TorchFTStrategy\(replica_group=\.\.\.\)\.$")
    with pytest.raises(core.ConfigurationError, match=refusal):
        TorchFTStrategy().group()
    with pytest.raises(core.ConfigurationError, match="does not support the checkpoint_io 'distributed'"):
        core.resolve(accelerator="cpu", strategy="torchft_ddp", plugins=["distributed"])
    with pytest.raises(core.ConfigurationError, match="no manager yet"):
        _ = TorchFTStrategy().manager


def test_the_data_is_split_by_replica_group(monkeypatch: pytest.MonkeyPatch) -> None:
    assert TorchFTStrategy(replica_group=1, num_replica_groups=3).strategy_distributed_sampler_kwargs() == {
        "num_replicas": 3, "rank": 1,
    }
    monkeypatch.setenv("REPLICA_GROUP_ID", "2")
    monkeypatch.setenv("NUM_REPLICA_GROUPS", "4")
    assert TorchFTStrategy().strategy_distributed_sampler_kwargs() == {"num_replicas": 4, "rank": 2}
    assert TorchFTStrategy(replica_group=0, num_replica_groups=1).strategy_distributed_sampler_kwargs() is None


def test_the_strategy_pickles_without_its_run() -> None:
    strategy = TorchFTStrategy(lighthouse="http://127.0.0.1:1", host="127.0.0.1", timeout=3)
    strategy._manager = object()
    copy = pickle.loads(pickle.dumps(strategy))
    assert (copy.lighthouse, copy.host, copy.timeout.total_seconds(), copy._manager) == (
        "http://127.0.0.1:1", "127.0.0.1", 3.0, None,
    )


def test_the_lighthouse_advertises_the_address_it_is_bound_to() -> None:
    assert advertised("127.0.0.1:0", "http://vm:41481") == "http://127.0.0.1:41481"
    assert advertised("[::1]:0", "http://vm:41481/") == "http://[::1]:41481"
    assert advertised("[::]:29510", "http://vm:29510").endswith(":29510")  # every interface: the host name


def test_the_lighthouse_command_refuses_a_quorum_of_nobody() -> None:
    finished = subprocess.run([sys.executable, "-m", "core_torchft.lighthouse", "--bind", "127.0.0.1:0",
                               "--min-replicas", "0"], capture_output=True, text=True, timeout=60)
    assert finished.returncode == 2
    assert "--min-replicas 0: a quorum needs at least 1 replica group" in finished.stderr


@pytest.mark.timeout(60)
def test_the_lighthouse_command_serves_on_loopback_until_terminated() -> None:
    pytest.importorskip("torchft")
    with SocketWatch(new_descendants=True) as watch, lighthouse(watch) as address:
        assert address.startswith("http://127.0.0.1:")
        watch.poll()
        listening = {entry for entry in watch.sockets if entry.status == "LISTEN"}
        assert listening and all(entry.local == "127.0.0.1" for entry in listening), listening
    assert watch.outside() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_trainer_in_one_group_checkpoints_and_resumes_the_managers_step(tmp_path: Path) -> None:
    """``Trainer(strategy="torchft_ddp")``: the manager's step travels in the Trainer's checkpoint and comes back."""
    pytest.importorskip("torchft")
    with SocketWatch(new_descendants=True) as watch, lighthouse(watch) as address:
        finished = subprocess.run(
            [sys.executable, str(SCRIPTS / "torchft_trainer.py"), str(tmp_path)], env=group_environment(address, 1),
            capture_output=True, text=True, timeout=150,
        )
        watch.poll()
    assert finished.returncode == 0, finished.stderr[-4000:]
    result = json.loads((tmp_path / "trainer.json").read_text())
    assert result["first"] == [16, {"step": 16, "batches_committed": 16}]  # 2 epochs x 8 batches, all committed
    assert result["resumed"] == [24, {"step": 24, "batches_committed": 24}]  # went on from the checkpoint's 16
    assert watch.outside() == [], f"sockets outside 127.0.0.1: {watch.outside()}"
