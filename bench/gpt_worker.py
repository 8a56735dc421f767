"""One 2-rank job training a small GPT on synthetic tokens: tokens/s and peak memory per rank.

    python -m bench.gpt_worker MODE LAYERS DIM CONTEXT STEPS [--compile]

``MODE`` is ``raw`` (plain ``DistributedDataParallel``, to be started under torchrun), ``paired`` (raw DDP and
Lite ``ddp`` in the same two processes, alternating blocks of steps: :func:`paired`), a Lite strategy:
``ddp``, ``fsdp`` (each transformer block its own unit), ``deepspeed_stage_2``, ``deepspeed_stage_3``,
``model_parallel_1x2`` / ``model_parallel_2x1`` (data-parallel x tensor-parallel, core-model-parallel), or a
peer under torchrun in the peers' environment
(``make bench-peers``): ``fabric_ddp`` (Lightning Fabric), ``accelerate_ddp`` (HF Accelerate). Fabric's ``fsdp``
refuses a CPU accelerator ("FSDP is only available on GPU"), so it has no row here. The global batch is
``GLOBAL_BATCH`` sequences of ``CONTEXT`` tokens per step whatever the layout; tokens come from a fixed seed (no
download). Global rank 0 prints one JSON line
``{"mode": ..., "tokens_per_s": ..., "peak_mb": [...per rank], "held_mb": [...per rank], "parameters": ...}``:
``held_mb`` is what the rank holds of the parameters and the optimizer state after the steps (the local shard of a
``DTensor``), ``None`` under DeepSpeed, whose flat fp32 partitions live outside the parameter objects.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

VOCAB, HEADS, GLOBAL_BATCH, WARMUP = 1024, 4, 8, 2


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.head_dim = dim // HEADS

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        h = self.norm1(x)
        # -1 heads: under tensor parallelism each rank holds HEADS / tensor-parallel size of them.
        q, k, v = (p(h).view(batch, length, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(attended.transpose(1, 2).reshape(batch, length, -1))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self, layers: int, dim: int, context: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.position = nn.Parameter(torch.zeros(context, dim))
        self.layers = nn.ModuleList(Block(dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens) + self.position[: tokens.shape[1]]
        for layer in self.layers:
            hidden = layer(hidden)
        return self.head(self.norm(hidden))


def parallelize(module: nn.Module, device_mesh: Any) -> nn.Module:
    """Tensor parallelism on each block's projections, then fully_shard over the data-parallel dimension."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel(),
            "up": ColwiseParallel(), "down": RowwiseParallel()}
    for block in module.layers:  # type: ignore[union-attr]
        parallelize_module(block, device_mesh["tensor_parallel"], plan)
        if device_mesh["data_parallel"].size() > 1:
            fully_shard(block, mesh=device_mesh["data_parallel"])
    if device_mesh["data_parallel"].size() > 1:
        fully_shard(module, mesh=device_mesh["data_parallel"])
    return module


