"""One timed training run: raw PyTorch, Lite or Trainer, on the same MLP and data.

``python -m bench.overhead_worker MODE STEPS [--ddp]`` prints one JSON line from global rank 0:
``{"mode": ..., "seconds_per_step": ...}``, timed over ``STEPS`` steps after a warm-up. For ``--ddp`` the
raw mode expects to be started by torchrun; the core modes start their own second process.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import torch

# DDP imports this lazily and its functions capture the world group as default arguments; imported after the
# group exists, the group outlives destroy_process_group() and gloo aborts at interpreter exit.
import torch.distributed.nn.functional
from torch.utils.data import DataLoader, TensorDataset

WARMUP = 20
BATCH = 64


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )


def make_loader(steps: int, world_size: int) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    count = (steps + WARMUP) * BATCH * world_size
    features = torch.randn(count, 64, generator=generator)
    data = TensorDataset(features, torch.randint(0, 10, (count,), generator=generator))
    return DataLoader(data, batch_size=BATCH, shuffle=False)


def timed_loop(model: Any, optimizer: Any, loader: Any, backward: Any, steps: int) -> float:
    iterator = iter(loader)
    start = 0.0
    for step in range(WARMUP + steps):
        if step == WARMUP:
            start = time.perf_counter()
        features, labels = next(iterator)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(features), labels)
        backward(loss)
        optimizer.step()
    return (time.perf_counter() - start) / steps


def raw(steps: int, ddp: bool) -> tuple[float, bool]:
    model = make_model()
    world_size, rank = 1, 0
    if ddp:
        torch.distributed.init_process_group("gloo")
        world_size, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(model)
    loader = make_loader(steps, world_size)
    if ddp:
        sampler: torch.utils.data.DistributedSampler[Any] = torch.utils.data.DistributedSampler(
            loader.dataset, shuffle=False
        )
        loader = DataLoader(loader.dataset, batch_size=BATCH, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seconds = timed_loop(model, optimizer, loader, lambda loss: loss.backward(), steps)
    if ddp:
        torch.distributed.barrier()
        del model, optimizer  # drop DDP's reference to the group before destroying it
        torch.distributed.destroy_process_group()
    return seconds, rank == 0


def lite(steps: int, ddp: bool) -> tuple[float, bool]:
    from core import Lite

    def run(lite: Lite) -> tuple[float, bool]:
        model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        model, optimizer = lite.setup(model, optimizer)
        loader = lite.setup_dataloaders(make_loader(steps, lite.world_size))
        return timed_loop(model, optimizer, loader, lite.backward, steps), lite.is_global_zero

    strategy = "ddp" if ddp else "single_device"
    result = Lite(accelerator="cpu", strategy=strategy, devices=2 if ddp else 1).launch(run)
    return result if result is not None else (0.0, False)


Loop = tuple[Any, Any, Any, Callable[[torch.Tensor], None]]  # model, optimizer, loader, backward


def raw_loop(steps: int, world_size: int, ddp: bool) -> Loop:
    """The raw loop's parts on the process group a framework has already made (DDP) or in this process."""
    model = torch.nn.parallel.DistributedDataParallel(make_model()) if ddp else make_model()
    loader = make_loader(steps, world_size)
    if ddp:
        sampler: torch.utils.data.DistributedSampler[Any] = torch.utils.data.DistributedSampler(
            loader.dataset, shuffle=False
        )
        loader = DataLoader(loader.dataset, batch_size=BATCH, sampler=sampler)
    return model, torch.optim.SGD(model.parameters(), lr=0.01), loader, lambda loss: loss.backward()


def alternate_blocks(raw_parts: Loop, framework_parts: Loop, steps: int, blocks: int) -> dict[str, list[float]]:
    """The raw loop and a framework's loop in the same job, alternating blocks of ``steps`` steps.

    Separate processes differ from one another by a few per cent in a single process and by 10-25 % under DDP
    on 2 cores (where the ranks and gloo's threads land), which hides a 1-2 % overhead; here both loops share
    the processes, the process group and the data, so the block times differ only by what each loop does per
    step. Returns the per-step time of every block.
    """
    samples: dict[str, list[float]] = {"raw": [], "framework": []}
    for _ in range(blocks):
        samples["raw"].append(timed_loop(*raw_parts, steps))
        samples["framework"].append(timed_loop(*framework_parts, steps))
    return samples


