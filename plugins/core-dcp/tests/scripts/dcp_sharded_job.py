"""Two ranks save DTensor shards with the 'distributed' checkpoint_io; each reads the whole state back.

    python dcp_sharded_job.py OUT

Writes OUT/sharded (every rank writes its half of the sharded tensors), OUT/whole (rank 0 alone, through
Lite.save under ddp) and OUT/report-<rank>.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import core

ROWS = 1024


def full_weight() -> torch.Tensor:
    return torch.arange(ROWS * 8, dtype=torch.float32).reshape(ROWS, 8)


def main(lite: core.Lite, out: Path) -> None:
    mesh = init_device_mesh("cpu", (lite.world_size,))
    weight = distribute_tensor(full_weight(), mesh, [Shard(0)], src_data_rank=None)
    moment = distribute_tensor(full_weight() * 2, mesh, [Shard(0)], src_data_rank=None)
    state = {
        "model": {"weight": weight, "bias": torch.ones(8)},
        "optimizer": {"state": {0: {"exp_avg": moment, "step": torch.tensor(3.0)}}, "param_groups": [{"params": [0]}]},
        "step": 5,
    }
    # The strategy (ddp) writes from rank 0 only; a sharding strategy calls the checkpoint_io on every rank.
    lite.active.hook.checkpoint_io_save(checkpoint=state, path=str(out / "sharded"), storage_options=None)
    loaded = lite.active.hook.checkpoint_io_load(path=str(out / "sharded"), map_location="cpu", weights_only=True)
    lite.save(out / "whole", {"weight": full_weight(), "step": 1})
    whole = lite.load(out / "whole")
    report = {
        "local_rows": weight.to_local().shape[0],
        "weight_equal": torch.equal(loaded["model"]["weight"], full_weight()),
        "moment_equal": torch.equal(loaded["optimizer"]["state"][0]["exp_avg"], full_weight() * 2),
        "keys": sorted(loaded),
        "whole_equal": torch.equal(whole["weight"], full_weight()) and whole["step"] == 1,
    }
    (out / f"report-{lite.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    core.Lite(accelerator="cpu", strategy="ddp", devices=2, plugins=["distributed"]).launch(main, Path(sys.argv[1]))
