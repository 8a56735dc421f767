"""`Lite` on two real processes (core-ddp, gloo on loopback): collectives, the data split, gradient sync and
its blocking, rank-zero ordering, and checkpoints, each checked on both ranks."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed"),
]

SCRIPT = '''
    import json
    import os
    import sys

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import core


    def expect(what, got, wanted):
        if got != wanted:
            raise AssertionError(f"{what}: got {got!r}, wanted {wanted!r}")


    def check(lite, workdir):
        rank = lite.global_rank
        expect("world_size", (lite.world_size, lite.local_rank, lite.node_rank), (2, rank, 0))
        expect("sum", lite.all_reduce(torch.tensor(rank + 1.0), reduce_op="sum").item(), 3.0)
        expect("mean", lite.all_reduce({"v": rank + 1.0})["v"].item(), 1.5)
        expect("max", lite.all_reduce(torch.tensor([rank, -rank]), reduce_op="max").tolist(), [1, 0])
        gathered = lite.all_gather({"a": torch.tensor([rank, 10 * rank]), "n": rank})
        expect("all_gather", (gathered["a"].tolist(), gathered["n"].tolist()), ([[0, 0], [1, 10]], [0, 1]))
        expect("broadcast", lite.broadcast({"from": rank}, src=1), {"from": 1})

        marker = os.path.join(workdir, "first.txt")
        with lite.rank_zero_first():
            if rank == 0:
                with open(marker, "w") as file:
                    file.write("rank zero was first")
            with open(marker) as file:
                expect("rank_zero_first", file.read(), "rank zero was first")
        lite.barrier("after first")

        loader = lite.setup_dataloaders(DataLoader(TensorDataset(torch.arange(8)), batch_size=2, shuffle=True))
        for epoch in range(2):
            mine = torch.cat([batch for (batch,) in loader])
            expect("share size", len(mine), 4)
            everything = lite.all_gather(mine).flatten().sort().values.tolist()
            expect(f"shares of epoch {epoch}", everything, list(range(8)))

        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        inputs = torch.ones(2, 4) * (rank + 1)  # different data on each rank
        with lite.no_backward_sync(model):
            lite.backward(model(inputs).sum())
        grads = lite.all_gather(model.module.weight.grad)
        expect("gradients differ without sync", torch.equal(grads[0], grads[1]), False)
        optimizer.zero_grad()
        lite.backward(model(inputs).sum())
        grads = lite.all_gather(model.module.weight.grad)
        expect("gradients agree after sync", torch.equal(grads[0], grads[1]), True)
        optimizer.step()

        path = os.path.join(workdir, "run.ckpt")
        lite.save(path, {"model": model, "optimizer": optimizer, "written_by": rank})
        weights = model.module.weight.detach().clone()
        torch.nn.init.zeros_(model.module.weight)
        rest = lite.load(path, {"model": model, "optimizer": optimizer})
        expect("written by", rest, {"written_by": 0})
        expect("weights restored", torch.equal(model.module.weight, weights), True)
        lite.print("printed by rank zero only")
        return {"rank": rank, "device": str(lite.device)}


    if __name__ == "__main__":
        strategy, workdir = sys.argv[1], sys.argv[2]
        result = core.Lite(accelerator="cpu", strategy=strategy, devices=2).launch(check, workdir)
        if result["rank"] == 0:  # every process running this script gets its own rank's result back
            print("RESULT " + json.dumps(result), flush=True)
'''


@pytest.mark.timeout(240)
def test_every_collective_and_the_checkpoint_path_on_two_ddp_processes(tmp_path: Path) -> None:
    script = tmp_path / "lite_ddp_check.py"
    script.write_text(textwrap.dedent(SCRIPT))
    result = subprocess.run(
        [sys.executable, str(script), "ddp", str(tmp_path)],
        capture_output=True, text=True, timeout=220,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    results = [json.loads(line[len("RESULT "):]) for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert results == [{"rank": 0, "device": "cpu"}]
    assert result.stdout.count("printed by rank zero only") == 1