def _calls(parts: Loop, steps: int) -> float:
    """Python-level calls (Python functions and the builtins they call) per step of ``parts``, after a warm-up."""
    import gc
    import sys

    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    model, optimizer, loader, backward = parts
    iterator = iter(loader)
    # No garbage collection while counting: a collection runs the finalizers and weakref callbacks of whatever
    # became garbage before (in a test process, earlier tests' objects), calls that are not the step's. A CI run
    # counted 5 such calls over 30 raw steps once the pytest workers froze their imports (gc.freeze changes when
    # collections come).
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for step in range(WARMUP + steps):
            if step == WARMUP:
                sys.setprofile(count)
            features, labels = next(iterator)
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(features), labels)
            backward(loss)
            optimizer.step()
    finally:
        sys.setprofile(None)
        if collecting:
            gc.enable()
    return calls / steps


def calls_per_step(steps: int) -> dict[str, float]:
    """The raw loop's and Lite's Python-level calls per step, single process: a count, not a time, so it does not
    move with the machine's load. What Lite adds (``lite - raw``) is its per-step overhead in work done."""
    from core import Lite

    counted: dict[str, float] = {}

    def run(lite: Lite) -> None:
        model = make_model()
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
        loader = lite.setup_dataloaders(make_loader(steps, 1))
        counted["lite"] = _calls((model, optimizer, loader, lite.backward), steps)
        counted["raw"] = _calls(raw_loop(steps, 1, False), steps)

    Lite(accelerator="cpu", strategy="single_device", devices=1).launch(run)
    return counted


def interleaved(steps: int, blocks: int, ddp: bool) -> None:
    """Lite against the raw loop in one job (:func:`alternate_blocks`); global rank 0 prints the samples."""
    from core import Lite

    def run(lite: Lite) -> None:
        raw_parts = raw_loop(steps, lite.world_size, ddp)
        model = make_model()
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
        loader = lite.setup_dataloaders(make_loader(steps, lite.world_size))
        samples = alternate_blocks(raw_parts, (model, optimizer, loader, lite.backward), steps, blocks)
        if lite.is_global_zero:
            print(json.dumps({"mode": "interleaved", **samples}), flush=True)
        del raw_parts  # drop the raw DDP's reference to the group before the strategy destroys it

    Lite(accelerator="cpu", strategy="ddp" if ddp else "single_device", devices=2 if ddp else 1).launch(run)


def _trainer(steps: int, ddp: bool, full: bool) -> tuple[float, bool]:
    import tempfile

    import core

    class Timed(core.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = make_model()
            self.start = 0.0
            self.seconds = 0.0

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == WARMUP:
                self.start = time.perf_counter()
            features, labels = batch
            loss = torch.nn.functional.cross_entropy(self.model(features), labels)
            if full:
                self.log("loss", loss, prog_bar=True)
            return loss

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            # The last timed step ends here: the checkpoint written once at the end of the epoch is not a
            # per-step cost (the checkpoint rows measure saving).
            if batch_idx == WARMUP + steps - 1:
                self.seconds = (time.perf_counter() - self.start) / steps

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    module = Timed()
    with tempfile.TemporaryDirectory() as root:
        trainer = core.Trainer(
            accelerator="cpu", strategy="ddp" if ddp else "single_device", devices=2 if ddp else 1,
            max_steps=WARMUP + steps, logger=full, enable_checkpointing=full, enable_progress_bar=full,
            num_sanity_val_steps=0, default_root_dir=root,
        )
        trainer.fit(module, train_dataloaders=make_loader(steps, 2 if ddp else 1))
    return module.seconds, trainer.is_global_zero


def trainer(steps: int, ddp: bool) -> tuple[float, bool]:
    return _trainer(steps, ddp, full=False)


def trainer_full(steps: int, ddp: bool) -> tuple[float, bool]:
    return _trainer(steps, ddp, full=True)


MODES = {"raw": raw, "lite": lite, "trainer": trainer, "trainer_full": trainer_full}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted([*MODES, "interleaved"]))
    parser.add_argument("steps", type=int)
    parser.add_argument("--ddp", action="store_true")
    parser.add_argument("--blocks", type=int, default=0, help="interleaved mode: raw/Lite block pairs")
    args = parser.parse_args()
    torch.set_num_threads(1 if args.ddp else int(os.environ.get("BENCH_THREADS", "1")))
    if args.mode == "interleaved":
        interleaved(args.steps, args.blocks, args.ddp)
        return
    seconds, is_zero = MODES[args.mode](args.steps, args.ddp)
    if is_zero:
        print(json.dumps({"mode": args.mode, "seconds_per_step": seconds}), flush=True)


if __name__ == "__main__":
    main()
