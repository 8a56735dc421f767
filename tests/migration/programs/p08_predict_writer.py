# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""trainer.predict with a BasePredictionWriter that writes every batch and the whole epoch."""

import torch
from _common import arguments, loader, make_net, regression_data, strategy_for, write_result

import core.lightning as L
from core.lightning.pytorch.callbacks import BasePredictionWriter


class Writer(BasePredictionWriter):
    def __init__(self, directory, write_interval):
        super().__init__(write_interval)
        self.directory = directory

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        torch.save(prediction, self.directory / f"batch-{trainer.global_rank}-{batch_idx}.pt")

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        torch.save({"predictions": predictions, "batch_indices": batch_indices},
                   self.directory / f"epoch-{trainer.global_rank}.pt")


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        inputs, _ = batch
        return self.net(inputs)


def main() -> None:
    out, devices = arguments()
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy_for(devices), logger=False,
        enable_progress_bar=False, callbacks=[Writer(out, "batch_and_epoch")],
    )
    returned = trainer.predict(Regressor(), loader(regression_data(samples=40), batch_size=8), return_predictions=True)
    if trainer.is_global_zero:
        write_result(out, {"returned_batches": len(returned), "world_size": trainer.world_size})


if __name__ == "__main__":
    main()
