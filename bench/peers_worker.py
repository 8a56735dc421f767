"""One timed run of a peer framework on the same MLP and data as bench/overhead_worker.py.

Runs only in the separate peers environment (``make bench-peers``): Lightning and Accelerate are never
dependencies of the project. ``python -m bench.peers_worker MODE STEPS [--ddp]`` prints one JSON line from
global rank 0. For ``--ddp`` every mode is started by torchrun, so all peers see the same 2 processes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch

from bench.overhead_worker import WARMUP, alternate_blocks, make_loader, make_model, raw, raw_loop, timed_loop


def fabric(steps: int, ddp: bool) -> tuple[float, bool]:
    from lightning.fabric import Fabric  # type: ignore[import-not-found]

    runner = Fabric(accelerator="cpu", strategy="ddp" if ddp else "auto", devices=2 if ddp else 1)
    runner.launch()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = runner.setup(model, optimizer)
    loader = runner.setup_dataloaders(make_loader(steps, runner.world_size))
    seconds = timed_loop(model, optimizer, loader, runner.backward, steps)
    return seconds, runner.global_rank == 0


def lightning_trainer(steps: int, ddp: bool) -> tuple[float, bool]:
    import lightning as L  # type: ignore[import-not-found]

    class Timed(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = make_model()
            self.start = 0.0
            self.seconds = 0.0

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == WARMUP:
                self.start = time.perf_counter()
            features, labels = batch
            return torch.nn.functional.cross_entropy(self.model(features), labels)

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            # The last timed step ends here: the checkpoint written once at the end of the epoch is not a
            # per-step cost (the checkpoint rows measure saving).
            if batch_idx == WARMUP + steps - 1:
                self.seconds = (time.perf_counter() - self.start) / steps

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    module = Timed()
    trainer = L.Trainer(
        accelerator="cpu", strategy="ddp" if ddp else "auto", devices=2 if ddp else 1,
        max_steps=WARMUP + steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    world_size = 2 if ddp else 1
    trainer.fit(module, train_dataloaders=make_loader(steps, world_size))
    return module.seconds, trainer.global_rank == 0


def accelerate(steps: int, ddp: bool) -> tuple[float, bool]:
    from accelerate import Accelerator  # type: ignore[import-not-found]

    accelerator = Accelerator(cpu=True)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = make_loader(steps, accelerator.num_processes)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    seconds = timed_loop(model, optimizer, loader, accelerator.backward, steps)
    return seconds, accelerator.is_main_process


def fabric_blocks(steps: int, blocks: int, ddp: bool) -> tuple[dict[str, list[float]], bool]:
    """Fabric against the raw loop in one job, on Fabric's process group (``alternate_blocks``)."""
    from lightning.fabric import Fabric

    runner = Fabric(accelerator="cpu", strategy="ddp" if ddp else "auto", devices=2 if ddp else 1)
    runner.launch()
    raw_parts = raw_loop(steps, runner.world_size, ddp)
    model = make_model()
    model, optimizer = runner.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    loader = runner.setup_dataloaders(make_loader(steps, runner.world_size))
    samples = alternate_blocks(raw_parts, (model, optimizer, loader, runner.backward), steps, blocks)
    return samples, runner.global_rank == 0


def accelerate_blocks(steps: int, blocks: int, ddp: bool) -> tuple[dict[str, list[float]], bool]:
    """Accelerate against the raw loop in one job, on Accelerate's process group (``alternate_blocks``)."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    raw_parts = raw_loop(steps, accelerator.num_processes, ddp)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader(steps, accelerator.num_processes))
    samples = alternate_blocks(raw_parts, (model, optimizer, loader, accelerator.backward), steps, blocks)
    return samples, accelerator.is_main_process


BLOCK_MODES = {"fabric": fabric_blocks, "accelerate": accelerate_blocks}
MODES = {"raw": raw, "fabric": fabric, "lightning": lightning_trainer, "accelerate": accelerate}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("steps", type=int)
    parser.add_argument("--ddp", action="store_true")
    parser.add_argument("--blocks", type=int, default=0, help="fabric, accelerate: alternate with raw in one job")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.blocks:
        samples, is_zero = BLOCK_MODES[args.mode](args.steps, args.blocks, args.ddp)
        if is_zero:
            print(json.dumps({"mode": args.mode, **samples}), flush=True)
        return
    seconds, is_zero = MODES[args.mode](args.steps, args.ddp)
    if is_zero:
        print(json.dumps({"mode": args.mode, "seconds_per_step": seconds, "pid": os.getpid()}), flush=True)


if __name__ == "__main__":
    main()
