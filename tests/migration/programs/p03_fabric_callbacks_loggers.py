# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""Fabric with callbacks= and loggers=: fabric.call(...) reaches every callback, fabric.log/log_dict reach CSV."""

from typing import Any

import torch
from _common import arguments, loader, make_net, regression_data, strategy_for, write_result

import core.lightning as L
from core.lightning.fabric.loggers import CSVLogger


class Recorder:
    """A plain object as a Fabric callback: only the hooks it defines are called."""

    def __init__(self) -> None:
        self.epochs: list[Any] = []
        self.batches = 0

    def on_train_batch_end(self, loss):
        self.batches += 1

    def on_train_epoch_end(self, epoch, mean_loss):
        self.epochs.append((epoch, round(mean_loss, 6)))


def main() -> None:
    out, devices = arguments()
    recorder = Recorder()
    logger = CSVLogger(root_dir=str(out / "logs"), name="fabric")
    fabric = L.Fabric(
        accelerator="cpu", devices=devices, strategy=strategy_for(devices), callbacks=[recorder], loggers=logger
    )
    fabric.launch()
    net = make_net()
    model, optimizer = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.05))
    train_loader = fabric.setup_dataloaders(loader(regression_data(), batch_size=16))
    step = 0
    for epoch in range(2):
        total = 0.0
        for inputs, targets in train_loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            fabric.backward(loss)
            optimizer.step()
            fabric.call("on_train_batch_end", loss=loss)
            fabric.log("train_loss", loss.item(), step=step)
            step += 1
            total += loss.item()
        fabric.log_dict({"epoch_loss": total / len(train_loader), "epoch": epoch}, step=step)
        fabric.call("on_train_epoch_end", epoch=epoch, mean_loss=total / len(train_loader))
        fabric.call("a_hook_no_callback_has")  # ignored, as in Fabric
    fabric.logger.finalize("success")
    if fabric.is_global_zero:
        write_result(
            out,
            {"epochs": recorder.epochs, "batches": recorder.batches, "log_dir": fabric.logger.log_dir,
             "steps": step, "logger_is_first": fabric.logger is fabric.loggers[0]},
        )


if __name__ == "__main__":
    main()
