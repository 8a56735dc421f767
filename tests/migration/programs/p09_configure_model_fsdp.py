# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""configure_model: the layers are created inside the hook, so a sharding strategy can create them sharded."""

import sys

import torch
from _common import arguments, loader, regression_data, write_result
from torch.distributed.tensor import DTensor

import core.lightning as L


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net: torch.nn.Module | None = None
        self.configure_model_calls = 0

    def configure_model(self) -> None:
        self.configure_model_calls += 1
        if self.net is not None:  # Lightning calls it again for validate/test after fit: stay idempotent
            return
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.net(inputs), targets)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    out, devices = arguments()
    strategy = sys.argv[3] if len(sys.argv) > 3 else "fsdp"  # the test also runs it under ddp to compare
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy, max_epochs=3, logger=False,
        enable_checkpointing=False, enable_progress_bar=False,
    )
    model = Regressor()
    trainer.fit(model, train_dataloaders=loader(regression_data(), batch_size=32 // devices))
    assert model.net is not None
    # After fit a sharded module stays sharded (as in Lightning): every rank gathers the whole weights.
    weights = {name: value.full_tensor() if isinstance(value, DTensor) else value
               for name, value in model.net.state_dict().items()}
    if trainer.is_global_zero:
        write_result(out, {"configure_model_calls": model.configure_model_calls, "strategy": strategy}, weights)


if __name__ == "__main__":
    main()
