"""``lightning.pytorch.demos.mnist_datamodule``: ``MNIST`` and ``MNISTDataModule``, synthetic and offline.

Lightning downloads MNIST. Here nothing is downloaded: :func:`MNIST` returns a synthetic data set of the same
shapes and sizes (60,000 training and 10,000 test items of a 1x28x28 float image and an int label in 0..9).
Each class is a fixed random pattern of strokes; an item is its class's pattern plus noise drawn from a
generator seeded by the item's index, so the data are the same on every run and rank, take no memory up
front, and a classifier learns them quickly. Torchvision transforms are not applied (items are tensors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, random_split

from core.module import DataModule

__all__ = ["MNIST", "MNISTDataModule"]

_DATASETS_PATH = "./data"


class _SyntheticMNIST(Dataset[tuple[Tensor, int]]):
    def __init__(self, root: str = _DATASETS_PATH, train: bool = True,
                 normalize: tuple[float, float] | None = (0.1307, 0.3081), download: bool = True,
                 **kwargs: Any) -> None:
        self.root = root
        self.train = train
        self.normalize = normalize
        generator = torch.Generator().manual_seed(1234)
        self.patterns = (torch.rand(10, 28, 28, generator=generator) > 0.8).float()
        self._length = 60_000 if train else 10_000
        self._offset = 0 if train else 60_000

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        if not 0 <= index < self._length:
            raise IndexError(f"index {index} out of range for {self._length} items")
        generator = torch.Generator().manual_seed(self._offset + index)
        label = int(torch.randint(10, (1,), generator=generator))
        image = (self.patterns[label] + 0.3 * torch.rand(28, 28, generator=generator)).clamp(0, 1).unsqueeze(0)
        if self.normalize is not None and len(self.normalize) == 2:
            image = (image - self.normalize[0]) / self.normalize[1]
        return image, label


def MNIST(*args: Any, **kwargs: Any) -> Dataset[tuple[Tensor, int]]:
    """``MNIST(root, train=True, normalize=(0.1307, 0.3081), download=True)``: the synthetic set (module docstring)."""
    return _SyntheticMNIST(*args, **kwargs)


class MNISTDataModule(DataModule):
    """Train/val split of the (synthetic) MNIST training set, and its test set; Lightning's arguments."""

    name = "mnist"

    def __init__(self, data_dir: str = _DATASETS_PATH, val_split: int = 5000, num_workers: int = 16,
                 normalize: bool = False, seed: int = 42, batch_size: int = 32) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.val_split = val_split
        self.num_workers = num_workers
        self.normalize = normalize
        self.seed = seed
        self.batch_size = batch_size

    @property
    def num_classes(self) -> int:
        return 10

    @property
    def default_transforms(self) -> Callable[..., Any] | None:
        return None

    def prepare_data(self) -> None:
        MNIST(self.data_dir, train=True, download=True)
        MNIST(self.data_dir, train=False, download=True)

    def setup(self, stage: str) -> None:
        dataset = MNIST(self.data_dir, train=True, download=False, normalize=(0.5, 0.5) if self.normalize else None)
        length = len(dataset)  # type: ignore[arg-type]
        self.dataset_train, self.dataset_val = random_split(
            dataset, [length - self.val_split, self.val_split], generator=torch.Generator().manual_seed(42)
        )

    def _loader(self, dataset: Dataset[Any], shuffle: bool) -> DataLoader[Any]:
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers,
                          drop_last=True)

    def train_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.dataset_train, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.dataset_val, shuffle=False)

    def test_dataloader(self) -> DataLoader[Any]:
        dataset = MNIST(self.data_dir, train=False, download=False, normalize=(0.5, 0.5) if self.normalize else None)
        return self._loader(dataset, shuffle=False)
