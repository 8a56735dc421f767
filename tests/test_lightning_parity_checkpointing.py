"""ModelCheckpoint and EarlyStopping behave as Lightning 2.6's do where its own tests say so: state keys, error
messages, ``save_last`` (once at the end, versioned, as a link), scores as logged tensors, resuming in the same or
another directory, saving by time, saves deferred to validation, and why early stopping stopped."""

from __future__ import annotations

import inspect
import os
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import EarlyStopping, ModelCheckpoint
from core.callbacks.early_stopping import EarlyStoppingReason


class Tiny(core.Module):
    """One linear layer; logs ``score`` (scripted per epoch) at the end of each training epoch."""

    def __init__(self, scores: list[float] | None = None, validate: bool = False) -> None:
        super().__init__()
        self.scores = scores or []
        self.layer = torch.nn.Linear(2, 1)
        self.validate = validate

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.layer(batch[0]).pow(2).mean())

    def on_train_epoch_end(self) -> None:
        if self.scores:
            self.log("score", self.scores[self.current_epoch])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(batches: int = 2) -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.randn(2 * batches, 2)), batch_size=2)


def fit(module: core.Module, max_epochs: int, val: bool = False, ckpt_path: str | None = None,
        **flags: Any) -> core.Trainer:
    flags.setdefault("logger", False)
    flags.setdefault("enable_progress_bar", False)
    flags.setdefault("enable_model_summary", False)
    trainer = core.Trainer(accelerator="cpu", max_epochs=max_epochs, **flags)
    trainer.fit(module, loader(), loader(1) if val else None, ckpt_path=ckpt_path)
    return trainer


def names(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir()}


# -- construction ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arguments", "phrase"), [
    ({"save_top_k": -3}, r"save_top_k=-3\. Must be >= -1"),
    ({"save_top_k": 3}, r"ModelCheckpoint\(save_top_k=3, monitor=None\) is not a valid configuration.*monitor="),
    ({"every_n_epochs": -3}, r"every_n_epochs=-3\. Must be >= 0"),
    ({"every_n_train_steps": -3}, r"every_n_train_steps=-3\. Must be >= 0"),
    ({"every_n_train_steps": 1, "every_n_epochs": 2}, r"Combination of parameters every_n_train_steps=1.*not both"),
    ({"train_time_interval": timedelta(minutes=1), "every_n_epochs": 2}, r"Combination of parameters"),
    ({"mode": "average"}, r"mode='average'.*`mode` can be min, max but got average.*mode='max'"),
])
def test_model_checkpoint_refuses_bad_settings_in_lightnings_words_with_the_fix(
        arguments: dict[str, Any], phrase: str) -> None:
    with pytest.raises(core.ConfigurationError, match=phrase):
        ModelCheckpoint(**arguments)


def test_model_checkpoint_accepts_what_lightning_accepts_and_keys_its_state_as_lightning() -> None:
    ModelCheckpoint(every_n_train_steps=0, every_n_epochs=0, train_time_interval=timedelta(minutes=1))
    ModelCheckpoint(every_n_train_steps=4, every_n_epochs=0)
    assert ModelCheckpoint(monitor="val_loss").state_key == (
        "ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1,"
        " 'train_time_interval': None}"
    )
    assert ModelCheckpoint(every_n_train_steps=5).state_key.endswith(
        "'every_n_train_steps': 5, 'every_n_epochs': 0, 'train_time_interval': None}"
    )


def test_dirpath_is_made_absolute_with_the_home_expanded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert ModelCheckpoint(dirpath="~/checkpoints").dirpath == str(tmp_path / "checkpoints")
    assert ModelCheckpoint(dirpath="./~/checkpoints").dirpath == str(tmp_path / "~" / "checkpoints")
    assert ModelCheckpoint(dirpath="s3://bucket/run").dirpath == "s3://bucket/run"


