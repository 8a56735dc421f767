"""An offline stand-in for the few torchvision pieces the corpus programs use (torchvision is not installed here).

A program keeps its code and changes only its import lines (``import torchvision.transforms as T`` becomes
``from _offline_vision import transforms as T``, see README.md). ``datasets.MNIST`` has MNIST's sizes (60 000 training
and 10 000 test images of 28x28 pixels, labels 0-9) and downloads nothing: image ``i`` is its label's fixed pattern
plus noise, drawn from a generator seeded with ``i``, so the data is the same in every process and a classifier or
an autoencoder can learn it. Images are uint8 tensors (H, W), as PIL images are before ``ToTensor``.
"""

from __future__ import annotations

import math
import struct
import sys
import types
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["_TORCHVISION_AVAILABLE", "datasets", "transforms", "utils"]

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


def make_grid(tensor: torch.Tensor, nrow: int = 8, padding: int = 2, normalize: bool = False,
              value_range: tuple[float, float] | None = None, scale_each: bool = False,
              pad_value: float = 0.0) -> torch.Tensor:
    """``torchvision.utils.make_grid`` for a batch (B, C, H, W): the images tiled ``nrow`` to a row, with
    ``normalize`` shifting them into [0, 1] (by ``value_range``, or their own min and max)."""
    images = tensor.detach().clone().float()
    if normalize:
        parts = list(images) if scale_each else [images]
        for part in parts:
            low, high = value_range if value_range is not None else (float(part.min()), float(part.max()))
            part.clamp_(min=low, max=high).sub_(low).div_(max(high - low, 1e-5))
    count, channels, height, width = images.shape
    columns = min(nrow, count)
    rows = math.ceil(count / columns)
    grid = torch.full((channels, rows * (height + padding) + padding, columns * (width + padding) + padding),
                      float(pad_value))
    for index in range(count):
        row, column = divmod(index, columns)
        top, left = padding + row * (height + padding), padding + column * (width + padding)
        grid[:, top:top + height, left:left + width] = images[index]
    return grid


def save_image(tensor: torch.Tensor, fp: Any, **grid_options: Any) -> None:
    """``torchvision.utils.save_image``: the grid of ``tensor`` as a greyscale PNG file (values in [0, 1])."""
    grid = make_grid(tensor, **grid_options) if tensor.dim() == 4 else tensor
    pixels = grid[0].mul(255).add(0.5).clamp(0, 255).to(torch.uint8)
    height, width = pixels.shape
    raw = b"".join(b"\x00" + bytes(row.tolist()) for row in pixels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    with open(fp, "wb") as file:
        file.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) +
                   chunk(b"IEND", b""))


#: What ``lightning.pytorch.utilities.imports._TORCHVISION_AVAILABLE`` answers where torchvision is installed: a
#: program that guards its torchvision code with it imports this flag from here, with the stand-in.
_TORCHVISION_AVAILABLE = True


def _submodule(name: str, **members: Any) -> types.ModuleType:
    """``_offline_vision.<name>`` as a module of its own, so ``from _offline_vision.transforms import ToTensor`` works
    as ``from torchvision.transforms import ToTensor`` does."""
    module = types.ModuleType(f"{__name__}.{name}")
    module.__dict__.update(members)
    sys.modules[module.__name__] = module
    return module


datasets = _submodule("datasets", MNIST=MNIST)
transforms = _submodule("transforms", ToTensor=ToTensor, Normalize=Normalize, Compose=Compose)
utils = _submodule("utils", make_grid=make_grid, save_image=save_image)

