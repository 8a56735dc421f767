"""The diloco extension under the Trainer: ddp, 2 real gloo processes as 2 groups of 1, ``H = 2``.

Three fits of scripts/diloco_trainer_job.py: straight to step 8; to step 5 saving a checkpoint from inside the fit
at step 5 (between synchronisations: the groups differ); from that checkpoint to step 8. The resumed fit ends
bitwise where the straight one did on both ranks, which it cannot unless each group got its own state back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).parent / "scripts" / "diloco_trainer_job.py"


def fit(out: Path, max_steps: int, save_at: int = 0, resume_from: Path | None = None) -> list[list[torch.Tensor]]:
    launcher = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    environment = {key: value for key, value in os.environ.items() if key not in launcher}
    environment["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, str(SCRIPT), str(out), str(max_steps), str(save_at)]
    result = subprocess.run([*command, *([str(resume_from)] if resume_from else [])], capture_output=True,
                            text=True, timeout=180, env=environment, cwd=out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [torch.load(out / f"rank-{rank}-{max_steps}.pt") for rank in (0, 1)]


@pytest.mark.timeout(400)
def test_a_fit_resumed_between_synchronisations_ends_bitwise_where_the_straight_fit_did(tmp_path: Path) -> None:
    straight, interrupted, resumed = (tmp_path / name for name in ("straight", "interrupted", "resumed"))
    for directory in (straight, interrupted, resumed):
        directory.mkdir()
    reference = fit(straight, 8)
    # Step 8 follows a synchronisation (H = 2): both groups hold the same model; each sent it 4 times.
    assert all(torch.equal(a, b) for a, b in zip(*reference, strict=True))
    parameter_bytes = sum(tensor.numel() * tensor.element_size() for tensor in reference[0])
    assert int((straight / "traffic-8.txt").read_text()) == 4 * parameter_bytes

    at_five = fit(interrupted, 5, save_at=5)
    assert not all(torch.equal(a, b) for a, b in zip(*at_five, strict=True)), "step 5 is between synchronisations"
    ending = fit(resumed, 8, resume_from=interrupted / "at-5.ckpt")
    for rank in (0, 1):
        assert all(torch.equal(a, b) for a, b in zip(ending[rank], reference[rank], strict=True)), rank
    # The resumed fit sent only its own synchronisations (steps 6 and 8).
    assert int((resumed / "traffic-8.txt").read_text()) == 2 * parameter_bytes
