"""Run by tests/test_tuner.py: lr_find on 2 ddp processes, then fit with the suggestion; each rank saves OUT-<rank>.

    python tune_ddp.py OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_tuner import Regressor

import core
from core.tuner import Tuner

if __name__ == "__main__":
    trainer = core.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=1, logger=False,
                           enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    model = Regressor()
    finder = Tuner(trainer).lr_find(model, min_lr=1e-4, max_lr=100.0, num_training=40)
    assert finder is not None
    try:
        Tuner(trainer).scale_batch_size(Regressor())
        refused = None
    except core.ConfigurationError as error:
        refused = str(error)
    trainer.fit(model)
    Path(f"{sys.argv[1]}-{trainer.global_rank}").write_text(json.dumps(
        {"lr": model.lr, "results": finder.results, "refused": refused, "global_step": trainer.global_step}))
