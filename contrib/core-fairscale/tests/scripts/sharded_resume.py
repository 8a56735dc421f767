"""One process resumes what 2 ``ddp_sharded`` ranks saved (sharded_lite.py, sharded_trainer.py).

    python sharded_resume.py OUT

The Lite checkpoint OUT/sharded.ckpt is loaded twice: by ``ddp_sharded`` on one process (an OSS of world size 1
owning every parameter) and by ``single_device`` into a plain ``torch.optim.Adam``; each then takes the
remaining steps on the whole global batch. The Trainer checkpoint OUT/trainer.ckpt resumes under
``Trainer(strategy="ddp_sharded", devices=1)``. Writes OUT/resumed.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import sharded_lite
import sharded_trainer
import torch
from torch.utils.data import DataLoader

import core


def resume_lite(out: Path, strategy: str) -> list[float]:
    lite = core.Lite(accelerator="cpu", strategy=strategy, devices=1)
    result: list[float] = lite.launch(_resume_lite, out)
    return result


def _resume_lite(lite: core.Lite, out: Path) -> list[float]:
    network = sharded_lite.model()
    module, optimizer = lite.setup(network, torch.optim.Adam(network.parameters(), lr=sharded_lite.LR))
    remainder = lite.load(out / "sharded.ckpt", {"model": module, "optimizer": optimizer})
    assert remainder == {"step": sharded_lite.STEPS}, remainder
    loader = DataLoader(sharded_lite.dataset(), batch_size=sharded_lite.GLOBAL_BATCH, shuffle=False)
    batches: list[Any] = list(loader)[sharded_lite.STEPS:]
    return sharded_lite.train(lite, module, optimizer, batches)


def main(out: Path) -> None:
    report = {
        "ddp_sharded": resume_lite(out, "ddp_sharded"),
        "single_device": resume_lite(out, "single_device"),
        "trainer": sharded_trainer.resume(out),
    }
    (out / "resumed.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
