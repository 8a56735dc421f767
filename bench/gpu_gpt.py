"""The GPU benchmark: a GPT-2-small-shaped model (~124 M parameters, context 1024) on one GPU, in one process.

    python -m bench.gpu_gpt --out DIR [--budget SECONDS]     # on the GPU machine (scripts/gpu_check.py runs it)
    python -m bench.gpu_gpt --list                           # the configurations, nothing run
    python -m bench.gpu_gpt --tiny --device cpu --out DIR    # a 2-layer smoke run on the CPU (seconds)

Every configuration trains the same model from the same initial weights on the same synthetic tokens (a fixed
seed, no download) under ``bf16-mixed`` autocast with AdamW (``fused=True`` on CUDA). The runners are a raw
PyTorch loop, ``Lite`` (``single_device``), Lightning Fabric and HF Accelerate (each skipped with its reason where
it is not importable), first eager, then ``torch.compile``'d (compiled before ``setup`` / ``prepare``, as each
documents); then ``Lite`` ``fsdp`` on a world of size 1 (NCCL) against the raw loop and against a hand-written
FSDP2 loop with the same ``MixedPrecisionPolicy`` (the like-for-like comparison), with Lite's fsdp with every Block
activation-checkpointed beside them (tokens/s and peak memory), once at the batch and once at twice the batch; then
float8 (core-torchao, compiled): the raw bf16 loop against Lite's ``fp8`` and ``fp8-rowwise`` and a hand-written
torchao conversion of the same layers, at the GPT-2-small shape (``float8``) and at a 0.7 B shape (``float8-0.7b``;
both run last and are skipped, with the reason recorded, when the budget has no room left for them). Within a
section all runners
live in the process at once and take turns: each round runs one block of timed steps per runner, in an order
rotated every round, so a drift of the card (clocks, temperature) lands on every runner alike. Warm-up steps
(which include compilation) are never timed. The ratios are the medians of the per-round ratios to the raw
block of the same round.

Reported per runner: tokens/s, step time, peak memory (the runner's resident parameters, gradients and optimizer
state plus the step's transient peak above what was allocated when its block started, so the other runners'
resident state is not counted) and the model FLOPs utilisation against the card's dense bf16 peak.

The benchmark enforces ``--budget``: a section is started only if the time left allows it, and an alarm at the
budget stops whatever runs and writes what was measured (the results files are rewritten after every section).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import signal
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# --------------------------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Shape:
    layers: int
    dim: int
    heads: int
    context: int
    vocab: int
    batch: int  # sequences per step


GPT2_SMALL = Shape(layers=12, dim=768, heads=12, context=1024, vocab=50304, batch=16)  # 50257 padded to 64s
TINY = Shape(layers=2, dim=64, heads=4, context=64, vocab=512, batch=4)


class Block(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.heads = shape.heads
        self.norm1, self.norm2 = nn.LayerNorm(shape.dim), nn.LayerNorm(shape.dim)
        self.qkv = nn.Linear(shape.dim, 3 * shape.dim)
        self.proj = nn.Linear(shape.dim, shape.dim)
        self.up, self.down = nn.Linear(shape.dim, 4 * shape.dim), nn.Linear(4 * shape.dim, shape.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(dim, dim=2)
        q, k, v = (t.view(batch, length, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, dim))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2's layout: learned positions, pre-norm blocks, the output head tied to the token embedding."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.embed = nn.Embedding(shape.vocab, shape.dim)
        self.position = nn.Embedding(shape.context, shape.dim)
        self.layers = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.dim)
        self.head = nn.Linear(shape.dim, shape.vocab, bias=False)
        self.head.weight = self.embed.weight
        for name, parameter in self.named_parameters():
            if parameter.dim() == 2:
                std = 0.02 / math.sqrt(2 * shape.layers) if name.endswith(("proj.weight", "down.weight")) else 0.02
                nn.init.normal_(parameter, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(parameter)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        hidden = self.embed(tokens) + self.position(positions)
        for layer in self.layers:
            hidden = layer(hidden)
        return self.head(self.norm(hidden))


def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def parameter_count(shape: Shape) -> int:
    """Parameters, the tied head counted once."""
    with torch.device("meta"):
        return sum(p.numel() for p in GPT(shape).parameters())


def flops_per_token(shape: Shape) -> float:
    """Training FLOPs per token (PaLM's appendix B, as nanoGPT counts them): 6 N + 12 L d T.

    N leaves out the position table (a lookup, no multiply); the second term is attention's score and value
    products, forward and backward."""
    matmul_parameters = parameter_count(shape) - shape.context * shape.dim
    return 6.0 * matmul_parameters + 12.0 * shape.layers * shape.dim * shape.context


# Dense bf16 tensor-core peaks (no sparsity), TFLOP/s, by a substring of torch.cuda.get_device_name(); the first
# match wins, so the specific names come before the generic ones.
DENSE_BF16_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM5, e.g. "NVIDIA H100 80GB HBM3"
    ("H200", 989.0),
    ("GH200", 989.0),
    ("A100", 312.0),
)


def peak_tflops(device_name: str) -> float | None:
    for fragment, tflops in DENSE_BF16_PEAK_TFLOPS:
        if fragment in device_name:
            return tflops
    return None


# ------------------------------------------------------------------------------------------------ the runners


class BudgetReached(BaseException):
    """The alarm set at the benchmark's budget went off.

    A ``BaseException``, as ``KeyboardInterrupt`` is: raised wherever the main thread is when the alarm rings, often
    deep inside ``torch.compile``, whose ``except Exception`` handlers would otherwise wrap or swallow it."""


@dataclass
class Runner:
    """One framework's training step over its own copy of the model, and what was measured of it."""

    name: str
    step: Callable[[torch.Tensor, torch.Tensor], None]
    state: Callable[[], list[torch.Tensor]]  # parameters and optimizer state, for the resident bytes
    block_seconds: list[float] = field(default_factory=list)
    peak_above_start: list[int] = field(default_factory=list)
    resident_bytes: int = 0
    skipped: str = ""  # why it was not measured, when it was not
    batch_scale: int = 1  # sequences per step over the plan's batch (the doubled-batch runner: 2)


def _local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # a DTensor's shard
    return int(local.numel() * local.element_size())


def _optimizer_tensors(optimizer: Any) -> list[torch.Tensor]:
    state = getattr(optimizer, "optimizer", optimizer).state  # the frameworks wrap the user's optimizer
    return [value for entry in state.values() for value in entry.values() if isinstance(value, torch.Tensor)]


def _adamw(model: nn.Module, device: torch.device) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device.type == "cuda")


