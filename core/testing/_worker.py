"""The script a conformance job runs: ``python -m core.testing._worker SPEC.json``.

It builds a ``Lite`` from the spec (plugins by alias or by an importable factory), launches the requested
cases through the strategy's own launch, and lets every rank write what it saw to ``OUT/rank-N.json``.
Each process that returns from ``launch`` then writes ``OUT/after-launch-PID.json``. The checks live
in the test classes; this file only records.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

import core

REDUCE_OPS: Final = ("sum", "mean", "max", "min")
GLOBAL_BATCH: Final = 64
EQUIVALENCE_EPOCHS: Final = 2
SAMPLES: Final = 640
BARRIER_DELAY: Final = 1.0


def import_factory(target: str) -> Callable[[], object]:
    """``"package.module:attribute"`` -> the callable it names."""
    module_name, _, attribute = target.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def build_plugin(reference: Mapping[str, str] | str | None) -> object:
    """An alias stays an alias (the resolver loads it); ``{"factory": "mod:attr"}`` is called here."""
    if reference is None or isinstance(reference, str):
        return reference
    if "factory" in reference:
        return import_factory(reference["factory"])()
    return reference["alias"]


def build_settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    settings = dict(spec["settings"])
    settings["strategy"] = build_plugin(settings.get("strategy"))
    settings["accelerator"] = build_plugin(settings.get("accelerator"))
    settings["precision"] = build_plugin(settings.get("precision"))
    settings["plugins"] = [build_plugin(item) for item in settings.get("plugins") or ()]
    return settings


# --------------------------------------------------------------------------------------------------
# Data and models shared by the cases (and by the reference computed on rank 0)
# --------------------------------------------------------------------------------------------------


def regression_data() -> TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    features = torch.randn(SAMPLES, 16, generator=generator)
    weights = torch.randn(16, 4, generator=generator)
    targets = torch.tanh(features @ weights) + 0.1 * torch.randn(SAMPLES, 4, generator=generator)
    return TensorDataset(features, targets)


def regression_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def _full(tensor: torch.Tensor) -> list[Any]:
    """The whole tensor as a flat list; a sharded ``DTensor`` (FSDP) is gathered first, on every rank."""
    full_tensor = getattr(tensor, "full_tensor", None)
    whole = full_tensor() if callable(full_tensor) else tensor
    return list(whole.detach().cpu().flatten().tolist())


def _parameters(module: torch.nn.Module) -> dict[str, list[Any]]:
    return {name: _full(value) for name, value in module.state_dict().items()}


def _train(lite: core.Lite, model: torch.nn.Module, batch_size: int, epochs: int) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    module, optimizer = lite.setup(model, optimizer)
    loader = lite.setup_dataloaders(DataLoader(regression_data(), batch_size=batch_size, shuffle=False))
    losses = []
    for _ in range(epochs):
        for features, targets in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(module(features), targets)
            lite.backward(loss, model=module)
            optimizer.step()
            losses.append(float(loss.detach()))
    return losses


def reference_parameters(world_size: int) -> dict[str, list[Any]]:
    """One process, plain PyTorch, the global batch: what data-parallel training must reproduce."""
    model = regression_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(regression_data(), batch_size=GLOBAL_BATCH, shuffle=False)
    for _ in range(EQUIVALENCE_EPOCHS):
        for features, targets in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(features), targets).backward()
            optimizer.step()
    return _parameters(model)


# --------------------------------------------------------------------------------------------------
# The cases; each returns plain JSON data
# --------------------------------------------------------------------------------------------------


def collectives(lite: core.Lite, spec: Mapping[str, Any]) -> dict[str, Any]:
    rank, world_size = lite.global_rank, lite.world_size
    local = torch.tensor([[rank + 1.0, -(rank + 1.0), 10.0 * rank], [0.5, 2.0**rank, 3.0]], device=lite.device)
    reduced = {op: lite.all_reduce(local.clone(), reduce_op=op).cpu().tolist() for op in REDUCE_OPS}
    integers = lite.all_reduce(torch.tensor([rank + 1, 7], device=lite.device), reduce_op="sum")
    gathered = lite.all_gather(torch.tensor([[rank, rank + 0.5, -rank]], device=lite.device))
    payload = {"rank": rank, "tensor": torch.arange(3) * (rank + 1), "nested": {"items": [rank, "text"]}}
    from_first = lite.broadcast(payload, src=0)
    from_last = lite.broadcast(payload, src=world_size - 1)
    if rank == world_size - 1 and world_size > 1:
        time.sleep(BARRIER_DELAY)
    started = time.monotonic()
    lite.barrier("conformance")
    waited = time.monotonic() - started

    def described(received: Any) -> dict[str, Any]:
        return {
            "type": type(received).__name__,
            "rank": received["rank"],
            "tensor": received["tensor"].cpu().tolist(),
            "nested": received["nested"],
        }

    return {
        "reduced": reduced,
        "integer_sum": {"values": integers.cpu().tolist(), "dtype": str(integers.dtype)},
        "gathered": {"shape": list(gathered.shape), "values": gathered.cpu().tolist()},
        "broadcast_from_first": described(from_first),
        "broadcast_from_last": described(from_last),
        "barrier_waited": waited,
    }


def equivalence(lite: core.Lite, spec: Mapping[str, Any]) -> dict[str, Any]:
    world_size = lite.world_size
    model = regression_model()
    losses = _train(lite, model, GLOBAL_BATCH // world_size, EQUIVALENCE_EPOCHS)
    result: dict[str, Any] = {"parameters": _parameters(model), "steps": len(losses)}
    if lite.global_rank == 0:
        result["reference"] = reference_parameters(world_size)
    return result


def checkpoint(lite: core.Lite, spec: Mapping[str, Any]) -> dict[str, Any]:
    torch.manual_seed(1)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    module, wrapped_optimizer = lite.setup(model, optimizer)
    wrapped_optimizer.zero_grad()
    lite.backward(module(torch.ones(4, 8, device=lite.device)).square().mean(), model=module)
    wrapped_optimizer.step()
    path = os.path.join(spec["out"], "conformance.ckpt")
    lite.save(path, {"model": module, "optimizer": wrapped_optimizer, "step": 7})
    exists = os.path.exists(path)
    saved, saved_momentum = _parameters(model), _momentum(optimizer)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
        for state in optimizer.state.values():
            state["momentum_buffer"].zero_()
    remainder = lite.load(path, {"model": module, "optimizer": wrapped_optimizer})
    whole = lite.load(path)
    return {
        "exists_after_save": exists,
        "saved": saved,
        "restored": _parameters(model),
        "saved_momentum": saved_momentum,
        "restored_momentum": _momentum(optimizer),
        "remainder": {key: value for key, value in remainder.items() if isinstance(value, (int, float, str))},
        "keys": sorted(whole),
    }


def _momentum(optimizer: torch.optim.Optimizer) -> list[list[float]]:
    return [_full(state["momentum_buffer"]) for state in optimizer.state.values()]


def training(lite: core.Lite, spec: Mapping[str, Any]) -> dict[str, Any]:
    model = regression_model()
    features, targets = regression_data().tensors

    def full_loss() -> float:
        with torch.no_grad():
            output = model(features.to(lite.device))
            return float(torch.nn.functional.mse_loss(output.float().cpu(), targets))

    before = full_loss()
    losses = _train(lite, model, GLOBAL_BATCH // lite.world_size, EQUIVALENCE_EPOCHS)
    after = full_loss()
    return {"before": before, "after": after, "finite": all(math.isfinite(loss) for loss in losses)}


class BarePrecision:
    """A precision implementing no optional hook: the smallest one the contract allows."""

    kind: Final = "precision"
    name: Final = "bare"


STEPS_PER_PRECISION: Final = 2


def _use_precision(lite: core.Lite, precision: object, alias: str) -> None:
    """Make ``precision`` the precision of the running ``lite`` (the kit's own use of Lite's internals)."""
    from core.lite._hooks import BoundHooks
    from core.registry._resolver import _register

    active = lite._active
    active.pm.unregister(active.plugins["precision"])
    _register(active.pm, "precision", alias, precision)
    active.plugins["precision"] = precision
    active.config = attrs.evolve(active.config, precision=alias)
    attach = getattr(precision, "core_attach", None)
    if callable(attach):
        attach(active=active)
    lite._hooks = BoundHooks(active)


def _counted_steps(lite: core.Lite) -> dict[str, Any]:
    """Train a few steps through the strategy; count the steps the optimizer's own ``step`` took."""
    counter = StepCounter()
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    module, optimizer = lite.setup(model, counter.optimizer(model.parameters()))
    for _ in range(STEPS_PER_PRECISION):
        optimizer.zero_grad()
        output = module(torch.ones(2, 4, device=lite.device))
        lite.backward(output.float().square().mean(), model=module)
        optimizer.step()
    return {"taken": STEPS_PER_PRECISION, "stepped": counter.steps}