def test_save_last_has_a_real_annotation_that_jsonargparse_parses() -> None:
    from jsonargparse import ArgumentParser

    annotation = inspect.signature(ModelCheckpoint).parameters["save_last"].annotation
    assert not isinstance(annotation, str)
    parser = ArgumentParser()
    parser.add_argument("--a", type=annotation)
    assert [parser.parse_args(["--a", value]).a for value in ("yes", "false", "link")] == [True, False, "link"]
    with pytest.raises(core.ConfigurationError, match=r"save_last='copy'.*'link'"):
        ModelCheckpoint(save_last="copy")  # type: ignore[arg-type]


# -- save_last ---------------------------------------------------------------------------------------------


def test_save_last_without_top_k_files_writes_last_once_at_the_end_and_versions_a_rerun(tmp_path: Path) -> None:
    for _ in range(2):
        checkpoint = ModelCheckpoint(dirpath=tmp_path, save_top_k=0, save_last=True)
        trainer = fit(Tiny(), 2, callbacks=[checkpoint])
        assert checkpoint.last_model_path and trainer.global_step == 4
    assert names(tmp_path) == {"last.ckpt", "last-v1.ckpt"}
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 4


def test_save_last_follows_the_top_k_saves_and_link_points_at_the_newest(tmp_path: Path) -> None:
    copy, link = tmp_path / "copy", tmp_path / "link"
    fit(Tiny(), 3, callbacks=[ModelCheckpoint(dirpath=copy, save_top_k=-1, save_last=True, filename="{epoch}")])
    assert names(copy) == {"epoch=0.ckpt", "epoch=1.ckpt", "epoch=2.ckpt", "last.ckpt"}
    assert not os.path.islink(copy / "last.ckpt")
    checkpoint = ModelCheckpoint(dirpath=link, save_top_k=-1, save_last="link", filename="{epoch}")
    fit(Tiny(), 3, callbacks=[checkpoint])
    assert os.path.islink(link / "last.ckpt") and not os.path.isabs(os.readlink(link / "last.ckpt"))
    assert os.path.realpath(link / "last.ckpt") == str(link / "epoch=2.ckpt")
    assert checkpoint.last_model_path == str(link / "last.ckpt")
    with pytest.raises(core.ConfigurationError, match="only supported for local file paths"):
        ModelCheckpoint(dirpath="s3://bucket/run", save_last="link")


def test_last_and_the_newest_top_k_file_hold_the_same_callback_state(tmp_path: Path) -> None:
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="score", filename="{epoch}", save_top_k=3, save_last=True)
    fit(Tiny([3.0, 2.0, 1.0]), 3, callbacks=[checkpoint])
    newest = torch.load(tmp_path / "epoch=2.ckpt", weights_only=True)["callbacks"][checkpoint.state_key]
    last = torch.load(tmp_path / "last.ckpt", weights_only=True)["callbacks"][checkpoint.state_key]
    assert newest == last and last["last_model_path"] == str(tmp_path / "last.ckpt")


# -- scores and state --------------------------------------------------------------------------------------


def test_scores_are_the_logged_tensors_and_are_saved(tmp_path: Path) -> None:
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_top_k=3, filename="{epoch}")
    fit(Tiny([0.1, 0.2, 0.3]), 3, callbacks=[checkpoint])
    assert isinstance(checkpoint.current_score, torch.Tensor)
    assert checkpoint.current_score == 0.3  # the float32 value logged, not 0.30000001192092896
    assert checkpoint.best_model_score == 0.1 and checkpoint.kth_value == 0.3
    saved = [torch.load(tmp_path / f"epoch={epoch}.ckpt", weights_only=True)["callbacks"][checkpoint.state_key]
             for epoch in range(3)]
    assert [float(state["current_score"]) for state in saved] == pytest.approx([0.1, 0.2, 0.3])


