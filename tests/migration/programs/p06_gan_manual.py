# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""Manual optimization with two optimizers (GAN style): toggle_optimizer, manual_backward, optimizers()."""

import torch
from _common import arguments, loader, make_net, regression_data, strategy_for, write_result

import core.lightning as L


class TwoPlayer(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator = make_net(seed=1)
        self.critic = make_net(features=1, hidden=8, seed=2)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        opt_g, opt_c = self.optimizers()

        self.toggle_optimizer(opt_c)  # only the critic's parameters get gradients
        fake = self.generator(inputs).detach()
        critic_loss = self.critic(fake).mean() - self.critic(targets).mean()
        opt_c.zero_grad()
        self.manual_backward(critic_loss)
        opt_c.step()
        self.untoggle_optimizer(opt_c)

        self.toggle_optimizer(opt_g)
        generator_loss = -self.critic(self.generator(inputs)).mean() + torch.nn.functional.mse_loss(
            self.generator(inputs), targets
        )
        opt_g.zero_grad()
        self.manual_backward(generator_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)
        self.log_dict({"critic_loss": critic_loss, "generator_loss": generator_loss})

    def configure_optimizers(self):
        return [
            torch.optim.SGD(self.generator.parameters(), lr=0.01),
            torch.optim.SGD(self.critic.parameters(), lr=0.01),
        ]


def main() -> None:
    out, devices = arguments()
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy_for(devices), max_epochs=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False,
    )
    model = TwoPlayer()
    trainer.fit(model, train_dataloaders=loader(regression_data(), batch_size=16))
    if trainer.is_global_zero:
        state = {f"generator.{k}": v for k, v in model.generator.state_dict().items()}
        state.update({f"critic.{k}": v for k, v in model.critic.state_dict().items()})
        write_result(out, {"global_step": trainer.global_step}, state)


if __name__ == "__main__":
    main()
