"""``lightning.pytorch.demos.boring_classes``: random data sets and the small models bug reports are built on.

Same names, sizes and losses as Lightning 2.6: ``BoringModel`` is a ``Linear(32, 2)`` pulled towards ones by
mean squared error, trained with SGD (lr 0.1) and a StepLR, on ``RandomDataset(32, 64)`` loaders.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from core.module import DataModule, Module

__all__ = [
    "BoringDataModule",
    "BoringDataModuleNoLen",
    "BoringModel",
    "DemoModel",
    "IterableBoringDataModule",
    "ManualOptimBoringModel",
    "Net",
    "RandomDataset",
    "RandomDictDataset",
    "RandomIterableDataset",
    "RandomIterableDatasetWithLen",
]


class RandomDataset(Dataset[Tensor]):
    """``length`` random vectors of ``size`` (drawn once, from torch's global generator)."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomDictDataset(RandomDataset):
    """Like :class:`RandomDataset`, each item a dict ``{"a": x, "b": x + 2}``."""

    def __getitem__(self, index: int) -> dict[str, Tensor]:  # type: ignore[override]
        a = self.data[index]
        return {"a": a, "b": a + 2}


class RandomIterableDataset(IterableDataset[Tensor]):
    """``count`` fresh random vectors of ``size`` per iteration, without a length."""

    def __init__(self, size: int, count: int) -> None:
        self.count = count
        self.size = size

    def __iter__(self) -> Iterator[Tensor]:
        for _ in range(self.count):
            yield torch.randn(self.size)


class RandomIterableDatasetWithLen(RandomIterableDataset):
    """:class:`RandomIterableDataset` that also reports its length."""

    def __len__(self) -> int:
        return self.count


class BoringModel(Module):
    """The smallest complete module: subclass it and change the one hook a report is about."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)

    def loss(self, preds: Tensor, labels: Tensor | None = None) -> Tensor:
        return F.mse_loss(preds, torch.ones_like(preds) if labels is None else labels)

    def step(self, batch: Any) -> Tensor:
        return self.loss(self(batch))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": self.step(batch)}

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        return {"x": self.step(batch)}

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    def train_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(RandomDataset(32, 64))


class ManualOptimBoringModel(BoringModel):
    """:class:`BoringModel` with manual optimization: ``training_step`` steps its optimizer itself."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        optimizer = self.optimizers()
        loss = self.step(batch)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss


class BoringDataModule(DataModule):
    """256 random vectors of 32, split 64 each into train, val, test and predict (batch size 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.random_train = Subset(self.random_full, indices=range(64))
        if stage in ("fit", "validate"):
            self.random_val = Subset(self.random_full, indices=range(64, 128))
        if stage == "test":
            self.random_test = Subset(self.random_full, indices=range(128, 192))
        if stage == "predict":
            self.random_predict = Subset(self.random_full, indices=range(192, 256))

    def train_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_predict)


class BoringDataModuleNoLen(DataModule):
    """Random vectors of 32 from iterable data sets without a length (512/128/256/64 per stage)."""

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.random_train = RandomIterableDataset(32, 512)
        if stage in ("fit", "validate"):
            self.random_val = RandomIterableDataset(32, 128)
        if stage == "test":
            self.random_test = RandomIterableDataset(32, 256)
        if stage == "predict":
            self.random_predict = RandomIterableDataset(32, 64)

    def train_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader[Tensor]:
        return DataLoader(self.random_predict)


class IterableBoringDataModule(DataModule):
    """Each stage returns a list of two loaders: one over a map-style, one over an iterable data set (size 4)."""

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.train_datasets = [RandomDataset(4, 16), RandomIterableDataset(4, 16)]
        if stage in ("fit", "validate"):
            self.val_datasets = [RandomDataset(4, 32), RandomIterableDataset(4, 32)]
        if stage == "test":
            self.test_datasets = [RandomDataset(4, 64), RandomIterableDataset(4, 64)]
        if stage == "predict":
            self.predict_datasets = [RandomDataset(4, 128), RandomIterableDataset(4, 128)]

    def train_dataloader(self) -> Any:
        return [DataLoader(d) for d in self.train_datasets]

    def val_dataloader(self) -> Any:
        return [DataLoader(d) for d in self.val_datasets]

    def test_dataloader(self) -> Any:
        return [DataLoader(d) for d in self.test_datasets]

    def predict_dataloader(self) -> Any:
        return [DataLoader(d) for d in self.predict_datasets]


class DemoModel(Module):
    """``Linear(32, out_dim)`` with a ReLU; its training loss is the sum of the outputs (Adam, lr ``learning_rate``)."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: Any, batch_nb: int) -> Any:
        return self(batch).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class Net(nn.Module):
    """The convolutional MNIST classifier of PyTorch's examples: 1x28x28 images in, 10 log-probabilities out."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = self.dropout2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)
