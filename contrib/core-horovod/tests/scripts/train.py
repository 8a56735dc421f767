"""Trained by tests/test_horovod_run.py under horovodrun (strategy 'horovod') and alone (the reference).

``python train.py OUT STRATEGY [ACCUMULATE]``: 2 ranks x batch 32 (or 1 process x batch 64) on the same
64 samples per step; global rank 0 writes the final weights and every rank its own sockets.
"""

import json
import sys
from pathlib import Path
from typing import Any

import psutil
import torch
from torch.utils.data import DataLoader, TensorDataset

from core import Lite


def data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(256, 16, generator=generator)
    return TensorDataset(inputs, inputs @ torch.randn(16, 1, generator=generator))


def sockets() -> list[list[str]]:
    found = []
    for process in [psutil.Process(), *psutil.Process().parent().children(recursive=True)]:
        try:
            connections = process.net_connections(kind="inet")
        except psutil.Error:
            continue
        for connection in connections:
            local = connection.laddr.ip if connection.laddr else ""
            found.append([local, connection.raddr.ip if connection.raddr else ""])
    return found


def main(lite: Lite, out: Path, accumulate: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    batch = 64 // lite.world_size // accumulate
    loader = lite.setup_dataloaders(DataLoader(data(), batch_size=batch, shuffle=False))
    losses = []
    for _ in range(3):
        for index, (inputs, targets) in enumerate(loader):
            last = (index + 1) % accumulate == 0
            with lite.no_backward_sync(model, enabled=not last):
                loss = torch.nn.functional.mse_loss(model(inputs), targets) / accumulate
                lite.backward(loss)
            if last:
                optimizer.step()
                optimizer.zero_grad()
            losses.append(lite.all_reduce(loss.detach(), reduce_op="mean").item())
    gathered = lite.all_gather(torch.tensor([float(lite.global_rank)]))
    payload = lite.broadcast({"from": lite.global_rank}, src=lite.world_size - 1)
    lite.save(out / "checkpoint.ckpt", {"model": model})
    lite.barrier()
    (out / f"sockets-{lite.global_rank}.json").write_text(json.dumps(sockets()))
    if lite.is_global_zero:
        state = {name: tensor.tolist() for name, tensor in model.state_dict().items()}
        report = {
            "world_size": lite.world_size, "strategy": lite.active.config.strategy,
            "environment": lite.active.config.environment, "losses": losses, "state": state,
            "gathered": gathered.tolist(), "broadcast": payload,
        }
        (out / "result.json").write_text(json.dumps(report))


if __name__ == "__main__":
    out, strategy = Path(sys.argv[1]), sys.argv[2]
    accumulate = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    options: dict[str, Any] = {"strategy": strategy}
    if strategy == "horovod" and accumulate > 1:
        from core_horovod import HorovodStrategy

        options["strategy"] = HorovodStrategy(backward_passes_per_step=accumulate)
    Lite(accelerator="cpu", **options).launch(main, out, accumulate)
