"""``python pipeline_ac_job.py OUT``: the pipeline strategy (GPipe, 2 stages on 2 ranks) with and without
``activation_checkpointing_policy={Block}``, on core-model-parallel's test transformer, 3 AdamW steps each.

Each run writes OUT/<with|without>-<rank>.json: the loss of every step, the stage's state-dict keys and the bytes
autograd saved for backward during the steps (the schedule runs forward and backward inside ``model(...)``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import core
from core.toolkit.strategies import saved_tensor_bytes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "core-model-parallel" / "tests" / "scripts"))
import nd_transformer as nd  # noqa: E402


def run(lite: core.Lite, label: str, out: Path) -> None:
    network = nd.model()
    model, optimizer = lite.setup(network, nd.optimizer(network.parameters()))
    report: dict[str, Any] = {"losses": [], "keys": sorted(model.state_dict()), "saved": 0}
    loader = DataLoader(torch.utils.data.Subset(nd.dataset(), range(3 * nd.GLOBAL_BATCH)), batch_size=nd.GLOBAL_BATCH)
    for tokens, targets in loader:
        optimizer.zero_grad()
        with saved_tensor_bytes() as saved:
            loss = model(tokens, target=targets)  # the schedule: forward and backward of every micro-batch
        lite.backward(loss)
        optimizer.step()
        report["losses"].append(float(loss))
        report["saved"] = max(report["saved"], saved[0])
    (out / f"{label}-{lite.global_rank}.json").write_text(json.dumps(report))


def main(out: Path) -> None:
    from core_pipeline import PipelineStrategy

    for label, policy in (("without", None), ("with", {nd.Block})):
        strategy = PipelineStrategy(split_points=["layers.2"], schedule="GPipe", n_microbatches=2, loss_fn=nd.loss_fn,
                                    activation_checkpointing_policy=policy)
        core.Lite(accelerator="cpu", strategy=strategy, devices=2).launch(run, label, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
