"""``lightning.pytorch.demos.transformer``: a small ``nn.Transformer`` language model and WikiText2.

Offline: Lightning's ``WikiText2`` downloads the text of PyTorch's word-language-model example. This one never
downloads: it reads ``data_dir/wikitext-2.txt`` when that file exists (put the real text there to train on it),
and otherwise builds a synthetic corpus in memory: about 60,000 words of sentences drawn from a fixed
first-order Markov chain over 500 words (seeded, the same every time), so next-word prediction is learnable
and the loss falls as it does on the real text. Item shapes and the tokenisation (one ``<eos>`` per line)
are Lightning's.
"""

from __future__ import annotations

import math
import os
import random
from pathlib import Path
from typing import Final

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from core.module import Module

__all__ = ["Dictionary", "LightningTransformer", "PositionalEncoding", "Transformer", "WikiText2", "tokenize"]


class Transformer(nn.Module):
    """Embedding, positional encoding, ``nn.Transformer`` (batch first) and a decoder to log-probabilities.

    ``forward(inputs, target)`` takes two ``(batch, time)`` token tensors and returns ``(batch * time, vocab)``
    log-probabilities, with a causal mask on the target.
    """

    def __init__(self, vocab_size: int = 33278, ninp: int = 200, nhead: int = 2, nhid: int = 200, nlayers: int = 2,
                 dropout: float = 0.2) -> None:
        super().__init__()
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.transformer = nn.Transformer(d_model=ninp, nhead=nhead, num_encoder_layers=nlayers,
                                          num_decoder_layers=nlayers, dim_feedforward=nhid, dropout=dropout,
                                          batch_first=True)
        self.decoder = nn.Linear(ninp, vocab_size)
        self.ninp = ninp
        self.vocab_size = vocab_size
        self.src_mask: Tensor | None = None

    def generate_square_subsequent_mask(self, size: int) -> Tensor:
        """A ``size`` x ``size`` mask: ``-inf`` above the diagonal (future positions), 0 elsewhere."""
        return torch.triu(torch.full((size, size), float("-inf")), diagonal=1)

    def forward(self, inputs: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
        length = inputs.shape[1]
        if self.src_mask is None or self.src_mask.size(0) != length:
            self.src_mask = self.generate_square_subsequent_mask(length).to(inputs.device)
        if mask is None:
            mask = self.generate_square_subsequent_mask(length).to(inputs.device)
        scale = math.sqrt(self.ninp)
        src = self.pos_encoder(self.embedding(inputs) * scale)
        tgt = self.pos_encoder(self.embedding(target) * scale)
        output = self.decoder(self.transformer(src, tgt, tgt_mask=mask))
        return F.log_softmax(output, dim=-1).view(-1, self.vocab_size)


class PositionalEncoding(nn.Module):
    """Adds sinusoidal position codes (computed on first use, on the input's device) and applies dropout."""

    def __init__(self, dim: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.dim = dim
        self.max_len = max_len
        self.pe: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.pe is None:
            self.pe = self._init_pos_encoding(x.device)
        # Lightning adds the code of position x.size(1) to every position; kept as it is for equal numbers.
        return self.dropout(x + self.pe[:, x.size(1)])

    def _init_pos_encoding(self, device: torch.device) -> Tensor:
        position = torch.arange(self.max_len, dtype=torch.float, device=device).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, self.dim, 2, device=device).float() * (-math.log(10000.0) / self.dim))
        pe = torch.zeros(self.max_len, self.dim, device=device)
        pe[:, 0::2] = torch.sin(position * frequency)
        pe[:, 1::2] = torch.cos(position * frequency)
        return pe.unsqueeze(0)


