"""``python compiled_train.py OUT STRATEGY {eager,compiled}``: a tiny MLP trained 6 steps under Lite.

With ``compiled`` the model is passed through ``torch.compile`` before ``lite.setup``. Global rank 0 writes
OUT/result.pt: the full trained weights, the keys ``model.state_dict()`` (what ``lite.save`` writes) has, and
the weights read back from the checkpoint into a plain, uncompiled model.
"""

import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from core import Lite


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def main(lite: Lite, out: Path, compiled: bool) -> None:
    model = torch.compile(net()) if compiled else net()
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(96, 8, generator=generator)
    loader = lite.setup_dataloaders(DataLoader(TensorDataset(inputs, inputs.sum(1, keepdim=True).sin()),
                                               batch_size=16 // lite.world_size))
    for features, targets in loader:
        optimizer.zero_grad()
        lite.backward(torch.nn.functional.mse_loss(model(features), targets))
        optimizer.step()
    weights = {name: full(value).detach().cpu() for name, value in model.state_dict().items()}
    lite.save(out / "checkpoint", {"model": model})
    plain = net()
    restored = lite.setup(plain)
    lite.load(out / "checkpoint", {"model": restored})
    reloaded = {name: full(value).detach().cpu() for name, value in restored.state_dict().items()}
    if lite.is_global_zero:
        torch.save({"weights": weights, "keys": list(model.state_dict()), "reloaded": reloaded}, out / "result.pt")


if __name__ == "__main__":
    out, strategy, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    devices = 1 if strategy == "single_device" else 2
    Lite(accelerator="cpu", strategy=strategy, devices=devices).launch(main, out, mode == "compiled")
