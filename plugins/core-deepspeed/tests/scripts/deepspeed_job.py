"""The jobs of the core-deepspeed tests: one 2-process run each, several checks per run (DeepSpeed imports slowly).

    python deepspeed_job.py equivalence --strategy deepspeed_stage_2 --out DIR   # also with --strategy ddp
    python deepspeed_job.py sharded --strategy deepspeed_stage_3 --out DIR       # trains 2N steps, saves at N
    python deepspeed_job.py resume --strategy deepspeed_stage_3 --out DIR        # loads step N, trains N more

Each rank writes DIR/<mode>-rank<N>.pt; the tests read those files.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import core

STEPS = 20
GLOBAL_BATCH = 64
LR = 0.05
SAVE_AT = 10
# Every parameter is partitioned, however small: the default threshold keeps parameters under 1e5 elements whole.
FULLY_SHARDED = {"zero_optimization": {"stage3_param_persistence_threshold": 0}}


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(STEPS * GLOBAL_BATCH, 10, generator=generator)
    targets = inputs[:, :3].sum(dim=1, keepdim=True).sin() + 0.1 * torch.randn(len(inputs), 1, generator=generator)
    return TensorDataset(inputs, targets)


def network(hidden: int = 16) -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(10, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))


def full_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's complete weights on every rank (gathered from the shards under stage 3)."""
    import deepspeed

    parameters = list(model.parameters())
    with deepspeed.zero.GatheredParameters(parameters, enabled=hasattr(parameters[0], "ds_id")):
        return {name: tensor.detach().clone().float() for name, tensor in model.named_parameters()}


