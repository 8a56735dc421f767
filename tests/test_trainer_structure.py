"""The Trainer's architecture: flags in one validated record, an explicit run state, resume chosen by a hook."""

from __future__ import annotations

import ast
from pathlib import Path

import attrs
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.loggers import CSVLogger
from core.trainer._config import TrainerConfig
from core.trainer._state import RunState


class Tiny(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> DataLoader[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(8, 2, generator=generator), torch.randn(8, 1, generator=generator)),
                      batch_size=4)


def quiet(tmp_path: Path, **flags: object) -> core.Trainer:
    settings: dict[str, object] = {"enable_checkpointing": False, **flags}
    return core.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        default_root_dir=tmp_path, **settings)  # type: ignore[arg-type]


def test_the_flags_are_one_frozen_validated_record(tmp_path: Path) -> None:
    trainer = quiet(tmp_path, max_steps=10, limit_val_batches=0.5, gradient_clip_val=1)
    assert isinstance(trainer.config, TrainerConfig)
    assert trainer.config.max_epochs == -1  # max_epochs=None with max_steps set: no epoch limit
    assert (trainer.max_steps, trainer.limit_val_batches, trainer.limit_train_batches) == (10, 0.5, 1.0)
    assert (trainer.gradient_clip_val, trainer.gradient_clip_algorithm) == (1.0, "norm")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        trainer.config.max_steps = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        trainer.max_steps = 3  # type: ignore[assignment]  # read-only (FlagView.__set__ takes Never)
    assert TrainerConfig.from_flags(default_root_dir=tmp_path).max_epochs == 1000


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"max_steps": -2}, "`max_steps` must be a non-negative integer or -1 (no limit). You passed in -2"),
        ({"val_check_interval": 1.5}, "val_check_interval=1.5: expected a fraction of the epoch"),
        ({"check_val_every_n_epoch": None, "val_check_interval": 0.5}, "must be a number of batches (int), got 0.5"),
        ({"limit_test_batches": 2.0}, "limit_test_batches=2.0: a fraction must lie in 0.0..1.0"),
        ({"gradient_clip_algorithm": "max"}, "`gradient_clip_algorithm` max is invalid. Allowed algorithms: ['norm',"),
        ({"accumulate_grad_batches": 0}, "accumulate_grad_batches=0: expected a whole number >= 1"),
    ],
)
def test_a_bad_flag_names_itself_and_what_it_accepts(flags: dict[str, object], message: str) -> None:
    with pytest.raises(core.ConfigurationError) as excinfo:
        TrainerConfig.from_flags(**flags)  # type: ignore[arg-type]
    assert message in str(excinfo.value)


def test_the_loops_state_is_one_explicit_record(tmp_path: Path) -> None:
    trainer = quiet(tmp_path, max_epochs=2)
    trainer.fit(Tiny(), train_dataloaders=loader())
    assert isinstance(trainer.run_state, RunState)
    assert trainer.run_state.progress.global_step == trainer.global_step == 4
    assert trainer.batches_done == trainer.run_state.progress.batches_done
    assert trainer.run_state.step_module is None  # released when the run ends
    private = sorted(name for name in vars(trainer) if name.startswith("_"))
    assert private == ["_lite_settings", "_lite_used"]  # everything else a run holds is in run_state


def test_any_callback_can_choose_where_fit_resumes(tmp_path: Path) -> None:
    checkpoint = core.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    first = quiet(tmp_path, max_epochs=1, callbacks=[checkpoint], enable_checkpointing=True)
    first.fit(Tiny(), train_dataloaders=loader())
    saved = Path(checkpoint.last_model_path)

    class ResumeFrom(core.Callback):
        def __init__(self) -> None:
            self.asked = 0

        def resume_checkpoint_path(self, trainer: core.Trainer) -> str | None:
            self.asked += 1
            return str(saved)

    chooser = ResumeFrom()
    second = quiet(tmp_path, max_epochs=2, callbacks=[core.Callback(), chooser])
    second.fit(Tiny(), train_dataloaders=loader())
    assert chooser.asked == 1
    assert second.global_step == 4  # 2 steps restored from the checkpoint, 2 run: the epoch was resumed
    third = quiet(tmp_path, max_epochs=2, callbacks=[chooser])
    third.fit(Tiny(), train_dataloaders=loader(), ckpt_path=None)
    assert chooser.asked == 2


