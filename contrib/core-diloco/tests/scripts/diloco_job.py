"""One Lite run under ``strategy="ddp"`` with the diloco extension; rank N writes OUT/rank-N.json.

    python diloco_job.py OUT DEVICES REPLICAS

Each phase sets the extension's options (they are read when an optimizer is set up) and trains a fresh model:

- ``equivalence``: ``H = 1``, plain SGD at lr 1 as outer optimizer, an MLP with SGD + momentum inside, against
  ``DistributedDataParallel`` over all ranks built here by hand on the same data: the same parameters.
- ``gpt``: the benchmark's GPT (bench/gpt_worker.py) at a tiny size on a learnable token stream (a random bigram
  chain), ``H = 4`` with the paper's Nesterov outer optimizer and AdamW inside, against hand-built DDP over all
  ranks on the same tokens: the loss, and the bytes passed to the collectives between groups per step.
- ``variants``: float32, bf16, int8 and streaming (2 fragments, overlapped) on the same GPT: bytes per step and
  the loss.
- ``checkpoint``: streaming, ``H = 2``, AdamW; save after 3 steps (a fragment in flight), go on to 6; a fresh
  model and optimizer load the checkpoint and take steps 4 to 6 again: bitwise the same state.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import attrs
import torch
import torch.distributed as dist
import torch.nn.functional as F
from core_diloco import DiLoCoExtension
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

import core

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repository root, for bench.gpt_worker
from bench.gpt_worker import GPT

SHAPE = (1, 32, 16)  # layers, d_model, context: the benchmark's model at a tiny size
SUBVOCAB = 64  # the bigram chain uses the first 64 of the model's 1024 tokens
BATCH = 4  # sequences per rank per step
GPT_STEPS = 48
VARIANT_STEPS = 16


class Bytes:
    """Counts the bytes of the tensors passed to ``torch.distributed.all_reduce`` / ``all_gather`` per group."""

    def __init__(self) -> None:
        self.by_group: dict[int, int] = {}
        self.originals = (dist.all_reduce, dist.all_gather)

        def count(group: Any, *tensors: torch.Tensor) -> None:
            key = id(group) if group is not None else 0
            self.by_group[key] = self.by_group.get(key, 0) + sum(t.numel() * t.element_size() for t in tensors)

        def all_reduce(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            count(kwargs.get("group"), tensor)
            return self.originals[0](tensor, *args, **kwargs)

        def all_gather(outputs: list[torch.Tensor], tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            count(kwargs.get("group"), tensor)
            return self.originals[1](outputs, tensor, *args, **kwargs)

        dist.all_reduce, dist.all_gather = all_reduce, all_gather  # type: ignore[assignment]

    def take(self, group: Any) -> int:
        return self.by_group.pop(id(group), 0)


def counting_allreduce_hook(counter: list[int]) -> Any:
    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP reads real annotations; postponed ones fail
        counter[0] += bucket.buffer().numel() * bucket.buffer().element_size()
        return default_hooks.allreduce_hook(state, bucket)

    return hook


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def gpt() -> torch.nn.Module:
    torch.manual_seed(0)
    return GPT(*SHAPE)


def bigram_tokens(seed: int, batch: int) -> torch.Tensor:
    """Sequences of a fixed random bigram chain: each token has 2 possible successors (entropy ln 2 per token)."""
    table = torch.randint(0, SUBVOCAB, (SUBVOCAB, 2), generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.empty(batch, SHAPE[2] + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, SUBVOCAB, (batch,), generator=generator)
    choices = torch.randint(0, 2, (batch, SHAPE[2]), generator=generator)
    for position in range(SHAPE[2]):
        tokens[:, position + 1] = table[tokens[:, position], choices[:, position]]
    return tokens


def lm_loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def flat(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([parameter.detach().reshape(-1) for parameter in module.parameters()])


def checksums(lite: core.Lite, model: torch.nn.Module) -> list[float]:
    """Every rank's sum of its parameters (float64), in global rank order."""
    sums = [torch.zeros((), dtype=torch.float64) for _ in range(lite.world_size)]
    dist.all_gather(sums, flat(model).double().sum())
    return [float(value) for value in sums]


