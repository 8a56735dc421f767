"""core-horovod under a real ``horovodrun --gloo`` with 2 processes on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from horovod_harness import SCRIPTS, horovodrun, run_horovod

from core.testing import StrategyConformance

pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.timeout(400)]


def trained(out: Path) -> dict[str, Any]:
    return json.loads((out / "result.json").read_text())


def reference(out: Path, accumulate: int = 1) -> dict[str, Any]:
    """One process, batch 64: what 2 ranks x batch 32 must reproduce."""
    subprocess.run([sys.executable, str(SCRIPTS / "train.py"), str(out), "single_device", str(accumulate)],
                   check=True, timeout=120, capture_output=True)
    return trained(out)


def assert_close(found: dict[str, list[Any]], expected: dict[str, list[Any]], atol: float) -> None:
    import torch

    for name, values in expected.items():
        torch.testing.assert_close(torch.tensor(found[name]), torch.tensor(values), atol=atol, rtol=0)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_two_horovod_ranks_train_like_one_process_with_the_whole_batch(tmp_path: Path, accumulate: int) -> None:
    out = tmp_path / "horovod"
    out.mkdir()
    finished = run_horovod([sys.executable, str(SCRIPTS / "train.py"), str(out), "horovod", str(accumulate)])
    assert finished.returncode == 0, finished.output[-4000:]
    result = trained(out)
    # No devices= in the script: the horovod environment gives the launcher's -np.
    assert (result["world_size"], result["strategy"], result["environment"]) == (2, "horovod", "horovod")
    assert result["gathered"] == [[0.0], [1.0]] and result["broadcast"] == {"from": 1}
    expected = reference(tmp_path / "single", accumulate)
    # Horovod sums the two ranks' gradients in another order than one process sums 64 samples.
    assert_close(result["state"], expected["state"], atol=1e-6)
    assert finished.non_loopback() == [], f"sockets outside 127.0.0.1: {finished.non_loopback()}"
    assert (out / "checkpoint.ckpt").exists()


def test_ddp_under_horovodrun_agrees_with_horovod(tmp_path: Path) -> None:
    """The horovod environment also serves torch.distributed strategies (a port derived per horovodrun)."""
    runs = {}
    for strategy in ("horovod", "ddp"):
        out = tmp_path / strategy
        out.mkdir()
        finished = run_horovod([sys.executable, str(SCRIPTS / "train.py"), str(out), strategy])
        assert finished.returncode == 0, finished.output[-4000:]
        assert finished.non_loopback() == []
        runs[strategy] = trained(out)
    assert runs["ddp"]["environment"] == "horovod"
    assert_close(runs["horovod"]["state"], runs["ddp"]["state"], atol=1e-6)


def test_a_mismatched_accumulation_names_the_value_to_pass(tmp_path: Path) -> None:
    out = tmp_path / "mismatch"
    out.mkdir()
    script = tmp_path / "mismatch.py"
    script.write_text(
        "import sys, torch\n"
        "from core import Lite\n"
        "def run(lite):\n"
        "    net = torch.nn.Linear(2, 1)\n"
        "    model, opt = lite.setup(net, torch.optim.SGD(net.parameters(), 0.1))\n"
        "    for _ in range(2):\n"
        "        with lite.no_backward_sync(model):\n"
        "            lite.backward(model(torch.ones(1, 2)).sum())\n"
        "    lite.backward(model(torch.ones(1, 2)).sum())\n"
        "    opt.step()\n"
        "Lite(accelerator='cpu', strategy='horovod').launch(run)\n"
    )
    finished = run_horovod([sys.executable, str(script)])
    assert finished.returncode != 0
    assert "This is backward pass 2 since the last optimizer step, but Horovod averages the gradients once every 1" in (
        finished.output
    )
    assert "pass strategy=HorovodStrategy(backward_passes_per_step=k)" in finished.output


def test_more_than_one_process_outside_horovodrun_says_how_to_start_it(tmp_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-c",
         "from core import Lite; Lite(accelerator='cpu', strategy='horovod', devices=2).launch(print)"],
        capture_output=True, text=True, timeout=120,
    )
    assert finished.returncode != 0
    assert "core._errors.ConfigurationError" in finished.stderr or "ConfigurationError" in finished.stderr
    assert "horovodrun -np 2 -H localhost:2 --gloo python script.py" in finished.stderr


class TestHorovodConformance(StrategyConformance):
    """The strategy kit, with the ranks started by horovodrun instead of by the strategy."""

    alias = "horovod"
    launcher: ClassVar[tuple[str, ...]] = ()

    @pytest.fixture(autouse=True)
    def _launcher(self) -> None:
        type(self).launcher = (*horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo", "--network-interface", "lo")