def _state_of(model: nn.Module, optimizer: Any) -> Callable[[], list[torch.Tensor]]:
    return lambda: [*model.parameters(), *_optimizer_tensors(optimizer)]


def raw_runner(shape: Shape, weights: dict[str, torch.Tensor], device: torch.device, compile: bool,
               convert: Callable[[nn.Module], None] | None = None, name: str = "raw") -> Runner:
    """The plain loop; ``convert`` changes the model in place before it is compiled (float8 by hand)."""
    model = GPT(shape).to(device)
    model.load_state_dict(weights)
    if convert is not None:
        convert(model)
    forward: nn.Module = torch.compile(model) if compile else model  # type: ignore[assignment]
    optimizer = _adamw(model, device)
    return Runner(name, _autocast_step(forward, optimizer, device), _state_of(model, optimizer))


def _autocast_step(forward: nn.Module, optimizer: torch.optim.Optimizer,
                   device: torch.device) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """A hand-written training step: forward under bf16 autocast, backward, AdamW."""

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = forward(tokens)
        loss_of(logits, targets).backward()
        optimizer.step()

    return step


def lite_runner(lite: Any, shape: Shape, weights: dict[str, torch.Tensor], compile: bool, name: str) -> Runner:
    model: nn.Module = GPT(shape).to(lite.device)  # on the device first: a fused AdamW takes device parameters
    model.load_state_dict(weights)
    if compile:
        model = torch.compile(model)  # type: ignore[assignment]
    model, optimizer = lite.setup(model, _adamw(model, lite.device))

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        lite.backward(loss_of(model(tokens), targets))
        optimizer.step()

    return Runner(name, step, _state_of(model, optimizer))


def fabric_runner(shape: Shape, weights: dict[str, torch.Tensor], device: torch.device, compile: bool) -> Runner:
    # Imported before torch.compile: Fabric records compile's arguments through a patch installed on import.
    from lightning.fabric import Fabric  # type: ignore[import-not-found,unused-ignore]

    model: nn.Module = GPT(shape).to(device)
    model.load_state_dict(weights)
    if compile:
        model = torch.compile(model)  # type: ignore[assignment]
    fabric = Fabric(accelerator=device.type, devices=1, precision="bf16-mixed")
    model, optimizer = fabric.setup(model, _adamw(model, device))

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        fabric.backward(loss_of(model(tokens), targets))
        optimizer.step()

    return Runner("fabric", step, _state_of(model, optimizer))