def train_gpt(
    lite: core.Lite, rank: int, steps: int, seed: int, probe: list[float] | None = None
) -> tuple[list[float], float, torch.nn.Module]:
    """Train a fresh GPT; ``probe`` gets every rank's checksum after step ``steps - 2`` (between synchronisations)."""
    model = gpt()
    module, optimizer = lite.setup(model, torch.optim.AdamW(model.parameters(), lr=3e-3))
    losses = []
    for step in range(steps):
        loss = lm_loss(module, bigram_tokens(seed + 1000 * step + rank, BATCH))
        lite.backward(loss, model=module)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
        if probe is not None and step == steps - 3:
            probe += checksums(lite, model)
    with torch.no_grad():
        evaluation = float(lm_loss(model, bigram_tokens(999_999, 64)))
    return losses, evaluation, model


def ddp_gpt(rank: int, steps: int, seed: int) -> tuple[list[float], float, int]:
    model = gpt()
    wrapped = DistributedDataParallel(model)
    sent = [0]
    wrapped.register_comm_hook(None, counting_allreduce_hook(sent))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        loss = lm_loss(wrapped, bigram_tokens(seed + 1000 * step + rank, BATCH))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        evaluation = float(lm_loss(model, bigram_tokens(999_999, 64)))
    for attribute in ("logger", "reducer", "process_group"):
        wrapped.__dict__.pop(attribute, None)
    return losses, evaluation, sent[0]


