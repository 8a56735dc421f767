"""A job that checkpoints on SLURM's requeue signal and resumes after the requeue (test_slurm_requeue.py).

``srun python requeue_probe.py DIR MODE``, MODE being:

- ``immediate``: the slurm environment's default handler, without torch: on SIGUSR1 every task writes
  ``DIR/checkpoint-<rank>.json`` inside the signal handler and rank 0 requeues;
- ``deferred``: a ``Lite(strategy="ddp")`` loop over gloo; the handler only records the signal, the loop
  agrees on it across ranks each step (an all-reduce), then every rank calls ``environment.requeue()``,
  whose callback is a collective ``Lite.save`` (rank 0 writes ``DIR/checkpoint.pt``, then a barrier);
- ``trainer``: a ``core.lightning`` Trainer fit under ddp with no requeue code: the Trainer's own auto-requeue
  saves ``DIR/root/hpc_ckpt_1.ckpt``, requeues and stops (exit 75); the requeued job's fit resumes from it.

Every task writes ``DIR/ready-<rank>`` once it is ready for the signal. After the restart each task finds
the checkpoint, writes ``DIR/resumed-<rank>.json`` (the step it saved, ``SLURM_RESTART_COUNT``) and exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

DEADLINE = 120.0


def resumed(directory: Path, rank: int, step: int) -> None:
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    (directory / f"resumed-{rank}.json").write_text(json.dumps({"step": step, "restart_count": restarts}))


def immediate(directory: Path, rank: int) -> int:
    from core_slurm import SLURMEnvironment

    checkpoint = directory / f"checkpoint-{rank}.json"
    if checkpoint.exists():
        resumed(directory, rank, json.loads(checkpoint.read_text())["step"])
        return 0
    step = 0

    def save() -> None:
        partial = checkpoint.with_suffix(".partial")
        partial.write_text(json.dumps({"step": step, "rank": rank}))
        partial.replace(checkpoint)

    environment = SLURMEnvironment()
    assert environment.environment_detect() is environment
    environment.set_requeue_callback(save)
    environment.install_requeue_handler()  # what a run does when it starts (core_attach)
    (directory / f"ready-{rank}").touch()
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        step += 1
        time.sleep(0.01)
    return 1  # never signalled


def deferred(directory: Path, rank: int) -> int:
    import torch
    from core_slurm import SLURMEnvironment

    import core

    checkpoint = directory / "checkpoint.pt"
    lite = core.Lite(accelerator="cpu", strategy="ddp", devices=2)

    def train(lite: core.Lite) -> int:
        environment = lite.active.environment
        assert isinstance(environment, SLURMEnvironment), lite.active.config.environment
        model = torch.nn.Linear(4, 1)
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
        state = {"model": model, "optimizer": optimizer, "step": 0}
        if checkpoint.exists():
            lite.load(checkpoint, state)
            resumed(directory, lite.global_rank, state["step"])
            return 0
        environment.set_requeue_callback(lambda: lite.save(checkpoint, state), deferred=True)
        (directory / f"ready-{lite.global_rank}").touch()
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            loss = model(torch.randn(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            lite.backward(loss)
            optimizer.step()
            state["step"] += 1
            requested = torch.tensor(float(environment.requeue_requested))
            if lite.all_reduce(requested, reduce_op="max").item() > 0:
                environment.requeue()
                return 0
            time.sleep(0.01)
        return 1

    return int(lite.launch(train) or 0)


def trainer(directory: Path, rank: int) -> int:
    """A Lightning program, unchanged but for its import: no requeue code of its own (Lightning's Trainer's)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import core.lightning as L

    class Probe(L.Callback):
        def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
            self.started = time.monotonic()
            if trainer.global_step > 0:  # the requeued job: fit() resumed from hpc_ckpt_<n>.ckpt by itself
                resumed(directory, trainer.global_rank, trainer.global_step)
                trainer.should_stop = True

        def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
            if trainer.global_step == 3:
                (directory / f"ready-{trainer.global_rank}").touch()
            if time.monotonic() - self.started > DEADLINE:
                trainer.should_stop = True  # never signalled: the test fails on the missing checkpoint
            time.sleep(0.01)

    class Regression(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            inputs, targets = batch
            return torch.nn.functional.mse_loss(self.layer(inputs), targets)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(200_000, 4, generator=generator), torch.randn(200_000, 1, generator=generator))
    fit = L.Trainer(accelerator="cpu", strategy="ddp", devices=2, default_root_dir=directory / "root",
                    max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, callbacks=[Probe()])
    fit.fit(Regression(), DataLoader(data, batch_size=8))
    return 0


def main() -> int:
    directory, mode = Path(sys.argv[1]), sys.argv[2]
    rank = int(os.environ["SLURM_PROCID"])
    probes = {"immediate": immediate, "deferred": deferred, "trainer": trainer}
    return probes[mode](directory, rank)


if __name__ == "__main__":
    sys.exit(main())
