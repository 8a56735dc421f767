"""Synthetic text and a litgpt DataModule over it, for tests/test_litgpt.py (no litdata, no download)."""

from dataclasses import dataclass
from typing import Any

import torch
from litgpt.data import DataModule
from torch.utils.data import DataLoader, Dataset

WORDS = "the cat sat on a mat and the dog ran to the red ball while birds sang in green trees".split()  # noqa: SIM905


def corpus(lines: int = 400) -> str:
    """Seeded lines of 12 words each."""
    generator = torch.Generator().manual_seed(0)
    draws = torch.randint(len(WORDS), (lines, 12), generator=generator)
    return "\n".join(" ".join(WORDS[int(index)] for index in row) for row in draws)


class _Blocks(Dataset[torch.Tensor]):
    def __init__(self, ids: torch.Tensor, block: int) -> None:
        self.ids, self.block = ids, block

    def __len__(self) -> int:
        return (len(self.ids) - 1) // self.block

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.ids[index * self.block:(index + 1) * self.block + 1]


class StatefulLoader(DataLoader[torch.Tensor]):
    """A DataLoader with state_dict/load_state_dict, as litdata's StreamingDataLoader (what litgpt saves)."""

    def state_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@dataclass
class SyntheticText(DataModule):
    """``--data synth_data.SyntheticText``: 90 % of the corpus to train on, 10 % to validate."""

    def connect(self, tokenizer: Any = None, batch_size: int = 1, max_seq_length: int = -1) -> None:
        self.tokenizer, self.batch_size, self.block = tokenizer, batch_size, max_seq_length

    def setup(self, stage: str = "") -> None:
        ids = self.tokenizer.encode(corpus(), bos=False, eos=False)
        cut = int(len(ids) * 0.9)
        self.train, self.val = _Blocks(ids[:cut], self.block), _Blocks(ids[cut:], self.block)

    def train_dataloader(self) -> DataLoader[torch.Tensor]:
        return StatefulLoader(self.train, batch_size=self.batch_size)

    def val_dataloader(self) -> DataLoader[torch.Tensor]:
        return DataLoader(self.val, batch_size=self.batch_size)