def accelerate_runner(shape: Shape, weights: dict[str, torch.Tensor], device: torch.device, compile: bool) -> Runner:
    from accelerate import Accelerator  # type: ignore[import-not-found,unused-ignore]

    model: nn.Module = GPT(shape).to(device)
    model.load_state_dict(weights)
    if compile:
        model = torch.compile(model)  # type: ignore[assignment]
    accelerator = Accelerator(cpu=device.type == "cpu", mixed_precision="bf16")
    model, optimizer = accelerator.prepare(model, _adamw(model, device))

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        accelerator.backward(loss_of(model(tokens), targets))
        optimizer.step()

    return Runner("accelerate", step, _state_of(model, optimizer))


PEERS = {"fabric": "lightning", "accelerate": "accelerate"}


def peer_missing(name: str) -> str | None:
    """Why the peer cannot run here, or None."""
    module = PEERS[name]
    return None if importlib.util.find_spec(module) is not None else f"{module} is not importable here"


# ---------------------------------------------------------------------------------------------- the measurement


@dataclass
class Plan:
    shape: Shape
    device: torch.device
    warmup: int
    steps: int  # timed steps per block
    rounds: int
    sections: tuple[str, ...]


SECTIONS = ("eager", "fsdp", "compiled", "float8", "float8-0.7b")


def configurations(sections: tuple[str, ...]) -> list[str]:
    """The runner names of each section, as ``--list`` prints them."""
    names = {"eager": ["raw", "lite", "fabric", "accelerate"], "compiled": ["raw", "lite", "fabric", "accelerate"],
             "fsdp": ["raw", "lite_fsdp", *FSDP_RUNNERS],
             **{name: list(FLOAT8_RUNNERS) for name in ("float8", "float8-0.7b")}}
    return [f"{section}/{name}" for section in sections for name in names[section]]


def batches(plan: Plan) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``plan.steps`` distinct batches of random tokens (one generator seed), on the device."""
    generator = torch.Generator().manual_seed(0)
    shape = plan.shape
    out = []
    for _ in range(plan.steps):
        tokens = torch.randint(0, shape.vocab, (shape.batch, shape.context + 1), generator=generator)
        out.append((tokens[:, :-1].contiguous().to(plan.device), tokens[:, 1:].contiguous().to(plan.device)))
    return out


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_block(runner: Runner, data: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device) -> None:
    _synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        start_bytes = torch.cuda.memory_allocated(device)
    start = time.perf_counter()
    for tokens, targets in data:
        runner.step(tokens, targets)
    _synchronize(device)
    runner.block_seconds.append(time.perf_counter() - start)
    if device.type == "cuda":
        runner.peak_above_start.append(torch.cuda.max_memory_allocated(device) - start_bytes)


def alternate(runners: list[Runner], plan: Plan, deadline: float, log: Callable[[str], None]) -> list[Runner]:
    """Warm every runner up, then ``plan.rounds`` rounds of one timed block each, the order rotated per round.

    A runner whose warm-up (compilation, in the compiled section) would likely end too close to ``deadline`` is
    left out, so the ones before it are still measured. Returns the runners measured."""
    data = batches(plan)
    warmed: list[Runner] = []
    warmups: list[float] = []
    for runner in runners:
        # Another warm-up like the slowest so far, then the timed rounds (about a tenth of a warm-up each).
        needed = max(warmups, default=0.0) * (1.2 + 0.1 * plan.rounds) + 5.0
        if warmed and time.perf_counter() + needed > deadline:
            runner.skipped = f"left out: about {needed:.0f} s needed, less left in the budget"
            log(f"    {runner.name}: {runner.skipped}")
            continue
        started = time.perf_counter()
        for tokens, targets in data[: plan.warmup]:
            runner.step(tokens, targets)
        _synchronize(plan.device)
        runner.resident_bytes = sum(_local_bytes(tensor) for tensor in runner.state())
        warmups.append(time.perf_counter() - started)
        warmed.append(runner)
        log(f"    {runner.name}: warmed up in {warmups[-1]:.1f} s")
    for round_index in range(plan.rounds):
        shift = round_index % len(warmed)
        for runner in warmed[shift:] + warmed[:shift]:
            _run_block(runner, data, plan.device)
    return warmed


def summarize(section: str, runners: list[Runner], plan: Plan, peak: float | None) -> list[dict[str, Any]]:
    tokens_per_step = plan.shape.batch * plan.shape.context
    rows = []
    for runner in runners:
        step_s = statistics.median(runner.block_seconds) / plan.steps
        tokens_per_s = tokens_per_step * runner.batch_scale / step_s
        peak_bytes = runner.resident_bytes + max(runner.peak_above_start) if runner.peak_above_start else None
        rows.append({
            "section": section, "runner": runner.name, "status": "ok", "tokens_per_s": tokens_per_s,
            "step_ms": step_s * 1e3, "peak_gib": None if peak_bytes is None else peak_bytes / 2**30,
            "resident_gib": runner.resident_bytes / 2**30,
            "mfu": None if peak is None else tokens_per_s * flops_per_token(plan.shape) / (peak * 1e12),
            "block_ms_per_step": [round(seconds / plan.steps * 1e3, 3) for seconds in runner.block_seconds],
        })
    return rows


def paired_ratios(section: str, runners: list[Runner]) -> list[dict[str, Any]]:
    """Each runner's tokens/s against the raw loop's and Lite's against each peer: medians of per-round ratios."""
    by_name = {runner.name: runner for runner in runners}

    def ratio(ours: str, theirs: str) -> float:  # tokens/s ours / theirs = block time theirs / ours (per token)
        pairs = zip(by_name[theirs].block_seconds, by_name[ours].block_seconds, strict=True)
        scale = by_name[ours].batch_scale / by_name[theirs].batch_scale
        return statistics.median(scale * theirs_s / ours_s for theirs_s, ours_s in pairs)

    lite = "lite_fsdp" if section == "fsdp" else "lite"
    out = []
    for name in by_name:
        if name != "raw":
            target = ">= 0.99 (within 1 % of raw)" if name == lite and section != "fsdp" else "report"
            value = ratio(name, "raw")
            out.append({"name": f"{section}: {name} vs raw, tokens/s", "ratio": value, "target": target,
                        "met": value >= 0.99 if target != "report" else None})
    if section == "fsdp":
        out += fsdp_ratios(by_name, ratio)
    if "lite_fp8" in by_name and "raw_fp8" in by_name:  # Lite's fp8 against the same conversion by hand
        value = ratio("lite_fp8", "raw_fp8")
        out.append({"name": f"{section}: lite_fp8 vs raw_fp8 (hand-written torchao), tokens/s", "ratio": value,
                    "target": ">= 0.99", "met": value >= 0.99})
    for peer in PEERS:
        if lite in by_name and peer in by_name:
            value = ratio(lite, peer)
            out.append({"name": f"{section}: lite vs {peer}, tokens/s", "ratio": value,
                        "target": ">= 0.99 (no peer ahead beyond 1 %)", "met": value >= 0.99})
    return out


