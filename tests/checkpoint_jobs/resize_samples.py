"""Resuming on another world size, counted in sample ids: ``python resize_samples.py OUT PHASE``.

tests/test_fault_tolerance_resize.py runs it. The dataset's items are their own index; every rank records the
ids it trained on, per epoch. Each scenario (Lite's ``ResumableCheckpoints`` and the Trainer's
``FaultTolerance``, ``drop_last`` off and on, 2 -> 1 and 1 -> 2 processes) trains epoch 0 up to a resumable
checkpoint in the middle and stops there, as a crash would; a later phase on the other world size resumes it
and trains to the end of epoch 1. Three jobs run every scenario, each phase of every scenario once:

    first   2 processes: the first half of the 2 -> 1 scenarios
    middle  1 process:   the second half of the 2 -> 1 scenarios, the first half of the 1 -> 2 ones
    last    2 processes: the second half of the 1 -> 2 scenarios

Rank ``r`` writes ``OUT/<scenario>/<half>-<r>.json``: ``{"0": [ids of epoch 0], "1": [ids of epoch 1]}``.
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
from core.fault_tolerance import FaultTolerance, ResumableCheckpoints

SAMPLES = 51  # does not divide by 2: the remainders need padding or dropping
BATCH = 4
SEED = 7
EPOCHS = 2
STOP_AFTER = {2: 3, 1: 5}  # batches per rank before the checkpoint, by the world size that trains them
PHASES = {"first": (2, ["2to1"], []), "middle": (1, ["1to2"], ["2to1"]), "last": (2, [], ["1to2"])}


class Ids(Dataset[int]):
    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> int:
        return index


def loader(drop_last: bool) -> DataLoader[int]:
    return DataLoader(Ids(), batch_size=BATCH, shuffle=True, drop_last=drop_last)


def scenarios(directions: list[str]) -> list[tuple[str, bool]]:
    return [(direction, drop_last) for direction in directions for drop_last in (False, True)]


def name(api: str, direction: str, drop_last: bool) -> str:
    return f"{api}-{direction}-drop_last={drop_last}"


def write(out: Path, half: str, rank: int, seen: dict[int, list[int]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{half}-{rank}.json").write_text(json.dumps({str(epoch): ids for epoch, ids in seen.items()}))


# -- Lite -------------------------------------------------------------------------------------------


def lite_scenario(lite: core.Lite, out: Path, drop_last: bool, half: str) -> None:
    network = torch.nn.Linear(1, 1)
    model, optimizer = lite.setup(network, torch.optim.SGD(network.parameters(), lr=0.0))
    data = lite.setup_dataloaders(loader(drop_last))
    state = {"model": model, "optimizer": optimizer}
    stop = STOP_AFTER[lite.world_size] if half == "before" else -1
    checkpoints = ResumableCheckpoints(lite, out / "checkpoints", every_n_steps=stop if stop > 0 else 1000,
                                       preemption_signals=())
    step = checkpoints.restore(state)
    seen: dict[int, list[int]] = {epoch: [] for epoch in range(EPOCHS)}
    for epoch in range(checkpoints.epoch, EPOCHS):
        for ids in checkpoints.batches(data, epoch):
            seen[epoch] += ids.tolist()
            lite.backward(model(ids.float().unsqueeze(1)).sum())
            optimizer.step()
            step += 1
            checkpoints.maybe_save(state, step)
            if step == stop:
                write(out, half, lite.global_rank, seen)
                return  # as if the process died here
    checkpoints.finish()
    write(out, half, lite.global_rank, seen)


def lite_phase(lite: core.Lite, out: Path, before: list[str], after: list[str]) -> None:
    for direction, drop_last in scenarios(after):
        lite_scenario(lite, out / name("lite", direction, drop_last), drop_last, "after")
    for direction, drop_last in scenarios(before):
        lite_scenario(lite, out / name("lite", direction, drop_last), drop_last, "before")


# -- Trainer ----------------------------------------------------------------------------------------


class Recorder(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(1, 1)
        self.seen: dict[int, list[int]] = {epoch: [] for epoch in range(EPOCHS)}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen[self.current_epoch] += batch.tolist()
        return self.net(batch.float().unsqueeze(1)).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


class StopAfter(Callback):
    """Ends the fit after the training batch whose step was just checkpointed: what follows is never seen."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            trainer.should_stop = True


def trainer_scenario(devices: int, out: Path, drop_last: bool, half: str) -> None:
    stop = STOP_AFTER[devices] if half == "before" else -1
    callbacks: list[Callback] = [FaultTolerance(out / "checkpoints", every_n_train_steps=stop if stop > 0 else 1000,
                                                preemption_signals=())]
    if half == "before":
        callbacks.append(StopAfter(stop))
    trainer = core.Trainer(accelerator="cpu", strategy="ddp", devices=devices, max_epochs=EPOCHS, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                           num_sanity_val_steps=0, callbacks=callbacks)
    module = Recorder()
    trainer.fit(module, loader(drop_last))
    write(out, half, trainer.global_rank, module.seen)


def main() -> None:
    out, phase = Path(sys.argv[1]), sys.argv[2]
    devices, before, after = PHASES[phase]
    core.seed_everything(SEED, verbose=False)
    for direction, drop_last in scenarios(after):
        trainer_scenario(devices, out / name("trainer", direction, drop_last), drop_last, "after")
    for direction, drop_last in scenarios(before):
        trainer_scenario(devices, out / name("trainer", direction, drop_last), drop_last, "before")
    core.Lite(accelerator="cpu", strategy="ddp", devices=devices).launch(lite_phase, out, before, after)


if __name__ == "__main__":
    main()
