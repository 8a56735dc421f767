"""FSDP (or DDP, for comparison) on 2 ranks: train, checkpoint, restore, create a model empty.

    python fsdp_job.py MODE OUT        MODE: fsdp-sharded | fsdp-full | fsdp-accumulate | ddp

Every mode trains the same model on the same data for STEPS Adam steps (2 ranks x batch 32; fsdp-accumulate
in two micro-batches of 16 under no_backward_sync, with the shards offloaded to the CPU) and writes
OUT/<mode>-weights.pt (the whole trained weights, from rank 0) and OUT/<mode>-report-<rank>.json. The fsdp
modes also save a checkpoint (sharded directory, or one full file), restore it into the perturbed model,
and (sharded) into a model created with ``init_module(empty_init=True)``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset

import core

STEPS = 20
GLOBAL_BATCH = 64


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(STEPS * GLOBAL_BATCH, 10, generator=generator)
    targets = inputs[:, :3].sum(dim=1, keepdim=True).sin()
    return TensorDataset(inputs, targets)


def architecture() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    )


def model() -> torch.nn.Module:
    torch.manual_seed(1)
    return architecture()


def whole(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Every entry as a whole tensor (a collective for sharded ones: call on every rank)."""
    return {
        name: (value.full_tensor() if isinstance(value, DTensor) else value).detach().cpu().clone()
        for name, value in state.items()
    }


def optimizer_moments(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    state = optimizer.state_dict()["state"]
    return [
        (moment.full_tensor() if isinstance(moment, DTensor) else moment).cpu()
        for index in sorted(state)
        for moment in (state[index]["exp_avg"],)
    ]


def same(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> bool:
    return left.keys() == right.keys() and all(torch.equal(left[name], right[name]) for name in left)


CLIP = 0.45  # the gradient norm is clipped to this before each step: about half of the 20 steps are over it


def train(lite: core.Lite, micro_batches: int) -> tuple[Any, Any, list[Any]]:
    """Train; also the norm ``clip_gradients`` returned before each step (each rank's, with its type's name)."""
    network = model()
    network, optimizer = lite.setup(network, torch.optim.Adam(network.parameters(), lr=1e-2))
    batch = GLOBAL_BATCH // lite.world_size // micro_batches
    loader = lite.setup_dataloaders(DataLoader(dataset(), batch_size=batch))
    norms: list[Any] = []
    for index, (inputs, targets) in enumerate(loader):
        last = index % micro_batches == micro_batches - 1
        with lite.no_backward_sync(network, enabled=not last):
            lite.backward(torch.nn.functional.mse_loss(network(inputs), targets) / micro_batches)
        if last:
            norm = lite.clip_gradients(network, optimizer, max_norm=CLIP)
            assert norm is not None  # clipping by norm returns it
            norms.append((type(norm).__name__, float(norm)))
            optimizer.step()
            optimizer.zero_grad()
    return network, optimizer, norms


def perturb(network: torch.nn.Module) -> None:
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.add_(1.0)


def run(lite: core.Lite, mode: str, out: Path) -> None:
    from core_fsdp import local_elements

    network, optimizer, norms = train(lite, micro_batches=2 if mode == "fsdp-accumulate" else 1)
    trained = whole(network.state_dict())
    moments = optimizer_moments(optimizer)
    report: dict[str, Any] = {
        "clip_norms": norms,
        "local_elements": local_elements(network),
        "total_elements": sum(tensor.numel() for tensor in trained.values()),
        "checkpoint_io": lite.active.config.checkpoint_io,
    }
    if lite.is_global_zero:
        torch.save(trained, out / f"{mode}-weights.pt")
    if mode == "fsdp-sharded":
        lite.save(out / "sharded", {"model": network, "optimizer": optimizer, "step": STEPS})
        perturb(network)
        remainder = lite.load(out / "sharded", {"model": network, "optimizer": optimizer})
        report["restored"] = same(whole(network.state_dict()), trained) and remainder == {"step": STEPS}
        report["moments_restored"] = all(
            torch.equal(left, right) for left, right in zip(optimizer_moments(optimizer), moments, strict=True)
        )
        with lite.init_module(empty_init=True):
            empty = architecture()
        report["created_on_meta"] = all(parameter.is_meta for parameter in empty.parameters())
        empty, empty_optimizer = lite.setup(empty, torch.optim.Adam(empty.parameters(), lr=1e-2))
        report["materialised"] = not any(parameter.is_meta for parameter in empty.parameters())
        report["empty_local_elements"] = local_elements(empty)
        lite.load(out / "sharded", {"model": empty, "optimizer": empty_optimizer}, strict=False)
        report["empty_restored"] = same(whole(empty.state_dict()), trained)
        report["empty_moments_restored"] = all(
            torch.equal(left, right) for left, right in zip(optimizer_moments(empty_optimizer), moments, strict=True)
        )
    elif mode == "fsdp-full":
        lite.save(out / "full.pt", {"model": network, "optimizer": optimizer, "step": STEPS})
        perturb(network)
        lite.load(out / "full.pt", {"model": network, "optimizer": optimizer})
        report["restored"] = same(whole(network.state_dict()), trained)
        report["moments_restored"] = all(
            torch.equal(left, right) for left, right in zip(optimizer_moments(optimizer), moments, strict=True)
        )
    (out / f"{mode}-report-{lite.global_rank}.json").write_text(json.dumps(report))


def strategy(mode: str) -> object:
    if mode == "ddp":
        return "ddp"
    from core_fsdp import FSDPStrategy

    return FSDPStrategy(
        auto_wrap_policy={torch.nn.Linear},
        state_dict_type="full" if mode == "fsdp-full" else "sharded",
        cpu_offload=mode == "fsdp-accumulate",
    )


if __name__ == "__main__":
    mode, out = sys.argv[1], Path(sys.argv[2])
    core.Lite(accelerator="cpu", strategy=strategy(mode), devices=2).launch(run, mode, out)
