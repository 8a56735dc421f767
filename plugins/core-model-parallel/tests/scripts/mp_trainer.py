"""The small transformer as a Module under the Trainer, on ``model_parallel`` 1x2 (2 processes) or on one process.

    python mp_trainer.py LAYOUT OUT TAG EPOCHS [CHECKPOINT]

LAYOUT: ``1x2`` (``model_parallel``, tensor parallel over 2 processes; the Module parallelizes itself in
``configure_model`` with ``self.device_mesh``) | ``one`` (one process, strategy ``auto``: the mesh is ``None`` and
``configure_model`` leaves the model alone). Trains to EPOCHS (resuming from CHECKPOINT when given, with
``fit(ckpt_path=...)``), with OUT/TAG/last.ckpt saved after every epoch (ModelCheckpoint); rank 0 writes
OUT/TAG-losses.json (the loss of every step this run trained, with its global step) and OUT/TAG-weights.pt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import nd_transformer as nd
import torch
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader

import core
from core.callbacks import ModelCheckpoint
from core.toolkit.strategies import full_state_dict


class Language(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nd.model()
        self.losses: list[tuple[int, float]] = []

    def configure_model(self) -> None:
        mesh = self.device_mesh
        already = any(isinstance(parameter, DTensor) for parameter in self.net.parameters())
        if mesh is not None and not already:
            nd.parallelize(self.net, mesh)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        tokens, targets = batch
        loss = nd.loss_fn(self.net(tokens), targets)
        self.losses.append((self.global_step, float(loss)))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return nd.optimizer(self.parameters())


def main(layout: str, out: Path, tag: str, epochs: int, checkpoint: Path | None) -> None:
    if layout == "1x2":
        from core_model_parallel import ModelParallelStrategy

        # A full checkpoint file when this run resumes one written by a single process (checkpoint_io 'torch'),
        # sharded (a directory, checkpoint_io 'distributed') otherwise.
        full = checkpoint is not None and checkpoint.is_file()
        strategy: object = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=2,
                                                 save_distributed_checkpoint=not full)
        devices, plugins = 2, None
    else:
        # One process reads a sharded directory through core-dcp's 'distributed' checkpoint_io.
        strategy, devices = "auto", 1
        plugins = ["distributed"] if checkpoint is not None and checkpoint.is_dir() else None
    last = ModelCheckpoint(dirpath=out / tag, save_top_k=0, save_last=True)  # out/TAG/last.ckpt after each epoch
    trainer = core.Trainer(accelerator="cpu", strategy=strategy, devices=devices, plugins=plugins, max_epochs=epochs,
                           logger=False, callbacks=[last], enable_progress_bar=False, default_root_dir=out)
    module = Language()
    loader = DataLoader(nd.dataset(nd.STEPS // 2), batch_size=nd.GLOBAL_BATCH, shuffle=False)
    trainer.fit(module, loader, ckpt_path=checkpoint)
    # After fit the module stays parallelized: gathered whole explicitly (a collective on every rank; rank 0 keeps it).
    weights = full_state_dict(module.net)
    if trainer.global_rank == 0:
        (out / f"{tag}-losses.json").write_text(json.dumps(module.losses))
        torch.save(weights, out / f"{tag}-weights.pt")


if __name__ == "__main__":
    layout, out, tag, epochs = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    main(layout, out, tag, epochs, Path(sys.argv[5]) if len(sys.argv) > 5 else None)