def _reaches_into_private_state(path: Path) -> list[str]:
    """``trainer._x`` / ``self.trainer._x`` reads and writes, and ``module.__dict__["_trainer"]``, in one file."""
    found = []
    in_module = path.parent.name == "module"  # core.module holds the Module's own slot for its trainer
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name == "trainer":
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and ast.unparse(node.slice) == "'_trainer'" and not in_module:
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_nothing_outside_the_trainer_reaches_into_its_private_state() -> None:
    root = Path(core.__file__).parent
    sources = [path for path in sorted(root.rglob("*.py")) if path != root / "trainer" / "_trainer.py"]
    assert len(sources) > 50
    reaches = [reach for path in sources for reach in _reaches_into_private_state(path)]
    assert reaches == []


def test_the_config_and_run_state_types_are_public_and_fast_dev_run_is_a_flag_of_the_record(tmp_path: Path) -> None:
    from core.trainer import RunState as PublicRunState
    from core.trainer import TrainerConfig as PublicConfig

    assert (PublicConfig, PublicRunState) == (TrainerConfig, RunState)
    trainer = quiet(tmp_path, fast_dev_run=2, max_epochs=10, limit_val_batches=0.5, num_sanity_val_steps=5)
    assert trainer.fast_dev_run == trainer.config.fast_dev_run == 2
    assert (trainer.max_steps, trainer.max_epochs, trainer.limit_val_batches, trainer.num_sanity_val_steps) == (
        2, 1, 2, 0)
    assert quiet(tmp_path, fast_dev_run=True).config.fast_dev_run == 1
    assert quiet(tmp_path).config.fast_dev_run == 0
    with pytest.raises(AttributeError):
        trainer.fast_dev_run = 3  # type: ignore[assignment]
    with pytest.raises(core.ConfigurationError, match=r"fast_dev_run=-1: expected True/False or a number"):
        TrainerConfig.from_flags(fast_dev_run=-1)


def test_a_run_attaches_the_module_and_reads_its_hyperparameters_through_public_names(tmp_path: Path) -> None:
    class Quiet(Tiny):
        def __init__(self, width: int = 3) -> None:
            super().__init__()
            self.save_hyperparameters(logger=False)

    module, silent = Tiny(), Quiet()
    assert not module.attached and dict(silent.hparams) == {"width": 3} and dict(silent.hparams_for_loggers) == {}
    trainer = quiet(tmp_path)
    module.trainer = trainer
    assert module.attached and module.trainer is trainer
    module.trainer = None
    assert not module.attached
    seen: list[bool] = []

    class Watch(core.Callback):
        def on_train_start(self, trainer: core.Trainer, module: core.Module) -> None:
            seen.append(module.trainer is trainer)

    quiet(tmp_path, max_epochs=1, callbacks=[Watch()]).fit(module, train_dataloaders=loader())
    assert seen == [True] and not module.attached  # attached for the run, detached after it


def test_a_logger_version_can_be_read_without_choosing_it_and_handed_over(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    (tmp_path / "logs" / "version_4").mkdir(parents=True)
    assert logger.version_if_chosen is None  # reading it chose nothing
    logger.use_version(7)  # what a ddp_spawn run hands back from its rank 0
    assert (logger.version_if_chosen, logger.version) == (7, 7)
    assert logger.log_dir == str(tmp_path / "logs" / "version_7")
    logger.use_version(None)
    assert logger.version == 5  # chosen again on first use: the next free number
