"""torchmetrics objects passed to ``self.log`` behave as in Lightning: the step value is the batch's, the epoch value
is ``compute()`` over the epoch (synchronised across processes by torchmetrics), and the metric is reset after each
epoch and each evaluation run. Accuracies are checked against the predictions the module recorded, by hand.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("torchmetrics", reason="torchmetrics is a test dependency (pip install torchmetrics)")

SCRIPTS = Path(__file__).parent / "trainer_scripts"
sys.path.insert(0, str(SCRIPTS))

import torchmetrics_module as tm  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import core  # noqa: E402


def accuracy(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    predictions = torch.cat([prediction for prediction, _ in pairs])
    targets = torch.cat([target for _, target in pairs])
    return float((predictions == targets).double().mean())


def fit(module: tm.Classifier, recorder: tm.Recorder | None = None, epochs: int = 2) -> core.Trainer:
    core.seed_everything(5, verbose=False)
    trainer = core.Trainer(accelerator="cpu", max_epochs=epochs, logger=recorder or False, log_every_n_steps=1,
                           enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                           num_sanity_val_steps=2)
    # 44 samples in batches of 8: the last batch has 4, so a mean of batch accuracies would differ from compute().
    trainer.fit(module, DataLoader(tm.data(44, 1), batch_size=8), DataLoader(tm.data(20, 2), batch_size=8))
    return trainer


def test_step_epoch_and_validation_values_are_the_metrics_and_it_is_reset_each_epoch() -> None:
    recorder = tm.Recorder()
    # Seeded before the module is built: torch seeds each process at random, and with random initial weights the
    # sample-level accuracy equals the mean of batch accuracies for 22 of 500 initialisations (the check below fails).
    core.seed_everything(5, verbose=False)
    module = tm.Classifier()
    fit(module, recorder)
    steps = [metrics["train_acc_step"] for _, metrics in recorder.records if "train_acc_step" in metrics]
    assert steps == pytest.approx([accuracy([(p, t)]) for _, p, t in module.seen], abs=1e-6)  # each batch's own
    epochs = [metrics["train_acc_epoch"] for _, metrics in recorder.records if "train_acc_epoch" in metrics]
    by_epoch = [[(p, t) for epoch, p, t in module.seen if epoch == index] for index in (0, 1)]
    # Epoch 1's value covers epoch 1 only (reset after epoch 0), over samples (not a mean of batch values).
    assert epochs == pytest.approx([accuracy(by_epoch[0]), accuracy(by_epoch[1])], abs=1e-6)
    assert accuracy(by_epoch[1]) != pytest.approx(accuracy(by_epoch[0] + by_epoch[1]), abs=1e-6)
    mean_of_batches = sum(accuracy([pair]) for pair in by_epoch[1]) / len(by_epoch[1])
    assert accuracy(by_epoch[1]) != pytest.approx(mean_of_batches, abs=1e-6)  # so the check above can tell
    # Validation: compute() over the 20 samples with the final weights; the sanity check's 2 batches were reset.
    inputs, targets = tm.data(20, 2).tensors
    with torch.no_grad():
        expected = float((module(inputs).argmax(dim=1) == targets).double().mean())
    validation = [metrics["val_acc"] for _, metrics in recorder.records if "val_acc" in metrics]
    assert validation[-1] == pytest.approx(expected, abs=1e-6)
    assert module.val_acc.update_count == 0 and module.train_acc.update_count == 0  # reset at the end, as Lightning


def test_logging_a_metric_only_updated_on_step_or_another_object_under_the_name_is_refused() -> None:
    with pytest.raises(core.ConfigurationError, match=r"only update\(\) was called.*metric\(preds, target\)"):
        fit(tm.Classifier(update_only_on_step=True), epochs=1)

    class Swapping(tm.Classifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            inputs, targets = batch
            metric = self.val_acc if batch_idx == 0 else self.train_acc
            metric.update(self(inputs), targets)
            self.log("val_acc", metric)

    with pytest.raises(core.ConfigurationError, match=r"log that same object each time"):
        fit(Swapping(), epochs=1)


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
def test_on_two_processes_the_epoch_values_cover_every_process(tmp_path: Path) -> None:
    output = tmp_path / "result.pt"
    environment = {key: value for key, value in os.environ.items()
                   if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                                  "CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"}}
    finished = subprocess.run([sys.executable, str(SCRIPTS / "torchmetrics_module.py"), str(output)],
                              capture_output=True, text=True, timeout=240, env={**environment, "OMP_NUM_THREADS": "1"})
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-4000:]
    saved = torch.load(output, weights_only=True)
    seen = [torch.load(f"{output}.seen-{rank}", weights_only=True) for rank in (0, 1)]
    last_epoch = [(p, t) for rank_seen in seen for epoch, p, t in rank_seen if epoch == 1]
    only_rank_0 = [(p, t) for epoch, p, t in seen[0] if epoch == 1]
    assert saved["fit"]["train_acc_epoch"] == pytest.approx(accuracy(last_epoch), abs=1e-6)  # both ranks' samples
    assert accuracy(last_epoch) != pytest.approx(accuracy(only_rank_0), abs=1e-6)  # so the check above can tell
    net = tm.Classifier()
    net.load_state_dict(saved["state"], strict=False)
    inputs, targets = tm.data(40, 2).tensors
    with torch.no_grad():
        expected = float((net(inputs).argmax(dim=1) == targets).double().mean())
    assert saved["fit"]["val_acc"] == pytest.approx(expected, abs=1e-6)
    assert saved["validate"][0]["val_acc"] == pytest.approx(expected, abs=1e-6)