class Dictionary:
    """Word <-> index, in order of first appearance."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def _tokenize_lines(lines: list[str]) -> tuple[Tensor, Dictionary]:
    dictionary = Dictionary()
    ids = [dictionary.add_word(word) for line in lines for word in [*line.split(), "<eos>"]]
    return torch.tensor(ids, dtype=torch.int64), dictionary


def tokenize(path: Path) -> tuple[Tensor, Dictionary]:
    """The file's words as one index tensor (``<eos>`` ends each line) and the dictionary built on the way."""
    with open(path, encoding="utf8") as handle:
        return _tokenize_lines(handle.readlines())


def synthetic_corpus(words: int = 60_000, vocabulary: int = 500, seed: int = 0) -> list[str]:
    """Lines of a fixed Markov chain: each word is followed by one of 4 others, so the text is predictable."""
    rng = random.Random(seed)
    followers = {w: [rng.randrange(vocabulary) for _ in range(4)] for w in range(vocabulary)}
    lines, count, word = [], 0, 0
    while count < words:
        length = rng.randint(8, 20)
        sentence = []
        for _ in range(length):
            word = rng.choice(followers[word])
            sentence.append(f"w{word}")
        lines.append(" ".join(sentence))
        count += length + 1
    return lines


WIKITEXT2_TOKENS: Final = 2_088_628
"""Tokens of WikiText-2's training split (words and ``<eos>``), the size the synthetic stand-in has."""


def synthetic_tokens(tokens: int = WIKITEXT2_TOKENS, vocabulary: int = 500, seed: int = 0) -> tuple[Tensor, Dictionary]:
    """A corpus of WikiText-2's size from a fixed Markov chain (each word followed by one of 4 others, a
    sentence ending every 16 words), as indices and their dictionary (``w0`` ... and ``<eos>``).

    Made by 1,024 chains at once, so the full size takes a fraction of a second; the same every time.
    """
    generator = torch.Generator().manual_seed(seed)
    followers = torch.randint(vocabulary, (vocabulary, 4), generator=generator)
    chains = 1024
    steps = -(-tokens // chains)
    state = torch.randint(vocabulary, (chains,), generator=generator)
    ids = torch.empty(steps, chains, dtype=torch.int64)
    for step in range(steps):
        state = followers[state, torch.randint(4, (chains,), generator=generator)]
        ids[step] = state
    data = ids.t().reshape(-1)[:tokens].clone()
    data[15::16] = vocabulary  # <eos>
    dictionary = Dictionary()
    for word in range(vocabulary):
        dictionary.add_word(f"w{word}")
    dictionary.add_word("<eos>")
    return data, dictionary


class WikiText2(Dataset[tuple[Tensor, Tensor]]):
    """Blocks of ``block_size`` tokens and the same block shifted by one (the next-word targets).

    ``data_dir/wikitext-2.txt`` is read when it exists; otherwise, and with no download (core works offline),
    the synthetic corpus of :func:`synthetic_tokens` is used: a vocabulary of 501 and WikiText-2's 2,088,628 tokens
    (59,674 blocks of 35), so Lightning's examples that split it as ``[n - 4000, 2000, 2000]`` run as written.
    ``download`` is accepted for Lightning's signature and does nothing.
    """

    def __init__(self, data_dir: Path = Path("./data"), block_size: int = 35, download: bool = True) -> None:
        super().__init__()
        self.path = Path(data_dir) / "wikitext-2.txt"
        if os.path.isfile(self.path):
            self.data, self.dictionary = tokenize(self.path)
        else:
            self.data, self.dictionary = synthetic_tokens()
        self.block_size = block_size

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        start = index * self.block_size
        end = start + self.block_size
        return self.data[start:end], self.data[start + 1:end + 1]

    @staticmethod
    def download(destination: Path) -> None:
        """Nothing to fetch: without the file, the synthetic corpus stands in (see the class docstring)."""


class LightningTransformer(Module):
    """:class:`Transformer` trained with SGD (lr 0.1) on :class:`WikiText2` by next-word NLL."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        return self.model(inputs, target)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, target = batch
        return F.nll_loss(self(inputs, target), target.view(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader[tuple[Tensor, Tensor]]:
        return DataLoader(WikiText2())
