"""An offline stand-in for the few torchvision pieces the corpus programs use (torchvision is not installed here).

A program keeps its code and changes only its import lines (``import torchvision.transforms as T`` becomes
``from _offline_vision import transforms as T``, see README.md). ``datasets.MNIST`` has MNIST's sizes (60 000 training
and 10 000 test images of 28x28 pixels, labels 0-9) and downloads nothing: image ``i`` is its label's fixed pattern
plus noise, drawn from a generator seeded with ``i``, so the data is the same in every process and a classifier or
an autoencoder can learn it. Images are uint8 tensors (H, W), as PIL images are before ``ToTensor``.
"""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["datasets", "transforms", "utils"]

_SIDE = 28
_CLASSES = 10


def _templates() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1234)
    return torch.rand(_CLASSES, _SIDE, _SIDE, generator=generator) * 200


_TEMPLATES = _templates()


class MNIST(torch.utils.data.Dataset[tuple[Any, int]]):
    """``torchvision.datasets.MNIST(root, train=True, transform=None, target_transform=None, download=False)``."""

    def __init__(self, root: Any, train: bool = True, transform: Callable[[Any], Any] | None = None,
                 target_transform: Callable[[int], Any] | None = None, download: bool = False) -> None:
        self.root = root
        self.train = train
        self.transform = transform
        self.target_transform = target_transform
        self.offset = 0 if train else 60_000

    def __len__(self) -> int:
        return 60_000 if self.train else 10_000

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        index = int(index)  # a numpy integer from a sampler over an index array, as torchvision accepts
        if not 0 <= index < len(self):
            raise IndexError(index)
        label = index % _CLASSES
        generator = torch.Generator().manual_seed(self.offset + index)
        noise = torch.rand(_SIDE, _SIDE, generator=generator) * 55
        image: Any = (_TEMPLATES[label] + noise).to(torch.uint8)
        target: Any = label
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


class ToTensor:
    """uint8 (H, W) -> float (1, H, W) in [0, 1], as torchvision's ``ToTensor`` does for a greyscale image."""

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return image.to(torch.float32).div(255).unsqueeze(0)


class Normalize:
    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        return (tensor - self.mean) / self.std


class Compose:
    def __init__(self, steps: Sequence[Callable[[Any], Any]]) -> None:
        self.steps = list(steps)

    def __call__(self, value: Any) -> Any:
        for step in self.steps:
            value = step(value)
        return value


def make_grid(images: torch.Tensor, nrow: int = 8, padding: int = 2) -> torch.Tensor:
    """``torchvision.utils.make_grid`` for a batch (B, C, H, W): the images tiled ``nrow`` to a row."""
    count, channels, height, width = images.shape
    rows = math.ceil(count / nrow)
    grid = torch.zeros(channels, rows * (height + padding) + padding, nrow * (width + padding) + padding)
    for index in range(count):
        row, column = divmod(index, nrow)
        top, left = padding + row * (height + padding), padding + column * (width + padding)
        grid[:, top:top + height, left:left + width] = images[index]
    return grid


def _submodule(name: str, **members: Any) -> types.ModuleType:
    """``_offline_vision.<name>`` as a module of its own, so ``from _offline_vision.transforms import ToTensor`` works
    as ``from torchvision.transforms import ToTensor`` does."""
    module = types.ModuleType(f"{__name__}.{name}")
    module.__dict__.update(members)
    sys.modules[module.__name__] = module
    return module


datasets = _submodule("datasets", MNIST=MNIST)
transforms = _submodule("transforms", ToTensor=ToTensor, Normalize=Normalize, Compose=Compose)
utils = _submodule("utils", make_grid=make_grid)