class StepCounter:
    """Counts the steps the optimizer's own ``step`` takes, also through a wrapper or a subclass a strategy makes.

    A step without any non-zero gradient is not counted: engines take one with zero gradients to create the
    optimizer's state (hivemind's averager, Horovod's ``broadcast_optimizer_state``), and it changes nothing.
    """

    def __init__(self) -> None:
        self.steps = 0
        counter = self

        class CountingSGD(torch.optim.SGD):
            def step(self, closure: Any = None) -> Any:
                if any(
                    parameter.grad is not None and bool(parameter.grad.detach().abs().sum() > 0)
                    for group in self.param_groups for parameter in group["params"]
                ):
                    counter.steps += 1
                return super().step(closure)

        self._optimizer_class = CountingSGD

    def optimizer(self, parameters: Any) -> torch.optim.Optimizer:
        return self._optimizer_class(parameters, lr=0.01)


def optimizer_steps(lite: core.Lite, spec: Mapping[str, Any]) -> dict[str, Any]:
    """For each precision of the spec (``bare``: one with no optional hook), count the steps N ``step()`` s take."""
    from core.registry._discovery import discover, load

    original = lite._active.plugins["precision"]
    original_alias = lite._active.config.precision
    results = {}
    try:
        for alias in spec["step_precisions"]:
            precision = BarePrecision() if alias == BarePrecision.name else load(discover().lookup("precision", alias))
            _use_precision(lite, precision, alias)
            results[alias] = _counted_steps(lite)
    finally:
        _use_precision(lite, original, original_alias)
    return results


