"""The small transformer, data and parallelize function the N-D parallelism tests share (core-pipeline's too).

A decoder of LAYERS blocks (causal attention with separate q/k/v/o projections, a GELU MLP), tiny dimensions, trained
to predict the next token of sequences that follow ``next = (5 * token + 3) % VOCAB``: learnable, so the loss falls.
Written the way a model must be for a pipeline split by module name: the blocks live in a ``ModuleDict`` iterated by
value, and ``embed`` / ``norm`` / ``head`` may be ``None`` (absent from this stage).
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, HEADS, LAYERS, SEQUENCE = 64, 32, 4, 4, 16
STEPS, GLOBAL_BATCH, LEARNING_RATE = 12, 8, 1e-2


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(DIM, DIM, bias=False)
        self.k = nn.Linear(DIM, DIM, bias=False)
        self.v = nn.Linear(DIM, DIM, bias=False)
        self.o = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds HEADS / tensor_parallel_size of them.
        q, k, v = (projection(x).view(batch, length, -1, DIM // HEADS).transpose(1, 2)
                   for projection in (self.q, self.k, self.v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(attended.transpose(1, 2).reshape(batch, length, -1))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(DIM, 4 * DIM)
        self.down = nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM)
        self.attn = Attention()
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed: nn.Module | None = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleDict({str(index): Block() for index in range(LAYERS)})
        self.norm: nn.Module | None = nn.LayerNorm(DIM)
        self.head: nn.Module | None = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens) if self.embed is not None else tokens
        for layer in self.layers.values():
            hidden = layer(hidden)
        hidden = self.norm(hidden) if self.norm is not None else hidden
        return self.head(hidden) if self.head is not None else hidden


def model() -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer()


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def dataset(steps: int = STEPS) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(0)
    sequences = torch.empty(steps * GLOBAL_BATCH, SEQUENCE + 1, dtype=torch.long)
    sequences[:, 0] = torch.randint(0, VOCAB, (steps * GLOBAL_BATCH,), generator=generator)
    for position in range(1, SEQUENCE + 1):
        sequences[:, position] = (5 * sequences[:, position - 1] + 3) % VOCAB
    return torch.utils.data.TensorDataset(sequences[:, :-1], sequences[:, 1:])


def optimizer(parameters: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(parameters, lr=LEARNING_RATE)


def parallelize_tensors_only(module: nn.Module, device_mesh: Any) -> nn.Module:
    """Tensor parallelism on every block's projections (q, k, v, up column-wise; o, down row-wise)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(), "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()}
    for block in cast(nn.ModuleDict, module.layers).values():
        parallelize_module(block, device_mesh["tensor_parallel"], plan)
    return module


def parallelize(module: nn.Module, device_mesh: Any) -> nn.Module:
    """Tensor parallelism, then fully_shard over the data-parallel dimension (each block, then the root)."""
    from torch.distributed.fsdp import fully_shard

    parallelize_tensors_only(module, device_mesh)
    for block in cast(nn.ModuleDict, module.layers).values():
        fully_shard(block, mesh=device_mesh["data_parallel"])
    fully_shard(module, mesh=device_mesh["data_parallel"])
    return module


def reference_losses(steps: int = STEPS) -> tuple[list[float], dict[str, torch.Tensor]]:
    """One process, plain PyTorch, the global batch: the losses and weights every strategy must reproduce.

    Runs on one torch thread, as every rank of the jobs does (the reduction order is then the same); the caller's
    thread count is restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _reference_losses(steps)
    finally:
        torch.set_num_threads(threads)


def _reference_losses(steps: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    network = model()
    adam = optimizer(network.parameters())
    loader = torch.utils.data.DataLoader(dataset(steps), batch_size=GLOBAL_BATCH)
    losses = []
    for tokens, targets in loader:
        adam.zero_grad()
        loss = loss_fn(network(tokens), targets)
        loss.backward()
        adam.step()
        losses.append(loss.item())
    return losses, {name: value.detach().clone() for name, value in network.state_dict().items()}
