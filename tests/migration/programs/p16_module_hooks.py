# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""Batch-transfer hooks, an overridden optimizer_step (LR warm-up), configure_gradient_clipping, freeze."""

from typing import Any

import torch
from _common import arguments, loader, make_net, regression_data, write_result

import core.lightning as L


class Hooked(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()
        self.calls: list[Any] = []

    def on_before_batch_transfer(self, batch, dataloader_idx):
        self.calls.append("before")
        inputs, targets = batch
        return inputs * 2, targets  # augmentation on the CPU side

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        self.calls.append("transfer")
        return [tensor.to(device) for tensor in batch]

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.calls.append("after")
        inputs, targets = batch
        return inputs / 2, targets

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.net(inputs), targets)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.calls.append(f"clip:{gradient_clip_val}:{gradient_clip_algorithm}")
        # Lightning's recipe: pass the Trainer's values on (other values than the Trainer's are refused, as there)
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        # Linear warm-up over the first 4 steps, the recipe from Lightning's docs.
        scale = min(1.0, float(self.trainer.global_step + 1) / 4.0)
        for group in optimizer.param_groups:
            group["lr"] = scale * 0.1
        optimizer.step(closure=optimizer_closure)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    out, _ = arguments()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, gradient_clip_val=0.25, gradient_clip_algorithm="value")
    model = Hooked()
    trainer.fit(model, train_dataloaders=loader(regression_data(), batch_size=16))
    model.freeze()
    frozen = {"requires_grad": any(p.requires_grad for p in model.parameters()), "training": model.training}
    model.unfreeze()
    unfrozen = {"requires_grad": all(p.requires_grad for p in model.parameters()), "training": model.training}
    write_result(out, {"calls": model.calls, "frozen": frozen, "unfrozen": unfrozen}, model.net.state_dict())


if __name__ == "__main__":
    main()
