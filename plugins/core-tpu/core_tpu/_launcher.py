"""The ``xla`` launcher: one process per TPU device through ``xmp.spawn``, rank 0's result returned.

As with Lightning's XLA launcher, the function and its arguments must be picklable (PJRT hands them
to a process pool) and the script's entry point must sit under ``if __name__ == "__main__"``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from core.toolkit.tensors import apply_to_tensors

from ._runtime import xla


def export_ranks() -> None:
    """Publish this worker's ranks the way every launcher does, so the environment plugin reads them."""
    xr = xla("runtime")
    os.environ["LOCAL_RANK"] = str(xr.local_ordinal())
    os.environ["RANK"] = str(xr.global_ordinal())
    os.environ["WORLD_SIZE"] = str(xr.world_size())
    os.environ["NODE_RANK"] = str(getattr(xr, "host_index", lambda: 0)())


def _worker(
    index: int, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], results: Any
) -> None:
    xm, xr = xla("core.xla_model"), xla("runtime")
    export_ranks()
    result = function(*args, **kwargs)
    if xr.global_ordinal() == 0:
        results.put(apply_to_tensors(result, lambda tensor: tensor.detach().cpu()))
    # Every worker waits for the others before exiting, so none tears down the runtime under a peer.
    xm.rendezvous("core-xla-launcher-end")


def launch(function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], processes: int) -> Any:
    """Run ``function`` in ``processes`` worker processes (1, or every device of the host)."""
    xmp = xla("distributed.xla_multiprocessing")
    # PJRT pickles what it sends to the workers, so the queue must be a picklable manager proxy.
    results = torch.multiprocessing.Manager().Queue()
    # PJRT accepts nprocs=None (every device) or 1 only.
    xmp.spawn(_worker, args=(function, args, kwargs, results), nprocs=1 if processes == 1 else None)
    return results.get()
