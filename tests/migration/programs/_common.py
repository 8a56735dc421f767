"""Data, networks and the result protocol shared by the migration programs and their tests.

Each program is a Lightning 2.x script with one change: ``import core.lightning as L``. It is run as
``python program.py OUT_DIR DEVICES`` and global rank 0 writes ``OUT_DIR/result.json`` (and sometimes
``OUT_DIR/weights.pt``) for the test to compare with a plain PyTorch run of the same computation.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset


def arguments() -> tuple[Path, int]:
    """``OUT_DIR`` and ``DEVICES`` from the command line."""
    out = Path(sys.argv[1])
    devices = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    out.mkdir(parents=True, exist_ok=True)
    return out, devices


def strategy_for(devices: int) -> str:
    return "ddp" if devices > 1 else "auto"


def regression_data(samples: int = 64, features: int = 8, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, features, generator=generator)
    weights = torch.randn(features, 1, generator=generator)
    targets = inputs @ weights + 0.1 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(inputs, targets)


def classification_data(samples: int = 64, features: int = 8, classes: int = 3, seed: int = 1) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, features, generator=generator)
    labels = (inputs[:, :classes].argmax(dim=1) + (inputs[:, -1] > 1.5).long()) % classes
    return TensorDataset(inputs, labels)


def loader(dataset: TensorDataset, batch_size: int) -> DataLoader:
    """In order, no shuffling: the batches a rank sees are known exactly."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=False)


def make_net(features: int = 8, hidden: int = 16, outputs: int = 1, seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, outputs))


def write_result(out: Path, result: dict[str, Any], weights: dict[str, torch.Tensor] | None = None) -> None:
    """Global rank 0 only (the caller checks): the result as JSON, the weights as a torch file."""
    if weights is not None:
        torch.save({name: tensor.detach().cpu().clone() for name, tensor in weights.items()}, out / "weights.pt")
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))
