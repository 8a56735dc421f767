"""backward() of a loss no set-up module computed is refused on several processes (its gradients would not be
synchronised and the ranks' weights would drift apart), with the fix in the message; a frozen module beside the
set-up one stays allowed. Real processes: one two-rank job runs ddp, then fsdp."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import core

SCRIPT = Path(__file__).parent / "lite_scripts" / "unset_backward.py"
STRATEGIES = [name for name, package in (("ddp", "core_ddp"), ("fsdp", "core_fsdp"))
              if importlib.util.find_spec(package) is not None]


@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.skipif(not STRATEGIES, reason="neither core-ddp nor core-fsdp is installed")
def test_a_loss_from_a_module_never_set_up_is_refused_under_each_strategy(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items()
                   if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"}}
    finished = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), *STRATEGIES], capture_output=True,
                              text=True, timeout=200, env={**environment, "OMP_NUM_THREADS": "1"})
    assert finished.returncode == 0, finished.stdout + finished.stderr
    for strategy in STRATEGIES:
        for rank in (0, 1):
            report = json.loads((tmp_path / f"{strategy}-{rank}.json").read_text())
            refused = str(report.get("refused"))
            assert refused.startswith("backward() of a loss that no set-up module computed"), (strategy, refused)
            assert f"Under strategy={strategy!r} with 2 processes" in refused
            assert "model = lite.setup(model)" in refused
            assert report["ranks_agree"] is True, strategy  # the allowed step kept the ranks equal


def test_on_one_process_a_module_that_was_not_set_up_may_compute_the_loss() -> None:
    """As in Fabric: with nothing to synchronise, backward() of any loss is plain PyTorch's."""

    def run(lite: core.Lite) -> float:
        stray = torch.nn.Linear(3, 1)
        lite.backward(stray(torch.ones(2, 3)).sum())
        assert stray.weight.grad is not None
        return float(stray.weight.grad.sum())

    assert core.Lite(accelerator="cpu", devices=1).launch(run) == 6.0
