# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""A torch.compile'd model under Fabric: it trains, and its checkpoint loads into the plain model."""

import torch
from _common import arguments, loader, make_net, regression_data, strategy_for, write_result

import core.lightning as L


def main() -> None:
    out, devices = arguments()
    fabric = L.Fabric(accelerator="cpu", devices=devices, strategy=strategy_for(devices))
    fabric.launch()
    net = make_net()
    compiled = torch.compile(net)
    # torch.compile is typed as returning a plain Callable (the same line fails mypy under Lightning).
    model, optimizer = fabric.setup(compiled, torch.optim.SGD(net.parameters(), lr=0.05))  # type: ignore[call-overload]
    train_loader = fabric.setup_dataloaders(loader(regression_data(), batch_size=16))
    for inputs, targets in train_loader:
        optimizer.zero_grad()
        fabric.backward(torch.nn.functional.mse_loss(model(inputs), targets))
        optimizer.step()
    fabric.save(out / "compiled.ckpt", {"model": model})
    plain = make_net(seed=99)
    fabric.load(out / "compiled.ckpt", {"model": plain})
    if fabric.is_global_zero:
        keys = list(torch.load(out / "compiled.ckpt", weights_only=True)["model"])
        write_result(out, {"checkpoint_keys": keys}, plain.state_dict())


if __name__ == "__main__":
    main()