CASES: Final[dict[str, Callable[[core.Lite, Mapping[str, Any]], dict[str, Any]]]] = {
    "collectives": collectives,
    "equivalence": equivalence,
    "checkpoint": checkpoint,
    "training": training,
    "optimizer_steps": optimizer_steps,
}


def _write(path: Path, data: Mapping[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def run_cases(lite: core.Lite, spec: Mapping[str, Any]) -> int:
    """Every rank: run each case in order and record it; a case that raises ends the job (and fails it)."""
    out = Path(spec["out"])
    report: dict[str, Any] = {"global_rank": lite.global_rank, "world_size": lite.world_size, "cases": {}}
    target = out / f"rank-{lite.global_rank}.json"
    for name in spec["cases"]:
        try:
            report["cases"][name] = {"ok": True, "result": CASES[name](lite, spec)}
        except Exception:
            report["cases"][name] = {"ok": False, "error": traceback.format_exc()}
            _write(target, report)
            raise
        _write(target, report)
    return lite.global_rank


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    # By module name, not as __main__: spawned ranks must find the function by importing it.
    from core.testing._worker import run_cases as task

    lite = core.Lite(**build_settings(spec))
    returned = lite.launch(task, spec)
    initialized = dist.is_available() and dist.is_initialized()
    _write(
        Path(spec["out"]) / f"after-launch-{os.getpid()}.json",
        {"process_group_initialized": initialized, "returned": returned},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
