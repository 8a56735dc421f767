# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""Timer, LambdaCallback, GradientAccumulationScheduler and ModelSummary together."""

import torch
from _common import arguments, loader, make_net, regression_data, write_result

import core.lightning as L
from core.lightning.pytorch.callbacks import GradientAccumulationScheduler, LambdaCallback, ModelSummary, Timer


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()
        self.example_input_array = torch.zeros(2, 8)

    def forward(self, inputs):
        return self.net(inputs)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self(inputs), targets)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    out, _ = arguments()
    epochs_ended = []
    timer = Timer(duration="00:00:10:00")  # ten minutes: never reached here
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=4, logger=False, enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[
            timer,
            LambdaCallback(on_train_epoch_end=lambda trainer, module: epochs_ended.append(trainer.current_epoch)),
            GradientAccumulationScheduler(scheduling={0: 1, 2: 2}),
            ModelSummary(max_depth=2),
        ],
    )
    model = Regressor()
    trainer.fit(model, train_dataloaders=loader(regression_data(), batch_size=16))
    write_result(
        out,
        {"epochs_ended": epochs_ended, "global_step": trainer.global_step,
         "train_time": timer.time_elapsed("train"), "remaining": timer.time_remaining()},
        model.net.state_dict(),
    )


if __name__ == "__main__":
    main()