def test_state_from_another_directory_restores_only_the_best_path_with_a_warning(tmp_path: Path) -> None:
    written = ModelCheckpoint(dirpath=tmp_path / "a", save_top_k=-1)
    written.best_model_path = "best.ckpt"
    written.best_model_score = torch.tensor(2.5)
    written.best_k_models = {"best.ckpt": torch.tensor(2.5)}
    written.kth_value = torch.tensor(2.5)
    state = written.state_dict()
    assert state["best_model_score"] == 2.5 and state["kth_value"] == 2.5

    restored = ModelCheckpoint(dirpath=tmp_path / "b", save_top_k=-1)
    with pytest.warns(core.CoreWarning, match="The dirpath has changed from"):
        restored.load_state_dict(state)
    assert restored.best_model_path == "best.ckpt"
    assert restored.best_model_score is None and restored.best_k_models == {}

    same = ModelCheckpoint(dirpath=tmp_path / "a", save_top_k=-1)
    same.load_state_dict(state)
    assert same.best_k_models == {"best.ckpt": 2.5} and same.best_model_score == 2.5


def test_resuming_in_the_same_directory_never_deletes_the_checkpoint_resumed_from(tmp_path: Path) -> None:
    def callback() -> ModelCheckpoint:
        return ModelCheckpoint(dirpath=tmp_path, monitor="step", mode="max", save_top_k=2, every_n_train_steps=2)

    fit(Tiny(), 10, max_steps=4, callbacks=[callback()])
    assert names(tmp_path) == {"epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt"}
    fit(Tiny(), 10, max_steps=8, callbacks=[callback()], ckpt_path=str(tmp_path / "epoch=1-step=4.ckpt"))
    assert names(tmp_path) == {"epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt", "epoch=3-step=8.ckpt"}


# -- when to save ------------------------------------------------------------------------------------------


def test_train_time_interval_saves_when_the_interval_has_passed(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import core.callbacks.model_checkpoint as module

    clock = iter(range(0, 10_000, 25))  # the fit starts at 0 s and a batch ends every 25 s; a save every 60 s
    monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: float(next(clock))))  # its clock only
    checkpoint = ModelCheckpoint(dirpath=tmp_path, train_time_interval=timedelta(seconds=60), save_top_k=-1,
                                 filename="{step}")
    fit(Tiny(), 3, callbacks=[checkpoint])
    assert names(tmp_path) == {"step=3.ckpt", "step=6.ckpt"}  # at 75 s, then at 150 s (75 s after)


def test_a_step_save_waits_for_validation_when_the_metric_is_a_validation_one(tmp_path: Path) -> None:
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", every_n_train_steps=1, save_top_k=-1,
                                 filename="{step}")
    fit(Tiny(), 1, val=True, callbacks=[checkpoint], val_check_interval=2, num_sanity_val_steps=0,
        limit_train_batches=2)
    assert names(tmp_path) == {"step=2.ckpt"}  # step 1 had no val_loss yet: saved after validation at step 2


def test_a_trainer_without_checkpointing_refuses_a_model_checkpoint_in_lightnings_words() -> None:
    with pytest.raises(core.ConfigurationError, match="`enable_checkpointing=False` but found `ModelCheckpoint`"):
        core.Trainer(enable_checkpointing=False, callbacks=[ModelCheckpoint()])


def test_resuming_past_max_epochs_is_refused(tmp_path: Path) -> None:
    fit(Tiny(), 3, callbacks=[ModelCheckpoint(dirpath=tmp_path, filename="{epoch}")])
    with pytest.raises(core.ConfigurationError, match=r"You restored a checkpoint with current_epoch=\d.*max_epochs=1"):
        fit(Tiny(), 1, ckpt_path=str(tmp_path / "epoch=2.ckpt"), enable_checkpointing=False)


