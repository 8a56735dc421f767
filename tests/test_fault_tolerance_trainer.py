"""The Trainer's ``FaultTolerance`` callback: checkpoints every N steps, and ``fit()`` resumes by itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import Callback
from core.fault_tolerance import CheckpointDirectory, FaultTolerance


@pytest.fixture(autouse=True)
def _fresh_seed_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"):
        monkeypatch.delenv(variable, raising=False)
    yield


def dataset(size: int = 96) -> TensorDataset:
    generator = torch.Generator().manual_seed(123)
    return TensorDataset(torch.randn(size, 10, generator=generator), torch.randint(0, 4, (size,), generator=generator))


class Classifier(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Dropout(0.2),
                                       torch.nn.Linear(32, 4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.cross_entropy(self.net(inputs), targets)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["saved_at_step"] = self.global_step

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.loaded_from_step = checkpoint.get("saved_at_step")

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)]


class Crash(Callback):
    """Dies at the end of a given training step, as a killed process would (no teardown of the callbacks)."""

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.at_step:
            raise KeyboardInterrupt(f"crash at step {self.at_step}")


class Steps(Callback):
    """Records the optimizer steps this run took."""

    def __init__(self) -> None:
        self.taken: list[int] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.taken.append(trainer.global_step)


def fit(root: Path, crash_at: int | None = None, steps: Steps | None = None) -> Classifier:
    core.seed_everything(7, verbose=False)
    module = Classifier()
    callbacks: list[Callback] = [FaultTolerance(root / "resumable", every_n_train_steps=4, keep=2), steps or Steps()]
    if crash_at is not None:
        callbacks.append(Crash(crash_at))
    trainer = core.Trainer(accelerator="cpu", max_epochs=3, default_root_dir=root, logger=False,
                           enable_progress_bar=False, enable_checkpointing=False, callbacks=callbacks)
    trainer.fit(module, DataLoader(dataset(), batch_size=16, shuffle=True))  # 6 batches per epoch
    return module


def test_fit_after_a_crash_resumes_by_itself_and_ends_like_an_uninterrupted_run(tmp_path: Path) -> None:
    full = fit(tmp_path / "full")
    assert CheckpointDirectory(str(tmp_path / "full" / "resumable")).steps() == {16: True, 12: True}

    with pytest.raises(KeyboardInterrupt, match="crash at step 10"):
        fit(tmp_path / "crashed", crash_at=10)  # in epoch 1; the newest checkpoint is step 8
    directory = tmp_path / "crashed" / "resumable"
    (directory / "step-000000009").mkdir()  # what a crash mid-save would leave: no marker
    steps = Steps()
    resumed = fit(tmp_path / "crashed", steps=steps)
    assert steps.taken == list(range(9, 19)), "the second fit did not resume after step 8"
    # The Module's on_save_checkpoint ran for the FaultTolerance checkpoint, as its on_load_checkpoint did on resume.
    assert resumed.loaded_from_step == 8

    for (name, left), right in zip(full.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(left, right), f"{name} differs from the uninterrupted run"
    assert sorted(path.name for path in directory.iterdir()) == ["step-000000012", "step-000000016"]


def test_settings_are_checked() -> None:
    with pytest.raises(core.ConfigurationError, match=r"every_n_train_steps=0"):
        FaultTolerance(every_n_train_steps=0)
