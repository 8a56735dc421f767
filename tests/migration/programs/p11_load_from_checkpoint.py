# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""save_hyperparameters + ModelCheckpoint, then LightningModule.load_from_checkpoint in a new process."""

import sys

import torch
from _common import arguments, loader, regression_data, write_result

import core.lightning as L
from core.lightning.pytorch.callbacks import ModelCheckpoint


class Regressor(L.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.05, note: str = "default") -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.net(inputs), targets)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    out, _ = arguments()
    if sys.argv[3:] == ["load"]:
        path = (out / "path.txt").read_text()
        restored = Regressor.load_from_checkpoint(path, map_location="cpu")
        overridden = Regressor.load_from_checkpoint(path, note="overridden")
        write_result(
            out,
            {"hparams": dict(restored.hparams), "overridden_note": overridden.hparams.note,
             "training": restored.training},
            restored.net.state_dict(),
        )
        return
    checkpoint = ModelCheckpoint(dirpath=out / "ckpt", save_last=True)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, callbacks=[checkpoint], logger=False,
                        enable_progress_bar=False)
    model = Regressor(hidden=12, lr=0.02, note="trained")
    trainer.fit(model, train_dataloaders=loader(regression_data(), batch_size=16))
    (out / "path.txt").write_text(checkpoint.last_model_path)
    torch.save(model.net.state_dict(), out / "trained.pt")


if __name__ == "__main__":
    main()
