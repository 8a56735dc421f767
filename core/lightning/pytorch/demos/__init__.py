"""``lightning.pytorch.demos``: Lightning's demo models and data sets, over core's Module and DataModule.

The names, signatures and behaviour follow Lightning 2.6 (``lightning/pytorch/demos/``); the data sets work
offline: :class:`WikiText2` reads ``data_dir/wikitext-2.txt`` when it is there and otherwise builds a
synthetic corpus in memory (no download), and ``MNIST`` is synthetic (see ``mnist_datamodule``).
"""

from __future__ import annotations

from core.lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel, DemoModel
from core.lightning.pytorch.demos.lstm import LightningLSTM, SequenceSampler, SimpleLSTM
from core.lightning.pytorch.demos.transformer import LightningTransformer, Transformer, WikiText2

__all__ = [
    "BoringDataModule",
    "BoringModel",
    "DemoModel",
    "LightningLSTM",
    "LightningTransformer",
    "SequenceSampler",
    "SimpleLSTM",
    "Transformer",
    "WikiText2",
]