# -- EarlyStopping -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("scores", "arguments", "reason", "phrase"), [
    ([5.0, 6.0, 7.0, 8.0], {"patience": 2}, EarlyStoppingReason.PATIENCE_EXHAUSTED, "did not improve"),
    ([1.0, 0.5, 0.4, 0.3], {"stopping_threshold": 0.6}, EarlyStoppingReason.STOPPING_THRESHOLD,
     "Stopping threshold reached: score = 0.5 < 0.6"),
    ([1.0, 9.0, 1.0, 1.0], {"divergence_threshold": 8.0}, EarlyStoppingReason.DIVERGENCE_THRESHOLD,
     "Divergence threshold reached: score = 9 < 8"),
    ([1.0, float("nan"), 1.0, 1.0], {}, EarlyStoppingReason.NON_FINITE_METRIC, "is not finite"),
    ([4.0, 3.0, 2.0, 1.0], {}, EarlyStoppingReason.NOT_STOPPED, None),
])
def test_early_stopping_says_why_it_stopped(
        scores: list[float], arguments: dict[str, Any], reason: EarlyStoppingReason, phrase: str | None) -> None:
    stopper = EarlyStopping(monitor="score", **arguments)
    fit(Tiny(scores), len(scores), callbacks=[stopper], enable_checkpointing=False)
    assert stopper.stopping_reason is reason
    if phrase is None:
        assert stopper.stopping_reason_message is None and stopper.stopped_epoch == 0
    else:
        assert stopper.stopping_reason_message is not None and phrase in stopper.stopping_reason_message
        assert stopper.stopped_epoch == 1 if reason is not EarlyStoppingReason.PATIENCE_EXHAUSTED else 2


def test_early_stopping_saves_its_reason_and_reads_older_state() -> None:
    stopper = EarlyStopping(monitor="score")
    stopper.stopping_reason, stopper.stopping_reason_message = EarlyStoppingReason.PATIENCE_EXHAUSTED, "why"
    state = stopper.state_dict()
    assert state["stopping_reason"] == 3 and state["stopping_reason_message"] == "why"
    restored = EarlyStopping(monitor="score")
    restored.load_state_dict(state)
    assert (restored.stopping_reason, restored.stopping_reason_message) == (EarlyStoppingReason.PATIENCE_EXHAUSTED,
                                                                             "why")
    older = EarlyStopping(monitor="score")
    older.load_state_dict({"wait_count": 2, "stopped_epoch": 5, "best_score": torch.tensor(0.5), "patience": 3})
    assert older.stopping_reason is EarlyStoppingReason.NOT_STOPPED and older.stopping_reason_message is None
    assert older.wait_count == 2 and older.stopped_epoch == 5


def test_early_stopping_refuses_an_unknown_mode_in_lightnings_words() -> None:
    with pytest.raises(core.ConfigurationError, match=r"`mode` can be min, max, got average.*mode='max'"):
        EarlyStopping(monitor="score", mode="average")


def test_lightnings_early_stopping_reason_is_cores() -> None:
    from core.lightning._compat import EarlyStoppingReason as LightningReason

    assert LightningReason is EarlyStoppingReason


def test_state_dict_runs_once_per_checkpoint_and_decisions_travel_without_tensors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.lite import Lite

    sent: list[Any] = []
    broadcast = Lite.broadcast

    def recording(self: Lite, obj: Any, src: int = 0) -> Any:
        sent.append(obj)
        return broadcast(self, obj, src)

    monkeypatch.setattr(Lite, "broadcast", recording)  # a tensor there is pickled with torch.save on several ranks

    class Counting(ModelCheckpoint):
        calls = 0

        def state_dict(self) -> dict[str, Any]:
            Counting.calls += 1
            return super().state_dict()

    checkpoint = Counting(dirpath=tmp_path, monitor="score", save_top_k=-1, filename="{epoch}")
    fit(Tiny([3.0, 2.0, 1.0]), 3, callbacks=[checkpoint])
    assert Counting.calls == 3 and len(names(tmp_path)) == 3
    decisions = [obj for obj in sent if isinstance(obj, tuple) and len(obj) == 5]
    assert len(decisions) == 3

    def tensors(value: Any) -> int:
        if isinstance(value, dict):
            return sum(tensors(item) for item in value.values())
        if isinstance(value, (list, tuple)):
            return sum(tensors(item) for item in value)
        return int(isinstance(value, torch.Tensor))

    assert sum(tensors(decision) for decision in decisions) == 0
    assert isinstance(checkpoint.best_model_score, torch.Tensor) and checkpoint.best_model_score == 1.0
