"""A small GPT for the activation-checkpointing tests: blocks hold most of the activations (a small vocabulary).

``ReferenceBlock`` is ``Block`` under another name: a model made of it has the same parameters and keys (same seed,
same order of creation) but no policy naming ``Block`` selects it, so one run can set up both and compare.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, HEADS, LAYERS, CONTEXT = 32, 32, 2, 4, 16


class _Layers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, DIM))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Block(_Layers):
    """The transformer block the tests' policies name."""


class ReferenceBlock(_Layers):
    """``Block``'s twin, which no policy naming ``Block`` selects: the reference model is made of it."""


class GPT(nn.Module):
    def __init__(self, block: Callable[[], nn.Module] = Block) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens)
        for layer in self.layers:
            hidden = layer(hidden)
        return self.head(self.norm(hidden))


def gpt(seed: int = 0, block: Callable[[], nn.Module] = Block) -> GPT:
    torch.manual_seed(seed)
    return GPT(block)


def batch(seed: int, size: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (size, CONTEXT + 1), generator=generator)
    return tokens[:, :-1], tokens[:, 1:]


def loss_of(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
