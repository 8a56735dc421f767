# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""A Fabric training loop: launch, setup, setup_dataloaders, backward, all_reduce, print."""

import torch
from _common import arguments, loader, make_net, regression_data, strategy_for, write_result

import core.lightning as L


def main() -> None:
    out, devices = arguments()
    fabric = L.Fabric(accelerator="cpu", devices=devices, strategy=strategy_for(devices))
    fabric.launch()
    model = make_net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = fabric.setup(model, optimizer)
    train_loader = fabric.setup_dataloaders(loader(regression_data(), batch_size=32 // devices))
    losses = []
    for _epoch in range(3):
        for inputs, targets in train_loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            fabric.backward(loss)
            optimizer.step()
            losses.append(fabric.all_reduce(loss.detach(), reduce_op="mean").item())
    fabric.print(f"final loss {losses[-1]:.4f}")
    if fabric.is_global_zero:
        write_result(out, {"losses": losses, "world_size": fabric.world_size}, model.state_dict())


if __name__ == "__main__":
    main()