# ------------------------------------------------------------------------------------------------- the sections


def _build(name: str, build: Callable[[], Runner], runners: list[Runner], skipped: list[dict[str, str]],
           section: str, log: Callable[[str], None]) -> None:
    """Build one runner; a failure is recorded against it and the others go on."""
    try:
        runners.append(build())
    except Exception as error:  # a framework that cannot set this up is a result, not a crash of the benchmark
        skipped.append({"config": f"{section}/{name}", "reason": f"failed to set up: {type(error).__name__}: {error}"})
        log(f"    {name}: FAILED to set up: {type(error).__name__}: {error}")


def single_device_section(lite: Any, plan: Plan, compile: bool, weights: dict[str, torch.Tensor],
                          result: dict[str, Any], log: Callable[[str], None]) -> None:
    section = "compiled" if compile else "eager"
    runners: list[Runner] = []
    skipped: list[dict[str, str]] = result["skipped"]
    _build("raw", lambda: raw_runner(plan.shape, weights, plan.device, compile), runners, skipped, section, log)
    _build("lite", lambda: lite_runner(lite, plan.shape, weights, compile, "lite"), runners, skipped, section, log)
    for peer, build in (("fabric", fabric_runner), ("accelerate", accelerate_runner)):
        reason = peer_missing(peer)
        if reason is not None:
            skipped.append({"config": f"{section}/{peer}", "reason": reason})
            log(f"    {peer}: skipped, {reason}")
            continue
        _build(peer, lambda build=build: build(plan.shape, weights, plan.device, compile),  # type: ignore[misc]
               runners, skipped, section, log)
    _measure(section, runners, plan, result, log)


def fsdp_section(lite: Any, plan: Plan, weights: dict[str, torch.Tensor], result: dict[str, Any],
                 log: Callable[[str], None]) -> None:
    runners: list[Runner] = []
    skipped: list[dict[str, str]] = result["skipped"]
    _build("raw", lambda: raw_runner(plan.shape, weights, plan.device, False), runners, skipped, "fsdp", log)
    _build("lite_fsdp", lambda: lite_runner(lite, plan.shape, weights, False, "lite_fsdp"), runners, skipped,
           "fsdp", log)
    build_fsdp_runners(lite, plan, weights, runners, skipped, log)
    _measure("fsdp", runners, plan, result, log)


