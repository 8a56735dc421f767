"""One 2-rank job: an MLP of ``DEPTH`` ``Linear(WIDTH, WIDTH)`` layers, one Adam step, then what each rank holds.

    python -m bench.memory_worker STRATEGY WIDTH DEPTH OUT

Global rank 0 writes ``OUT/report-<STRATEGY>.json`` with, per rank:

- ``held``: the bytes of the parameter, gradient and optimizer-state tensors this rank actually holds. A
  ``DTensor`` (an ``fsdp`` shard) counts its local tensor; every tensor counts its whole storage, and a storage
  shared by several tensors (FSDP's flat gradient buffer of a unit, views) counts once;
- ``ddp_buckets``: the bytes of ``ddp``'s gradient communication buckets (not in ``held``);
- ``peak_mb``: ``ru_maxrss``, the peak resident memory of the process, runtime included.
"""

from __future__ import annotations

import gc
import json
import re
import resource
import sys
from collections.abc import Iterable
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from core import Lite


class StorageCounter:
    """Sums the bytes of the storages behind tensors, each storage once."""

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def count(self, tensors: Iterable[torch.Tensor]) -> int:
        total = 0
        for tensor in tensors:
            local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
            storage = local.untyped_storage()
            if storage.nbytes() == 0 or storage.data_ptr() in self._seen:
                continue
            self._seen.add(storage.data_ptr())
            total += storage.nbytes()
        return total


def held_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state on this rank (see the module docstring)."""
    parameters = list(model.parameters())
    counter = StorageCounter()
    state = [value for entry in optimizer.state.values() for value in entry.values() if isinstance(value, torch.Tensor)]
    return {
        "parameters": counter.count(parameters),
        "gradients": counter.count(parameter.grad for parameter in parameters if parameter.grad is not None),
        "optimizer_state": counter.count(state),
    }


def ddp_bucket_bytes(model: torch.nn.Module) -> int:
    """Bytes of ``DistributedDataParallel``'s gradient communication buckets (0 without one).

    With ``gradient_as_bucket_view=False`` (the default) they are a second gradient-sized buffer that the
    gradients are copied into; read from DDP's logging data (a private API: 0 if it is gone).
    """
    wrapper = next((sub for sub in model.modules() if isinstance(sub, DistributedDataParallel)), None)
    logging_data = getattr(wrapper, "_get_ddp_logging_data", None)
    if logging_data is None:
        return 0
    sizes = str(logging_data().get("bucket_sizes", ""))
    return sum(int(size) for size in re.findall(r"\d+", sizes))


def measure(lite: Lite, width: int, depth: int) -> tuple[dict[str, float], int]:
    """This rank's held bytes and peak resident MB after one Adam step, and the model's parameter count."""
    with lite.init_module(empty_init=True):
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model, optimizer = lite.setup(model, optimizer)
    loss = model(torch.randn(8, width)).square().mean()
    lite.backward(loss)
    optimizer.step()
    figures: dict[str, float] = {**held_bytes(model, optimizer.optimizer)}
    figures["ddp_buckets"] = ddp_bucket_bytes(model)
    figures["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return figures, sum(parameter.numel() for parameter in model.parameters())


def main(lite: Lite, width: int, depth: int, out: Path, strategy: str) -> None:
    torch.set_num_threads(1)
    figures, parameters = measure(lite, width, depth)
    # An fsdp model holds its process group through reference cycles; freed at interpreter exit, the group's
    # gloo threads abort the process. Free it before the strategy's teardown destroys the group.
    gc.collect()
    gathered = lite.all_gather(torch.tensor(list(figures.values()), dtype=torch.float64))
    if lite.is_global_zero:
        ranks = [dict(zip(figures, row.tolist(), strict=True)) for row in gathered]
        report = {"ranks": ranks, "parameters": parameters}
        (out / f"report-{strategy}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    strategy, width, depth, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    Lite(accelerator="cpu", strategy=strategy, devices=2).launch(main, width, depth, out, strategy)
