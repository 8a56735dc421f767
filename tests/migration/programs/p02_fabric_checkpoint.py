# mypy: allow-untyped-defs
# (written as Lightning users write their scripts: untyped; the migration suite runs them unchanged)
"""Fabric checkpoints: save a state mid-run, load it into fresh objects, continue; load_raw of plain weights."""

import torch
from _common import arguments, loader, make_net, regression_data, strategy_for, write_result

import core.lightning as L


def train(fabric, model, optimizer, train_loader, epochs):
    for _ in range(epochs):
        for inputs, targets in train_loader:
            optimizer.zero_grad()
            fabric.backward(torch.nn.functional.mse_loss(model(inputs), targets))
            optimizer.step()


def main() -> None:
    out, devices = arguments()
    fabric = L.Fabric(accelerator="cpu", devices=devices, strategy=strategy_for(devices))
    fabric.launch()
    train_loader = fabric.setup_dataloaders(loader(regression_data(), batch_size=16))

    net = make_net()
    model, optimizer = fabric.setup(net, torch.optim.Adam(net.parameters(), lr=0.01))
    train(fabric, model, optimizer, train_loader, epochs=2)
    fabric.save(out / "checkpoint.ckpt", {"model": model, "optimizer": optimizer, "epoch": 2, "note": "mid-run"})

    fresh = make_net(seed=123)  # different initial weights: everything must come from the checkpoint
    model2, optimizer2 = fabric.setup(fresh, torch.optim.Adam(fresh.parameters(), lr=0.01))
    restored = {"model": model2, "optimizer": optimizer2, "epoch": 0}
    remainder = fabric.load(out / "checkpoint.ckpt", restored)
    train(fabric, model2, optimizer2, train_loader, epochs=1)

    # load_raw: a plain state_dict file (for example exported for inference) into a plain module.
    if fabric.is_global_zero:
        torch.save(model2.state_dict(), out / "exported.pt")
    fabric.barrier()
    plain = make_net(seed=7)
    fabric.load_raw(out / "exported.pt", plain)
    if fabric.is_global_zero:
        pairs = zip(plain.state_dict().values(), model2.state_dict().values(), strict=True)
        same = all(torch.equal(a, b) for a, b in pairs)
        write_result(
            out, {"epoch": restored["epoch"], "remainder": remainder, "load_raw_equal": same}, model2.state_dict()
        )


if __name__ == "__main__":
    main()
