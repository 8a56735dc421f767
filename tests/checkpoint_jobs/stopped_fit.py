"""A fit stopped in the middle of an epoch, saved after it and continued, counted in sample ids:
``python stopped_fit.py OUT PHASE``.

tests/test_trainer_stopped_fit.py runs it. The dataset's items are their own index; every rank records the ids it
trained on, per epoch. Two ways a fit stops in the middle of epoch 0 (64 samples, batches of 4: 8 steps an epoch
on 2 processes): ``max_steps=6``, and a callback setting ``should_stop`` after step 5. ``trainer.save_checkpoint``
is called after each ``fit`` returns; a new Trainer continues from that checkpoint to the end of the epoch.

    two  2 processes: both stopped fits with their saves, then each continued on 2 processes
    one  1 process:   each checkpoint continued on 1 process (the remainder dealt to one rank)

Rank ``r`` writes ``OUT/<scenario>/<part>-<r>.json``: ``{"0": [ids of epoch 0], "1": [ids of epoch 1]}``, the
parts being ``stop``, ``resume2`` and ``resume1``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import core
from core.callbacks import Callback

SAMPLES = 64
BATCH = 4
SEED = 3
STOP = {"max_steps": 6, "callback": 5}  # the step a scenario stops at on 2 processes
SCENARIOS = tuple(STOP)


class Ids(Dataset[int]):
    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> int:
        return index


class Recorder(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(1, 1)
        self.seen: dict[int, list[int]] = {0: [], 1: []}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).extend(batch.tolist())
        return self.net(batch.float().unsqueeze(1)).sum()

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.01)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)}


class StopAt(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            trainer.should_stop = True


def trainer(devices: int, **flags: Any) -> core.Trainer:
    return core.Trainer(accelerator="cpu", strategy="ddp", devices=devices, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **flags)


def write(out: Path, part: str, rank: int, seen: dict[int, list[int]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{part}-{rank}.json").write_text(json.dumps({str(epoch): ids for epoch, ids in seen.items()}))


def stop(out: Path, scenario: str) -> None:
    if scenario == "max_steps":
        run = trainer(2, max_steps=STOP[scenario])
    else:
        run = trainer(2, max_epochs=1, callbacks=[StopAt(STOP[scenario])])
    module = Recorder()
    run.fit(module, DataLoader(Ids(), batch_size=BATCH, shuffle=True))
    run.save_checkpoint(out / "stopped.ckpt")
    write(out, "stop", run.global_rank, module.seen)


def resume(out: Path, scenario: str, devices: int) -> None:
    done = STOP[scenario] * 2 * BATCH  # samples of epoch 0 trained before the stop
    if scenario == "max_steps":  # a larger max_steps: the steps that finish the epoch on this many processes
        run = trainer(devices, max_steps=STOP[scenario] + (SAMPLES - done) // (BATCH * devices))
    else:
        run = trainer(devices, max_epochs=1)
    module = Recorder()
    run.fit(module, DataLoader(Ids(), batch_size=BATCH, shuffle=True), ckpt_path=out / "stopped.ckpt")
    write(out, f"resume{devices}", run.global_rank, module.seen)


def main() -> None:
    out, phase = Path(sys.argv[1]), sys.argv[2]
    core.seed_everything(SEED, verbose=False)
    for scenario in SCENARIOS:
        if phase == "two":
            stop(out / scenario, scenario)
            resume(out / scenario, scenario, 2)
        else:
            resume(out / scenario, scenario, 1)


if __name__ == "__main__":
    main()
