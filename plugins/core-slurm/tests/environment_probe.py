"""Print as one JSON line what core resolves in this process: the environment and its ClusterInfo.

Run under a real launcher (``srun``, ``mpirun``, ``torchrun``) by the environment tests:
``python environment_probe.py DEVICES NUM_NODES [PLUGIN...]``. A passive strategy stands in for ``ddp`` so
that the probe depends on nothing but core and the environment plugins. Exit code 3 on a CoreError.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any

import core


class ProbeStrategy:
    """Accepts any number of processes and never talks to the others."""

    kind = "strategy"
    name = "probe"

    @core.hookimpl
    def strategy_launch(self, function: Any, args: Any, kwargs: Any) -> Any:
        return function(*args, **kwargs)

    @core.hookimpl
    def strategy_setup_module(self, module: Any) -> Any:
        return module

    @core.hookimpl
    def strategy_reduce(self, tensor: Any) -> Any:
        return tensor

    @core.hookimpl
    def strategy_all_gather(self, tensor: Any) -> Any:
        return tensor

    @core.hookimpl
    def strategy_broadcast(self, obj: Any) -> Any:
        return obj

    @core.hookimpl
    def strategy_barrier(self) -> None:
        return None


def main() -> int:
    devices, num_nodes, plugins = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            active = core.resolve(
                accelerator="cpu", strategy=ProbeStrategy(), devices=devices, num_nodes=num_nodes, plugins=plugins
            )
            info = active.cluster
        except core.CoreError as error:
            messages = [str(w.message) for w in caught]
            print(json.dumps({"error": f"{type(error).__name__}: {error}", "warnings": messages}))
            return 3
    report = {
        "environment": active.config.environment,
        "externally": active.hook.environment_creates_processes_externally(),
        "world_size": info.world_size,
        "global_rank": info.global_rank,
        "local_rank": info.local_rank,
        "node_rank": info.node_rank,
        "main_address": info.main_address,
        "main_port": info.main_port,
        "exported": {name: os.environ.get(name) for name in ("MASTER_ADDR", "MASTER_PORT")},
        "warnings": [str(w.message) for w in caught if issubclass(w.category, core.CoreWarning)],
    }
    active.hook.environment_teardown()
    report["after_teardown"] = {name: os.environ.get(name) for name in ("MASTER_ADDR", "MASTER_PORT")}
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
