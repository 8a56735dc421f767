"""One process, a one-stage pipeline, and the training-step mistakes the strategy refuses, one Lite or Trainer each.

    python pp_mistakes.py OUT

Writes OUT/mistakes.json: for each mistake, the type and message of the error it raised (or null).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nd_transformer as nd
import torch
from core_pipeline import PipelineStrategy
from pp_trainer import Language

import core


def make_mistake(lite: core.Lite, mistake: str) -> None:
    network = nd.model()
    model, _optimizer = lite.setup(network, nd.optimizer(network.parameters()))
    tokens, targets = nd.dataset(1).tensors
    if mistake == "odd batch":
        model(tokens[:3], target=targets[:3])
    elif mistake == "no target":
        model(tokens)
    elif mistake == "own loss":
        model(tokens, target=targets)
        lite.backward(nd.loss_fn(network.head(torch.zeros(1, nd.DIM)), targets[:1, 0]))  # type: ignore[misc]


def main(out: Path) -> None:
    found: dict[str, list[str] | None] = {}
    for mistake in ("odd batch", "no target", "own loss", "no loss_fn"):
        loss_fn = None if mistake == "no loss_fn" else nd.loss_fn
        strategy = PipelineStrategy(split_points=[], schedule="GPipe", n_microbatches=2, loss_fn=loss_fn)
        try:
            core.Lite(accelerator="cpu", strategy=strategy, devices=1).launch(make_mistake, mistake)
        except core.CoreError as error:
            found[mistake] = [type(error).__name__, str(error)]
        else:
            found[mistake] = None
    found.update(trainer_mistakes(out))
    (out / "mistakes.json").write_text(json.dumps(found))


def trainer_mistakes(out: Path) -> dict[str, list[str] | None]:
    """The Trainer's accumulating gradients: the loss it scales is not the one the pipeline returned."""
    found: dict[str, list[str] | None] = {}
    module = Language()
    loader = torch.utils.data.DataLoader(nd.dataset(2), batch_size=nd.GLOBAL_BATCH)
    strategy = PipelineStrategy(split_points=[], schedule="GPipe", n_microbatches=2, loss_fn=nd.loss_fn)
    trainer = core.Trainer(accelerator="cpu", strategy=strategy, devices=1, max_epochs=1, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                           accumulate_grad_batches=2, default_root_dir=out)
    try:
        trainer.fit(module, loader)
    except core.CoreError as error:
        found["accumulate"] = [type(error).__name__, str(error)]
    else:
        found["accumulate"] = None
    return found


if __name__ == "__main__":
    main(Path(sys.argv[1]))