# ------------------------------------------------------------ fsdp: hand-written FSDP2 and activation checkpointing

FSDP_RUNNERS = ("fsdp2", "lite_fsdp_ac", "lite_fsdp_ac_2x")
"""Beside raw and Lite's fsdp: a hand-written FSDP2 loop with Lite's default policy (the like-for-like comparison),
Lite's fsdp with every Block checkpointed, and that with the batch doubled (what the memory freed buys)."""


def fsdp2_runner(lite: Any, shape: Shape, weights: dict[str, torch.Tensor]) -> Runner:
    """FSDP2 by hand, as Lite's fsdp does it for bf16-mixed: ``fully_shard`` per Block and the root with
    ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, the forward under bf16 autocast, fused AdamW.
    It runs in Lite's launched function only to share its process group (world size 1); Lite touches nothing."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    device = lite.device
    model = GPT(shape).to(device)
    model.load_state_dict(weights)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = _adamw(model, device)
    return Runner("fsdp2", _autocast_step(model, optimizer, device), _state_of(model, optimizer))


def lite_ac_runner(lite: Any, shape: Shape, weights: dict[str, torch.Tensor], batch_scale: int) -> Runner:
    """Lite's fsdp with every Block checkpointed (what ``FSDPStrategy(activation_checkpointing_policy={Block})``
    applies at set-up; applied here before ``lite.setup`` so one launch holds every runner). With ``batch_scale`` 2
    each step trains on the batch twice over (two copies side by side): twice the activations, checkpointed."""
    from core.toolkit.strategies import checkpoint_activations

    model: nn.Module = GPT(shape).to(lite.device)
    model.load_state_dict(weights)
    checkpoint_activations(model, {Block})
    model, optimizer = lite.setup(model, _adamw(model, lite.device))

    def step(tokens: torch.Tensor, targets: torch.Tensor) -> None:
        if batch_scale > 1:
            tokens, targets = tokens.repeat(batch_scale, 1), targets.repeat(batch_scale, 1)
        optimizer.zero_grad(set_to_none=True)
        lite.backward(loss_of(model(tokens), targets))
        optimizer.step()

    name = "lite_fsdp_ac" if batch_scale == 1 else f"lite_fsdp_ac_{batch_scale}x"
    return Runner(name, step, _state_of(model, optimizer), batch_scale=batch_scale)


def build_fsdp_runners(lite: Any, plan: Plan, weights: dict[str, torch.Tensor], runners: list[Runner],
                       skipped: list[dict[str, str]], log: Callable[[str], None]) -> None:
    _build("fsdp2", lambda: fsdp2_runner(lite, plan.shape, weights), runners, skipped, "fsdp", log)
    for scale in (1, 2):
        name = "lite_fsdp_ac" if scale == 1 else "lite_fsdp_ac_2x"
        _build(name, lambda scale=scale: lite_ac_runner(lite, plan.shape, weights, scale),  # type: ignore[misc]
               runners, skipped, "fsdp", log)


def fsdp_ratios(by_name: dict[str, Runner], ratio: Callable[[str, str], float]) -> list[dict[str, Any]]:
    """Lite's fsdp against the hand-written FSDP2 loop with the same policy (target >= 0.99: Lite adds no overhead),
    and what activation checkpointing costs in tokens/s (reported; its peak memory is in the rows)."""
    out: list[dict[str, Any]] = []
    if "lite_fsdp" in by_name and "fsdp2" in by_name:
        value = ratio("lite_fsdp", "fsdp2")
        out.append({"name": "fsdp: lite_fsdp vs hand-written FSDP2 (same MixedPrecisionPolicy), tokens/s",
                    "ratio": value, "target": ">= 0.99 (within 1 % of FSDP2 by hand)", "met": value >= 0.99})
    for name in ("lite_fsdp_ac", "lite_fsdp_ac_2x"):
        if "lite_fsdp" in by_name and name in by_name:
            out.append({"name": f"fsdp: {name} vs lite_fsdp, tokens/s", "ratio": ratio(name, "lite_fsdp"),
                        "target": "report (recomputing every Block costs about one forward)", "met": None})
    return out


def _measure(section: str, runners: list[Runner], plan: Plan, result: dict[str, Any],
             log: Callable[[str], None]) -> None:
    if not runners or runners[0].name != "raw":
        log(f"  {section}: nothing to compare (the raw loop did not set up)")
        return
    try:
        measured = alternate(runners, plan, result["deadline"], log)
    except Exception as error:
        result["skipped"].append({"config": f"{section}/*", "reason": f"failed while running: "
                                  f"{type(error).__name__}: {error}"})
        log(f"  {section}: FAILED while running: {type(error).__name__}: {error}")
        return
    result["skipped"] += [{"config": f"{section}/{runner.name}", "reason": runner.skipped}
                          for runner in runners if runner.skipped]
    result["rows"] += summarize(section, measured, plan, result["peak_tflops"])
    result["comparisons"] += paired_ratios(section, measured)


# ---------------------------------------------------------------------------------------------- float8 (torchao)

GPT_07B = Shape(layers=12, dim=2048, heads=16, context=1024, vocab=50304, batch=4)  # ~0.7 B parameters
FLOAT8_RUNNERS = ("raw", "lite_fp8", "raw_fp8", "lite_fp8_rowwise")
"""Compiled, in this order (a runner the budget leaves no time for is left out): raw is the bf16-mixed loop; raw_fp8
converts the same layers by hand with torchao (the reference for Lite's fp8: target >= 0.99)."""


def float8_missing(device: torch.device) -> str | None:
    """Why the float8 section cannot run here, or None (emulated float8 on a CPU runs, for the dry run)."""
    for module in ("torchao", "core_torchao"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not importable here"
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        return f"{torch.cuda.get_device_name(device)} has no float8 (compute capability 8.9 or newer needed)"
    return None


def _float8_filter() -> Any:
    """The layers both the hand-written conversion and Lite's convert: core-torchao's default rule."""
    from core.toolkit.precisions import LinearFilter

    return LinearFilter(min_weight_elements=0 if _TINY_FLOAT8[0] else 1 << 20)


_TINY_FLOAT8 = [False]  # a --tiny run converts every eligible layer of its small model


def raw_fp8_runner(shape: Shape, weights: dict[str, torch.Tensor], device: torch.device, recipe: str) -> Runner:
    """torchao's documented recipe by hand: convert, compile, bf16 autocast around the forward."""
    import dataclasses

    from torchao.float8 import (  # type: ignore[import-not-found,unused-ignore]
        Float8LinearConfig,
        convert_to_float8_training,
    )

    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=device.type != "cuda")

    def convert(model: nn.Module) -> None:
        chosen = set(_float8_filter().chosen(model))
        convert_to_float8_training(model, module_filter_fn=lambda _, fqn: fqn in chosen, config=config)

    return raw_runner(shape, weights, device, True, convert=convert, name="raw_fp8")


def float8_section(plan: Plan, section: str, result: dict[str, Any], log: Callable[[str], None]) -> None:
    """fp8 and fp8-rowwise (Lite, core-torchao) and a hand-written torchao conversion against bf16-mixed, compiled.

    ``float8``: the plan's shape (GPT-2-small); ``float8-0.7b``: :data:`GPT_07B` (``--tiny``: the tiny shape)."""
    from core_torchao import Float8Precision  # type: ignore[import-not-found,unused-ignore]

    from core import Lite

    missing = float8_missing(plan.device)
    if missing is not None:
        result["skipped"].append({"config": f"{section}/*", "reason": missing})
        log(f"  {section}: skipped, {missing}")
        return
    _TINY_FLOAT8[0] = plan.shape == TINY
    shape = GPT_07B if section == "float8-0.7b" and plan.shape == GPT2_SMALL else plan.shape
    section_plan = Plan(shape=shape, device=plan.device, warmup=plan.warmup, steps=plan.steps, rounds=plan.rounds,
                        sections=plan.sections)
    torch.manual_seed(0)
    weights = {name: tensor.clone() for name, tensor in GPT(shape).state_dict().items()}
    accelerator = "cuda" if plan.device.type == "cuda" else "cpu"
    lites = {name: Lite(accelerator=accelerator, strategy="single_device", devices=1,
                        precision=Float8Precision(name, layer_filter=_float8_filter()))
             for name in ("fp8", "fp8-rowwise")}
    runners: list[Runner] = []
    skipped: list[dict[str, str]] = result["skipped"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "runs float8 emulated" on the CPU dry run
        for lite in lites.values():
            lite.launch()  # one process, nothing to start: each Lite runs on in this one
        _build("raw", lambda: raw_runner(shape, weights, plan.device, True), runners, skipped, section, log)
        _build("lite_fp8", lambda: lite_runner(lites["fp8"], shape, weights, True, "lite_fp8"), runners, skipped,
               section, log)
        _build("raw_fp8", lambda: raw_fp8_runner(shape, weights, plan.device, "tensorwise"), runners, skipped,
               section, log)
        _build("lite_fp8_rowwise", lambda: lite_runner(lites["fp8-rowwise"], shape, weights, True,
                                                       "lite_fp8_rowwise"), runners, skipped, section, log)
        _measure(section, runners, section_plan, result, log)
    for row in result["rows"]:
        if row["section"] == section:
            row["model"] = f"{parameter_count(shape) / 1e6:.0f} M ({shape.layers} x {shape.dim})"


# ---------------------------------------------------------------------------------------------------- reports


def write_reports(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    public = {key: value for key, value in result.items() if key != "deadline"}
    (out / "gpu-results.json").write_text(json.dumps(public, indent=2) + "\n")
    (out / "gpu-results.md").write_text(markdown(result))


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(result: dict[str, Any]) -> str:
    model, plan = result["model"], result["plan"]
    lines = [
        "# GPU benchmark: a GPT-2-small-shaped model on one device",
        "",
        f"- date: {result['date']}",
        f"- device: {result['device']} (dense bf16 peak used for MFU: {_fmt(result['peak_tflops'], '.0f')} TFLOP/s)",
        f"- versions: {', '.join(f'{k} {v}' for k, v in result['versions'].items())}",
        f"- model: {model['parameters'] / 1e6:.1f} M parameters ({model['layers']} layers, d {model['dim']}, "
        f"{model['heads']} heads, vocabulary {model['vocab']}, context {model['context']}), batch {model['batch']} "
        f"sequences = {model['batch'] * model['context']} tokens per step, {model['flops_per_token'] / 1e9:.3f} "
        "GFLOP per token (6 N + 12 L d T)",
        f"- method: bf16-mixed autocast, AdamW (fused on CUDA); per section all runners in one process, "
        f"{plan['warmup']} untimed warm-up steps each (compilation included), then {plan['rounds']} rounds of one "
        f"block of {plan['steps']} timed steps per runner, order rotated per round; medians",
        f"- wall time: {result['elapsed_s']:.0f} s of a {result['budget_s']:.0f} s budget"
        + (" (budget reached: later sections skipped)" if result.get("budget_reached") else ""),
        "",
        "| section | runner | tokens/s | step (ms) | peak memory (GiB) | MFU |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['section']} | {row['runner']} | {row['tokens_per_s']:,.0f} | {row['step_ms']:.2f} | "
                     f"{_fmt(row['peak_gib'], '.2f')} | {_fmt(row['mfu'], '.1%')} |")
    lines += ["", "| comparison (median of per-round ratios) | ratio | target | met |", "|---|---:|---|---|"]
    for comparison in result["comparisons"]:
        met = {True: "yes", False: "**no**", None: "-"}[comparison["met"]]
        lines.append(f"| {comparison['name']} | {comparison['ratio']:.3f} | {comparison['target']} | {met} |")
    if result["skipped"]:
        lines += ["", "Not measured:", ""]
        lines += [f"- `{entry['config']}`: {entry['reason']}" for entry in result["skipped"]]
    lines += ["", "Peak memory is the runner's resident parameters and optimizer state plus its step's transient peak "
              "above what was allocated when its block began (the other runners' resident state left out).", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------- main


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise :class:`BudgetReached` in the main thread after ``seconds``."""

    def ring(signum: int, frame: Any) -> None:
        raise BudgetReached(f"the benchmark's budget of {seconds:.0f} s is reached")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# Seconds a section is expected to need at the GPT-2-small size on an H100 (warm-up and compilation included);
# a section starts only if this much of the budget is left.
SECTION_ESTIMATE_S = {"eager": 25.0, "fsdp": 40.0, "compiled": 70.0,  # compiled: at least raw and Lite
                      "float8": 55.0, "float8-0.7b": 90.0}  # float8: at least raw (bf16) and lite_fp8, compiled


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for module in ("core", "lightning", "accelerate"):
        if importlib.util.find_spec(module) is not None:
            versions[module] = str(getattr(__import__(module), "__version__", "?"))
    if torch.version.cuda:
        versions["cuda"] = str(torch.version.cuda)
    return versions


def run(plan: Plan, out: Path, budget_s: float, log: Callable[[str], None] = print) -> dict[str, Any]:
    from core import Lite

    started = time.perf_counter()
    device_name = torch.cuda.get_device_name(plan.device) if plan.device.type == "cuda" else platform.processor()
    shape = plan.shape
    result: dict[str, Any] = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "device": device_name or "cpu",
        "peak_tflops": peak_tflops(device_name) if plan.device.type == "cuda" else None,
        "versions": _versions(),
        "model": {**vars(shape), "parameters": parameter_count(shape), "flops_per_token": flops_per_token(shape)},
        "plan": {"warmup": plan.warmup, "steps": plan.steps, "rounds": plan.rounds, "sections": list(plan.sections)},
        "budget_s": budget_s, "elapsed_s": 0.0, "rows": [], "comparisons": [], "skipped": [],
        "deadline": started + budget_s,  # time.perf_counter() clock; not written out
    }
    if plan.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    weights = {name: tensor.clone() for name, tensor in GPT(shape).state_dict().items()}
    accelerator = "cuda" if plan.device.type == "cuda" else "cpu"
    sections = list(plan.sections)
    section = ""
    try:
        with alarm(budget_s):
            while sections:
                section = sections.pop(0)
                left = budget_s - (time.perf_counter() - started)
                estimate = SECTION_ESTIMATE_S[section] if shape == GPT2_SMALL else 0.0
                if left < estimate:
                    result["skipped"].append({"config": f"{section}/*", "reason": f"{left:.0f} s of the budget left, "
                                              f"the section needs about {estimate:.0f} s"})
                    continue
                log(f"  section {section} ({left:.0f} s of the budget left)")
                if section.startswith("float8"):
                    float8_section(plan, section, result, log)
                elif section == "fsdp":
                    # The launch exports rank variables (RANK, LOCAL_RANK, ...) that would make the peers built in a
                    # later section think they run under a distributed launcher: put the environment back after.
                    saved = dict(os.environ)
                    try:
                        lite = Lite(accelerator=accelerator, strategy=_fsdp_strategy(), devices=1,
                                    precision="bf16-mixed")
                        lite.launch(fsdp_section, plan, weights, result, log)
                    finally:
                        os.environ.clear()
                        os.environ.update(saved)
                else:
                    lite = Lite(accelerator=accelerator, strategy="single_device", devices=1, precision="bf16-mixed")
                    lite.launch(single_device_section, plan, section == "compiled", weights, result, log)
                result["elapsed_s"] = time.perf_counter() - started
                write_reports(result, out)
                _free(plan.device)
    except BudgetReached as reached:
        result["budget_reached"] = True
        result["skipped"] += [{"config": f"{name}/*", "reason": str(reached)} for name in [section, *sections] if name]
        log(f"  {reached}: stopped, writing what was measured")
    result["elapsed_s"] = time.perf_counter() - started
    write_reports(result, out)
    return result


def _fsdp_strategy() -> Any:
    from core_fsdp import FSDPStrategy  # type: ignore[import-not-found,unused-ignore]

    return FSDPStrategy(auto_wrap_policy={Block})


def _free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_gpt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-gpu-out"), help="where gpu-results.json/.md go")
    parser.add_argument("--budget", type=float, default=180.0, help="seconds; enforced (default: %(default)s)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model, 1 round: proves the code runs")
    parser.add_argument("--list", action="store_true", help="print the configurations and exit")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset of %(default)s")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per block (default 6; tiny 2)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5; tiny 1)")
    args = parser.parse_args(argv)
    sections = tuple(name for name in args.sections.split(",") if name)
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    shape = TINY if args.tiny else GPT2_SMALL
    plan = Plan(shape=shape, device=torch.device(args.device), warmup=2 if args.tiny else 3,
                steps=args.steps or (2 if args.tiny else 6), rounds=args.rounds or (1 if args.tiny else 5),
                sections=sections)
    if args.list:
        print(f"GPT {shape.layers}x{shape.dim}, {shape.heads} heads, context {shape.context}, vocabulary "
              f"{shape.vocab}, batch {shape.batch}: {parameter_count(shape) / 1e6:.1f} M parameters; {plan.warmup} "
              f"warm-up steps, {plan.rounds} rounds x {plan.steps} timed steps; budget {args.budget:.0f} s")
        for name in configurations(sections):
            runner = name.split("/")[1]
            reason = peer_missing(runner) if runner in PEERS else None
            print(f"  {name}" + (f"  (skipped here: {reason})" if reason else ""))
        return 0
    if plan.device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: use --device cpu --tiny for a smoke run", file=sys.stderr)
        return 2
    result = run(plan, args.out, args.budget, log=lambda line: print(line, flush=True))
    print(markdown(result))
    failed = [entry for entry in result["skipped"] if "failed" in entry["reason"]]
    return 1 if failed or not result["rows"] else 0


if __name__ == "__main__":
    sys.exit(main())