def train_plain(lite: core.Lite) -> dict[str, torch.Tensor]:
    module = network()
    model, optimizer = lite.setup(module, torch.optim.SGD(module.parameters(), lr=LR))
    loader = lite.setup_dataloaders(DataLoader(dataset(), batch_size=GLOBAL_BATCH // lite.world_size))
    for inputs, targets in loader:
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        lite.backward(loss, model=model)
        optimizer.step()
    return model.state_dict()


def train_accumulating(lite: core.Lite) -> dict[str, torch.Tensor]:
    micro_batches = 2
    module = network()
    model, optimizer = lite.setup(module, torch.optim.SGD(module.parameters(), lr=LR))
    loader = lite.setup_dataloaders(DataLoader(dataset(), batch_size=GLOBAL_BATCH // lite.world_size // micro_batches))
    for index, (inputs, targets) in enumerate(loader):
        last = index % micro_batches == micro_batches - 1
        with lite.no_backward_sync(model, enabled=not last):
            lite.backward(torch.nn.functional.mse_loss(model(inputs), targets) / micro_batches, model=model)
        if last:
            optimizer.step()
            optimizer.zero_grad()
    return model.state_dict()


def setup_without_optimizer(lite: core.Lite) -> dict[str, Any]:
    """A module set up alone (an engine for evaluation), and an optimizer set up on its own afterwards."""
    evaluator = lite.setup(network())
    probe = torch.linspace(-1, 1, 30).reshape(3, 10)
    with torch.no_grad():
        output = evaluator(probe)
    try:
        lite.setup_optimizers(torch.optim.SGD(evaluator.parameters(), lr=LR))
        refusal = ""
    except core.ConfigurationError as error:
        refusal = str(error)
    return {"probe": probe, "output": output, "setup_optimizers_refusal": refusal}


def equivalence(lite: core.Lite, out: Path) -> dict[str, Any]:
    results = {variant: train(lite) for variant, train in (("plain", train_plain), ("accumulate", train_accumulating))}
    weights = {variant: {name.removeprefix("module."): weight for name, weight in state.items()}
               for variant, state in results.items()}
    return {**weights, "alone": setup_without_optimizer(lite)}


def sharded_model(lite: core.Lite) -> tuple[Any, Any, dict[str, Any]]:
    with lite.init_module(empty_init=True):
        module = network(hidden=64)
    counts = partition_counts(module)
    model, optimizer = lite.setup(module, torch.optim.SGD(module.parameters(), lr=LR, momentum=0.9))
    return model, optimizer, {"after_init_module": counts, "after_setup": partition_counts(module)}


def partition_counts(module: torch.nn.Module) -> dict[str, int]:
    parameters = list(module.parameters())
    return {
        "partitioned": sum(hasattr(p, "ds_tensor") for p in parameters),
        "parameters": len(parameters),
        "local": sum(p.ds_tensor.numel() for p in parameters if hasattr(p, "ds_tensor")),
        "materialised": sum(p.numel() for p in parameters),
        "total": sum(getattr(p, "ds_numel", p.numel()) for p in parameters),
    }


def train_steps(lite: core.Lite, model: Any, optimizer: Any, steps: range) -> list[float]:
    inputs, targets = dataset().tensors
    losses = []
    for step in steps:
        start = step * GLOBAL_BATCH + lite.global_rank * (GLOBAL_BATCH // lite.world_size)
        batch = slice(start, start + GLOBAL_BATCH // lite.world_size)
        loss = torch.nn.functional.mse_loss(model(inputs[batch]), targets[batch])
        optimizer.zero_grad()
        lite.backward(loss)
        optimizer.step()
        losses.append(loss.item())
    return losses


def sharded(lite: core.Lite, out: Path) -> dict[str, Any]:
    model, optimizer, counts = sharded_model(lite)
    probe = torch.linspace(-1, 1, 30).reshape(3, 10)
    first = train_steps(lite, model, optimizer, range(SAVE_AT))
    with torch.no_grad():
        output_at_save = model(probe)
    lite.save(out / "ckpt", {"model": model, "optimizer": optimizer, "step": SAVE_AT, "note": "halfway"})
    second = train_steps(lite, model, optimizer, range(SAVE_AT, STEPS))
    consolidated = lite.load(out / "ckpt")  # no objects to restore: the full fp32 weights
    if lite.is_global_zero:
        torch.save(consolidated, out / "consolidated.pt")
    counts["after_training"] = partition_counts(model.module)
    return {"losses": first + second, "output_at_save": output_at_save, "probe": probe,
            "weights": full_weights(model.module), "counts": counts, "alone": setup_without_optimizer(lite)}


def resume(lite: core.Lite, out: Path) -> dict[str, Any]:
    model, optimizer, _ = sharded_model(lite)
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 0}
    remaining = lite.load(out / "ckpt", state)
    losses = train_steps(lite, model, optimizer, range(state["step"], STEPS))
    # The same checkpoint into a module set up alone (an evaluation engine: no optimizer shards of its own).
    with lite.init_module(empty_init=True):
        fresh = network(hidden=64)
    evaluator = lite.setup(fresh)
    evaluation: dict[str, Any] = {"model": evaluator, "step": 0}
    lite.load(out / "ckpt", evaluation)
    with torch.no_grad():
        evaluated = evaluator(torch.linspace(-1, 1, 30).reshape(3, 10))
    return {"losses": losses, "step": state["step"], "remaining": remaining, "weights": full_weights(model.module),
            "evaluator_output": evaluated, "evaluator_step": evaluation["step"]}


CLIP = 0.01  # the clipping run's gradient_clipping: far below the gradient norm of its loss


def refusal(call: Callable[[], Any]) -> str:
    try:
        call()
    except core.ConfigurationError as error:
        return str(error)
    return ""


def clipping(lite: core.Lite, out: Path) -> dict[str, Any]:
    """One SGD step (lr 1) of a large loss under gradient_clipping=CLIP, clip_gradients asked first each way."""
    module = network()
    before = [parameter.detach().clone() for parameter in module.parameters()]
    model, optimizer = lite.setup(module, torch.optim.SGD(module.parameters(), lr=1.0))
    inputs, targets = dataset().tensors
    lite.backward(100 * torch.nn.functional.mse_loss(model(inputs[:8]), targets[:8]), model=model)
    refusals = {"value": refusal(lambda: lite.clip_gradients(model, optimizer, clip_val=CLIP)),
                "other_norm": refusal(lambda: lite.clip_gradients(model, optimizer, max_norm=1.0))}
    returned = lite.clip_gradients(model, optimizer, max_norm=CLIP)
    optimizer.step()
    after = full_weights(model.module)
    moved = torch.cat([(after[name] - old).flatten() for (name, _), old in zip(module.named_parameters(), before,
                                                                                 strict=True)])
    return {"refusals": refusals, "returned": returned, "update_norm": float(moved.norm())}


MODES = {"equivalence": equivalence, "sharded": sharded, "resume": resume, "clipping": clipping}


def run(lite: core.Lite, mode: str, out: Path) -> None:
    result = MODES[mode](lite, out)
    strategy = lite.active.strategy
    result["config"] = getattr(strategy, "config", None)
    torch.save(result, out / f"{mode}-rank{lite.global_rank}.pt")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--strategy", default="deepspeed_stage_2")
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    strategy: Any = args.strategy
    if args.mode in ("sharded", "resume") and strategy.startswith("deepspeed_stage_3"):
        from core_deepspeed import DeepSpeedStrategy

        strategy = DeepSpeedStrategy(stage=3, config=FULLY_SHARDED, offload_optimizer="offload" in strategy,
                                     offload_parameters="offload" in strategy)
    if args.mode == "clipping":
        from core_deepspeed import DeepSpeedStrategy

        strategy = DeepSpeedStrategy(stage=int(strategy.split("_")[2]), gradient_clipping=CLIP)
    lite = core.Lite(accelerator="cpu", strategy=strategy, devices=2, precision=args.precision)
    lite.launch(run, args.mode, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