def ddp_reference(data: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.nn.Module:
    """The MLP trained by hand-built ``DistributedDataParallel`` over all ranks (SGD, lr 0.05, momentum 0.9)."""
    reference = mlp()
    wrapped = DistributedDataParallel(reference)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for features, targets in data:
        F.mse_loss(wrapped(features), targets).backward()
        optimizer.step()
        optimizer.zero_grad()
    for attribute in ("logger", "reducer", "process_group"):
        wrapped.__dict__.pop(attribute, None)
    return reference


def equivalence(lite: core.Lite, extension: DiLoCoExtension, counter: Bytes, rank: int) -> dict[str, Any]:
    extension.options = attrs.evolve(extension.options, sync_every=1, outer_optimizer="sgd", outer_lr=1.0,
                                     outer_momentum=0.0)
    steps = 6
    generator = torch.Generator().manual_seed(100 + rank)
    data = [(torch.randn(8, 16, generator=generator), torch.randn(8, 4, generator=generator)) for _ in range(steps)]
    model = mlp()
    module, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    counter.take(extension.replica_group)
    for features, targets in data:
        lite.backward(F.mse_loss(module(features), targets), model=module)
        optimizer.step()
        optimizer.zero_grad()
    diloco_bytes = counter.take(extension.replica_group)

    reference = ddp_reference(data)
    moved = float((flat(model) - flat(mlp())).abs().max())
    return {
        "max_abs_difference": float((flat(model) - flat(reference)).abs().max()),
        "parameters_moved": moved,
        "diloco_bytes": diloco_bytes,
        "steps": steps,
        "parameter_bytes": flat(model).numel() * 4,
    }


def gpt_phase(lite: core.Lite, extension: DiLoCoExtension, counter: Bytes, rank: int) -> dict[str, Any]:
    extension.options = attrs.evolve(extension.options, sync_every=4, outer_optimizer="nesterov", outer_lr=0.7,
                                     outer_momentum=0.9)
    before = extension.traffic.bytes
    counter.take(extension.replica_group)
    between: list[float] = []
    losses, evaluation, model = train_gpt(lite, rank, GPT_STEPS, seed=1, probe=between)
    counted = counter.take(extension.replica_group)
    ddp_losses, ddp_evaluation, ddp_bytes = ddp_gpt(rank, GPT_STEPS, seed=1)
    return {
        "losses": losses, "evaluation": evaluation, "ddp_losses": ddp_losses, "ddp_evaluation": ddp_evaluation,
        "diloco_bytes": extension.traffic.bytes - before, "counted_bytes": counted, "ddp_bytes": ddp_bytes,
        "steps": GPT_STEPS, "parameter_bytes": flat(model).numel() * 4,
        "checksums": checksums(lite, model), "checksums_between_syncs": between,
    }


def variants(lite: core.Lite, extension: DiLoCoExtension, counter: Bytes, rank: int) -> dict[str, Any]:
    report = {}
    settings: dict[str, dict[str, Any]] = {
        "float32": {"compression": "none"},
        "bf16": {"compression": "bf16"},
        "int8": {"compression": "int8"},
        "streaming": {"fragments": 2, "compression": "none"},
    }
    for label, options in settings.items():
        extension.options = attrs.evolve(extension.options, **{"sync_every": 4, "fragments": 1, **options})
        counter.take(extension.replica_group)
        losses, evaluation, _ = train_gpt(lite, rank, VARIANT_STEPS, seed=2)
        report[label] = {"losses": losses, "evaluation": evaluation, "bytes": counter.take(extension.replica_group),
                         "steps": VARIANT_STEPS}
    return report


def state_of(model: torch.nn.Module, optimizer: Any) -> list[torch.Tensor]:
    """Every tensor of the run's state: parameters, the inner optimizer's state, and the outer state in it."""
    tensors = [parameter.detach().clone() for parameter in model.parameters()]
    state = optimizer.state_dict()
    for entry in state["state"].values():
        tensors += [value.clone() for value in entry.values() if isinstance(value, torch.Tensor)]
    outer = state["diloco"]
    tensors += [tensor.clone() for tensor in outer["snapshot"]]
    for entry in outer["outer_optimizer"]["state"].values():
        tensors += [value.clone() for value in entry.values() if isinstance(value, torch.Tensor)]
    return tensors


def checkpoint(lite: core.Lite, extension: DiLoCoExtension, out: str, rank: int) -> dict[str, Any]:
    extension.options = attrs.evolve(extension.options, sync_every=2, fragments=2, compression="none")
    path = str(Path(out, "diloco.ckpt"))
    batches = [bigram_tokens(3 + 1000 * step + rank, BATCH) for step in range(6)]

    def steps(module: Any, optimizer: Any, which: range) -> None:
        for step in which:
            lite.backward(lm_loss(module, batches[step]), model=module)
            optimizer.step()
            optimizer.zero_grad()

    model = gpt()
    module, optimizer = lite.setup(model, torch.optim.AdamW(model.parameters(), lr=3e-3))
    steps(module, optimizer, range(3))
    in_flight_at_save = extension.syncs[-1].in_flight is not None
    lite.save(path, {"model": module, "optimizer": optimizer, "step": 3})
    steps(module, optimizer, range(3, 6))
    first = state_of(model, optimizer)

    torch.manual_seed(123)
    fresh = gpt()
    module, optimizer = lite.setup(fresh, torch.optim.AdamW(fresh.parameters(), lr=3e-3))
    remainder = lite.load(path, {"model": module, "optimizer": optimizer})
    sync = extension.syncs[-1]
    resumed_steps = sync.inner_steps
    steps(module, optimizer, range(3, 6))
    second = state_of(fresh, optimizer)
    return {
        "in_flight_at_save": in_flight_at_save,
        "remainder": {key: value for key, value in remainder.items() if isinstance(value, int)},
        "resumed_inner_steps": resumed_steps,
        "tensors": len(first),
        "bitwise": [bool(torch.equal(a, b)) for a, b in zip(first, second, strict=True)],
        "shapes_match": [a.shape == b.shape for a, b in zip(first, second, strict=True)],
    }


def run(lite: core.Lite, out: str) -> None:
    extension = lite.active.extensions["diloco"]
    assert isinstance(extension, DiLoCoExtension)
    counter = Bytes()
    rank = lite.global_rank
    report: dict[str, Any] = {
        "world_size": lite.world_size,
        "replica_index": extension.replica_index,
        "replica_ranks": dist.get_process_group_ranks(extension.replica_group),
        "inner_ranks": dist.get_process_group_ranks(extension.inner_group),
    }
    report["equivalence"] = equivalence(lite, extension, counter, rank)
    report["gpt"] = gpt_phase(lite, extension, counter, rank)
    report["variants"] = variants(lite, extension, counter, rank)
    report["checkpoint"] = checkpoint(lite, extension, out, rank)
    dist.all_reduce, dist.all_gather = counter.originals
    Path(out, f"rank-{rank}.json").write_text(json.dumps(report))


def main() -> None:
    out, devices, replicas = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    lite = core.Lite(accelerator="cpu", strategy="ddp", devices=devices,
                     plugins=[DiLoCoExtension(replicas=replicas)])
    lite.launch(run, out)


if __name__ == "__main__":
    main()
