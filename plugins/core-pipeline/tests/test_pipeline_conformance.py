"""core's strategy conformance kit against ``pipeline``: the collectives and the clean end apply; two checks do not.

The strategy under test cuts the kit's models nowhere (``split_points=[]``: one stage) and runs 2 data-parallel copies
of that one-stage pipeline, which is the only layout a model the kit builds (a single ``Linear``) allows.

Not applicable, and why:
- ``test_ddp_equivalence`` and ``test_checkpoint_round_trip``: the kit trains with ``loss = f(model(x));
  lite.backward(loss)``, but a pipeline's training step is ``model(x, target=y)`` (the schedule runs forward and
  backward of every micro-batch and the last stage computes the loss), and ``model(x)`` in training mode is refused
  with a ConfigurationError that says so. The same properties are tested in the pipeline's own terms:
  test_pipeline_training.py (2 copies average their gradients and train like one process; 2 stages under GPipe,
  1F1B, Interleaved1F1B train like the unsplit model) and test_pipeline_checkpoints.py (round trips across layouts).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch.nn.functional as F
from core_pipeline import PipelineStrategy

from core.testing import StrategyConformance


def two_copies_of_one_stage() -> PipelineStrategy:
    return PipelineStrategy(split_points=[], schedule="GPipe", n_microbatches=1, loss_fn=F.mse_loss)


class TestPipelineConformance(StrategyConformance):
    plugin_factory = "test_pipeline_conformance:two_copies_of_one_stage"
    cases: ClassVar[tuple[str, ...]] = ("collectives",)

    def test_ddp_equivalence(self, job: Any) -> None:
        pytest.skip("a pipeline trains with model(x, target=y), not the kit's loss = f(model(x)); "
                    "see test_pipeline_training.py")

    def test_checkpoint_round_trip(self, job: Any) -> None:
        pytest.skip("the kit's checkpoint case trains one step with model(x); see test_pipeline_checkpoints.py")