def batches(steps: int, context: int, data_rank: int, data_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This data-parallel rank's share of each step's global batch (fixed seed, the same for every mode)."""
    generator = torch.Generator().manual_seed(0)
    share = GLOBAL_BATCH // data_size
    out = []
    for _ in range(steps + WARMUP):
        tokens = torch.randint(0, VOCAB, (GLOBAL_BATCH, context + 1), generator=generator)
        mine = tokens[data_rank * share:(data_rank + 1) * share]
        out.append((mine[:, :-1].contiguous(), mine[:, 1:].contiguous()))
    return out


def _loop(step: Any, data: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    for tokens, targets in data[:WARMUP]:
        step(tokens, targets)
    start = time.perf_counter()
    for tokens, targets in data[WARMUP:]:
        step(tokens, targets)
    return time.perf_counter() - start


def _local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # a DTensor's shard on this rank
    return local.numel() * local.element_size()


def held_mb(model: nn.Module, optimizer: Any) -> float:
    """Megabytes of parameters and optimizer state this rank holds (its shards, under sharding strategies)."""
    state = getattr(optimizer, "optimizer", optimizer).state  # Lite's optimizer wraps the user's
    tensors = [value for entry in state.values() for value in entry.values() if isinstance(value, torch.Tensor)]
    return (sum(_local_bytes(p) for p in model.parameters()) + sum(_local_bytes(t) for t in tensors)) / 1e6


def _report(mode: str, seconds: float, steps: int, context: int, parameters: int, held: float | None) -> None:
    peaks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(peaks, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    helds: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(helds, held)
    if dist.get_rank() == 0:
        line = {"mode": mode, "tokens_per_s": GLOBAL_BATCH * context * steps / seconds, "peak_mb": peaks,
                "held_mb": helds, "parameters": parameters}
        print(json.dumps(line), flush=True)


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def raw(layers: int, dim: int, context: int, steps: int, compile: bool) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model: nn.Module = nn.parallel.DistributedDataParallel(GPT(layers, dim, context))
    if compile:
        model = torch.compile(model)  # type: ignore[assignment]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad()
        _loss(model(tokens), targets).backward()
        optimizer.step()

    data = batches(steps, context, dist.get_rank(), dist.get_world_size())
    seconds = _loop(step, data)
    parameters = sum(p.numel() for p in model.parameters())
    _report("raw", seconds, steps, context, parameters, held_mb(model, optimizer))
    dist.destroy_process_group()


def peer(mode: str, layers: int, dim: int, context: int, steps: int, compile: bool) -> None:
    """Lightning Fabric or HF Accelerate, each as its documentation shows: compile before setup / prepare."""
    torch.manual_seed(0)
    model: nn.Module = GPT(layers, dim, context)
    parameters = sum(p.numel() for p in model.parameters())
    if mode.startswith("fabric_"):
        # Fabric records torch.compile's arguments through a patch installed when lightning is imported; a model
        # compiled before that import fails in setup ("Make sure to import lightning before torch.compile").
        from lightning.fabric import Fabric  # type: ignore[import-not-found]
    if compile:
        model = torch.compile(model)  # type: ignore[assignment]
    if mode.startswith("fabric_"):
        runner = Fabric(accelerator="cpu", strategy=mode.removeprefix("fabric_"), devices=2)
        runner.launch()
        model, optimizer = runner.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
        backward = runner.backward
    else:
        from accelerate import Accelerator  # type: ignore[import-not-found]

        accelerator = Accelerator(cpu=True)
        model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
        backward = accelerator.backward

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad()
        backward(_loss(model(tokens), targets))
        optimizer.step()

    seconds = _loop(step, batches(steps, context, dist.get_rank(), dist.get_world_size()))
    gc.collect()
    _report(mode, seconds, steps, context, parameters, held_mb(model, optimizer))
    dist.destroy_process_group()


PEER_MODES = ("fabric_ddp", "accelerate_ddp")
PAIRED_BLOCKS, PAIRED_STEPS = 12, 4


def paired(lite: Any, layers: int, dim: int, context: int, steps: int, compile: bool) -> None:
    """Raw DDP and Lite ``ddp`` in one job on the same process group, alternating blocks of ``PAIRED_STEPS`` steps.

    Both models start from the same weights and see the same batches; each block pair runs back to back, so the
    machine's drift between jobs (+-3 % here) cancels out of the paired ratios. ``steps`` is unused: the job runs
    ``PAIRED_BLOCKS`` pairs. Prints ``{"mode": "paired", "raw": [s per block...], "framework": [...]}``."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    reference = GPT(layers, dim, context)
    raw_model: nn.Module = nn.parallel.DistributedDataParallel(reference)
    ours: nn.Module = GPT(layers, dim, context)
    ours.load_state_dict(reference.state_dict())
    if compile:
        raw_model = torch.compile(raw_model)  # type: ignore[assignment]
        ours = torch.compile(ours)  # type: ignore[assignment]
    raw_optimizer = torch.optim.AdamW(raw_model.parameters(), lr=1e-3)
    ours, optimizer = lite.setup(ours, torch.optim.AdamW(ours.parameters(), lr=1e-3))

    def raw_step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        raw_optimizer.zero_grad()
        _loss(raw_model(tokens), targets).backward()
        raw_optimizer.step()

    def lite_step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad()
        lite.backward(_loss(ours(tokens), targets))
        optimizer.step()

    data = batches(PAIRED_STEPS - WARMUP, context, lite.global_rank, lite.world_size)  # PAIRED_STEPS batches
    timings: dict[str, list[float]] = {"raw": [], "framework": []}
    for block in range(PAIRED_BLOCKS + 1):  # block 0 warms both up (and compiles) and is not counted
        for name, step in (("raw", raw_step), ("framework", lite_step)) if block % 2 else (
            ("framework", lite_step), ("raw", raw_step)
        ):  # alternate which goes first, so neither always follows the other
            dist.barrier()
            start = time.perf_counter()
            for tokens, targets in data:
                step(tokens, targets)
            if block:
                timings[name].append(time.perf_counter() - start)
    if lite.global_rank == 0:
        print(json.dumps({"mode": "paired", **timings}), flush=True)


def lite_main(lite: Any, mode: str, layers: int, dim: int, context: int, steps: int, compile: bool) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    parameters = sum(p.numel() for p in GPT(layers, dim, context).parameters())
    seconds, held = _lite_train(lite, mode, layers, dim, context, steps, compile)
    gc.collect()  # free sharded modules before the strategy's teardown destroys the group (see memory_worker)
    _report(mode, seconds, steps, context, parameters, held)


def _lite_train(
    lite: Any, mode: str, layers: int, dim: int, context: int, steps: int, compile: bool
) -> tuple[float, float | None]:
    torch.manual_seed(0)
    model: nn.Module = GPT(layers, dim, context)
    if compile:
        model = torch.compile(model)  # type: ignore[assignment]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = lite.setup(model, optimizer)
    data_size = 1 if mode == "model_parallel_1x2" else lite.world_size
    data_rank = 0 if data_size == 1 else lite.global_rank

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad()
        lite.backward(_loss(model(tokens), targets))
        optimizer.step()

    seconds = _loop(step, batches(steps, context, data_rank, data_size))
    return seconds, None if mode.startswith("deepspeed") else held_mb(model, optimizer)


def strategy_for(mode: str) -> Any:
    if mode == "fsdp":  # each transformer block its own unit, as FSDP is used on transformers
        from core_fsdp import FSDPStrategy  # type: ignore[import-not-found,unused-ignore]

        return FSDPStrategy(auto_wrap_policy={Block})
    if mode.startswith("model_parallel_"):
        from core_model_parallel import ModelParallelStrategy  # type: ignore[import-not-found,unused-ignore]

        data, tensor = (int(part) for part in mode.removeprefix("model_parallel_").split("x"))
        return ModelParallelStrategy(parallelize_fn=parallelize, data_parallel_size=data, tensor_parallel_size=tensor)
    return mode


def main(argv: list[str]) -> None:
    mode = argv[0]
    layers, dim, context, steps = (int(value) for value in argv[1:5])
    compile = "--compile" in argv
    torch.set_num_threads(1)
    if mode == "raw":
        raw(layers, dim, context, steps, compile)
        return
    if mode in PEER_MODES:
        peer(mode, layers, dim, context, steps, compile)
        return
    from core import Lite

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    lite = Lite(accelerator="cpu", strategy=strategy_for("ddp" if mode == "paired" else mode), devices=2)
    if mode == "paired":
        lite.launch(paired, layers, dim, context, steps, compile)
        return
    lite.launch(lite_main, mode, layers, dim, context, steps, compile)


if __name__ == "__main__":
    main(sys.argv[1:])
