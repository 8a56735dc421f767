# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""fast_dev_run=True: one batch of train, val and test, and no checkpoints or logs written."""

import torch
from _common import arguments, loader, make_net, regression_data, write_result

import core.lightning as L


class Counting(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()
        self.seen = {"train": 0, "val": 0, "test": 0}

    def training_step(self, batch, batch_idx):
        self.seen["train"] += 1
        inputs, targets = batch
        loss = torch.nn.functional.mse_loss(self.net(inputs), targets)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.seen["val"] += 1

    def test_step(self, batch, batch_idx):
        self.seen["test"] += 1

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    out, _ = arguments()
    trainer = L.Trainer(accelerator="cpu", devices=1, fast_dev_run=True, default_root_dir=out, max_epochs=5)
    model = Counting()
    data = loader(regression_data(), batch_size=8)
    trainer.fit(model, train_dataloaders=data, val_dataloaders=data)
    trainer.test(model, dataloaders=data)
    write_result(out, {"seen": model.seen, "global_step": trainer.global_step,
                       "files": sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())})


if __name__ == "__main__":
    main()
