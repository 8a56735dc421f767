"""Train a small MLP on scikit-learn's bundled 8x8 digits with `core.Lite`; no download at run time.

    python examples/digits.py                                   # CPU, one process
    python examples/digits.py --precision bf16-true --epochs 30
    python examples/digits.py --strategy ddp --devices 2        # needs core-ddp

Every hardware flag goes straight to `Lite`; the loop below is plain PyTorch plus the five Lite changes.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits  # type: ignore[import-untyped]
from sklearn.model_selection import train_test_split  # type: ignore[import-untyped]
from torch.utils.data import DataLoader, TensorDataset

import core


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--devices", default="auto")
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--min-accuracy", type=float, default=0.95, help="exit with status 1 below this")
    return parser.parse_args(argv)


def digits_datasets(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """1797 images of 8x8 pixels (0..16), 80% to train and 20% (360 images) to test, stratified."""
    images, labels = load_digits(return_X_y=True)
    train_x, test_x, train_y, test_y = train_test_split(
        images / 16.0, labels, test_size=360, random_state=seed, stratify=labels
    )

    def as_dataset(x: object, y: object) -> TensorDataset:
        return TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long))

    return as_dataset(train_x, train_y), as_dataset(test_x, test_y)


def evaluate(lite: core.Lite, model: torch.nn.Module, loader: DataLoader) -> float:
    """Accuracy over the whole test set: each rank counts its share, then the counts are summed."""
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            correct += int((model(images).argmax(dim=1) == labels).sum())
            total += len(labels)
    counts = lite.all_reduce(torch.tensor([correct, total], device=lite.device), reduce_op="sum")
    model.train()
    return float(counts[0] / counts[1])


def train(lite: core.Lite, args: argparse.Namespace) -> float:
    lite.print(f"Resolved active set:\n{lite.active.config.summary()}")
    lite.seed_everything(args.seed)
    train_set, test_set = digits_datasets(args.seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model, optimizer = lite.setup(model, optimizer)
    train_loader, test_loader = lite.setup_dataloaders(
        DataLoader(train_set, batch_size=args.batch_size, shuffle=True), DataLoader(test_set, batch_size=256)
    )
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        losses = []
        for images, labels in train_loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            lite.backward(loss)
            optimizer.step()
            losses.append(loss.detach())
        accuracy = evaluate(lite, model, test_loader)
        train_loss = float(lite.all_reduce(torch.stack(losses).float().mean()))
        lite.print(f"epoch {epoch:3d}/{args.epochs}  train loss {train_loss:.4f}  test accuracy {accuracy:.4f}")
    lite.print(f"test accuracy: {accuracy:.4f}")
    return accuracy


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lite = core.Lite(
        accelerator=args.accelerator,
        strategy=args.strategy,
        devices=args.devices,
        num_nodes=args.num_nodes,
        precision=args.precision,
    )
    accuracy = lite.launch(train, args)
    if accuracy is not None and accuracy < args.min_accuracy:
        print(f"test accuracy {accuracy:.4f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
