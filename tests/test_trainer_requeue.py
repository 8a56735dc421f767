"""The Trainer's requeue checkpoints (Lightning's ``hpc_ckpt_<n>.ckpt``) without a scheduler: their numbering,
``ckpt_path="hpc"``, and when the Trainer adds its :class:`~core.fault_tolerance.AutoRequeue`.

The whole cycle against a real slurmctld (the notice, the checkpoint, ``scontrol requeue``, the requeued job's
``fit`` resuming from it) is ``plugins/core-slurm/tests/test_slurm_requeue.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

import core
import core.lightning as L
from core.fault_tolerance import AutoRequeue, Requeueable
from core.trainer._checkpoint import hpc_checkpoint_numbers, hpc_resume_path, hpc_save_path


class Regression(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.layer(inputs), targets)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(32, 2, generator=generator), torch.randn(32, 1, generator=generator)),
                      batch_size=4)


def trainer(root: Path, **flags: Any) -> Any:  # core.lightning.Trainer (its Lightning names, ckpt_path)
    return L.Trainer(accelerator="cpu", devices=1, default_root_dir=root, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, **flags)


@settings(max_examples=30, deadline=None)
@given(numbers=st.sets(st.integers(min_value=1, max_value=500), max_size=6),
       others=st.lists(st.sampled_from(["hpc_ckpt_x.ckpt", "hpc_ckpt_3.ckpt.tmp", "last.ckpt", "hpc_ckpt_.ckpt"]),
                       max_size=3))
def test_the_next_requeue_checkpoint_numbers_on_from_the_highest(
    tmp_path_factory: pytest.TempPathFactory, numbers: set[int], others: list[str]
) -> None:
    directory = tmp_path_factory.mktemp("hpc")
    for name in [*(f"hpc_ckpt_{number}.ckpt" for number in numbers), *others]:
        (directory / name).touch()
    assert hpc_checkpoint_numbers(str(directory)) == sorted(numbers)
    highest = max(numbers, default=0)
    assert hpc_save_path(str(directory)) == str(directory / f"hpc_ckpt_{highest + 1}.ckpt")
    assert hpc_resume_path(str(directory)) == (str(directory / f"hpc_ckpt_{highest}.ckpt") if numbers else None)


def test_ckpt_path_hpc_resumes_from_the_newest_requeue_checkpoint_and_says_when_there_is_none(tmp_path: Path) -> None:
    with pytest.raises(core.ConfigurationError, match=r'fit\(ckpt_path="hpc"\) is set but no HPC checkpoint was found'):
        trainer(tmp_path, max_steps=1).fit(Regression(), loader(), ckpt_path="hpc")
    first = trainer(tmp_path, max_steps=3)
    first.fit(Regression(), loader())
    first.save_checkpoint(tmp_path / "hpc_ckpt_1.ckpt")
    second = trainer(tmp_path, max_steps=5)
    second.fit(Regression(), loader())
    second.save_checkpoint(tmp_path / "hpc_ckpt_2.ckpt")
    resumed = trainer(tmp_path, max_steps=6)
    resumed.fit(Regression(), loader(), ckpt_path="hpc")
    assert resumed.ckpt_path == str(tmp_path / "hpc_ckpt_2.ckpt") and resumed.global_step == 6
    # Outside a job that can requeue, fit() without ckpt_path starts afresh, whatever hpc_ckpt_<n>.ckpt is there.
    fresh = trainer(tmp_path, max_steps=2)
    fresh.fit(Regression(), loader())
    assert fresh.ckpt_path is None and fresh.global_step == 2


def test_the_trainer_adds_auto_requeue_only_for_an_environment_that_can_requeue(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    class Record(core.callbacks.Callback):
        def on_train_start(self, trainer: Any, module: Any) -> None:
            seen.append([type(callback).__name__ for callback in trainer.callbacks])

    run = trainer(tmp_path, max_steps=1, callbacks=[Record()])
    run.fit(Regression(), loader())
    assert seen == [["Record"]]  # the local environment cannot requeue its job
    slurm = pytest.importorskip("core_slurm")
    assert isinstance(slurm.SLURMEnvironment(), Requeueable)
    assert not isinstance(object(), Requeueable)
    assert run.callbacks == [run.callbacks[0]] and not isinstance(run.callbacks[0], AutoRequeue)
