"""BaseFinetuning and BackboneFinetuning: what trains when, at which learning rate, and resuming after an unfreeze,
on real CPU runs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import core
import core.lightning as L
from core.callbacks import BackboneFinetuning, BaseFinetuning, Callback, ModelCheckpoint

BATCHES = 4  # per epoch


def loader() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    samples = 4 * BATCHES
    data = TensorDataset(torch.randn(samples, 6, generator=generator), torch.randn(samples, 1, generator=generator))
    return DataLoader(data, batch_size=4)


class Transfer(core.Module):
    """A backbone (with BatchNorm) and a head; the optimizer holds the trainable parameters only, as documented."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Tanh())
        self.head = nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return F.mse_loss(self.head(self.backbone(inputs)), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(filter(lambda p: p.requires_grad, self.parameters()), lr=0.01)


class Recorder(Callback):
    """Per epoch (at its first batch, after the callbacks' epoch start): the weights and each group's rate."""

    def __init__(self) -> None:
        self.weights: list[dict[str, torch.Tensor]] = []
        self.rates: list[list[float]] = []

    def on_train_batch_start(self, trainer: core.Trainer, module: core.Module, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:
            self.weights.append(copy.deepcopy(module.state_dict()))
            self.rates.append([group["lr"] for group in trainer.optimizers[0].param_groups])


def trainer(tmp_path: Path, callbacks: list[Any], max_epochs: int, **flags: Any) -> core.Trainer:
    settings: dict[str, Any] = {
        "accelerator": "cpu", "logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
        "enable_model_summary": False, "default_root_dir": tmp_path, "num_sanity_val_steps": 0, **flags,
    }
    return core.Trainer(callbacks=callbacks, max_epochs=max_epochs, **settings)


def test_the_backbone_stays_frozen_then_trains_at_a_rate_that_doubles_until_it_reaches_the_heads(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    module = Transfer()
    callback = BackboneFinetuning(unfreeze_backbone_at_epoch=2, backbone_initial_ratio_lr=0.25)
    with pytest.warns(core.CoreWarning, match="2 of the parameters to add are in the optimizer already"):
        trainer(tmp_path, [callback, recorder], max_epochs=5).fit(module, loader())  # the BatchNorm's (as Lightning)

    # Epochs 0 and 1: one group (the head); the backbone's Linear does not move, its BatchNorm does (train_bn).
    assert recorder.rates[:2] == [[0.01], [0.01]]
    for name in ("backbone.0.weight", "backbone.0.bias"):
        assert torch.equal(recorder.weights[0][name], recorder.weights[2][name]), name
        assert not torch.equal(recorder.weights[2][name], module.state_dict()[name]), name  # trains from epoch 2
    assert not torch.equal(recorder.weights[0]["backbone.1.weight"], recorder.weights[1]["backbone.1.weight"])
    assert not torch.equal(recorder.weights[0]["head.weight"], recorder.weights[1]["head.weight"])
    # Epoch 2: the backbone joins as a second group at 0.25 of the head's rate; then x2 each epoch, capped (aligned).
    assert recorder.rates[2:] == [[0.01, 0.0025], [0.01, 0.005], [0.01, 0.01]]
    assert all(param.requires_grad for param in module.parameters())
    assert callback.previous_backbone_lr == 0.01


def test_fit_resumed_after_the_unfreeze_trains_exactly_as_the_uninterrupted_run(tmp_path: Path) -> None:
    def finetuning() -> BackboneFinetuning:
        return BackboneFinetuning(unfreeze_backbone_at_epoch=1, backbone_initial_lr=0.001, should_align=False)

    uninterrupted = Transfer()
    trainer(tmp_path, [finetuning()], max_epochs=4).fit(uninterrupted, loader())

    saver = ModelCheckpoint(dirpath=tmp_path / "ckpts")
    trainer(tmp_path, [finetuning(), saver], max_epochs=2, enable_checkpointing=True).fit(Transfer(), loader())
    (saved,) = (tmp_path / "ckpts").iterdir()
    state = torch.load(saved, weights_only=False)
    assert len(state["optimizer_states"][0]["param_groups"]) == 2  # saved after the unfreeze: two groups

    resumed, recorder = Transfer(), Recorder()
    trainer(tmp_path, [finetuning(), recorder], max_epochs=4).fit(resumed, loader(), ckpt_path=saved)
    assert recorder.rates == [[0.01, 0.002], [0.01, 0.004]]  # the backbone's group and its rate are back
    for name, tensor in uninterrupted.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], tensor), name


def test_resuming_without_the_callback_that_added_the_groups_is_a_clear_error(tmp_path: Path) -> None:
    saver = ModelCheckpoint(dirpath=tmp_path / "ckpts")
    trainer(tmp_path, [BackboneFinetuning(unfreeze_backbone_at_epoch=0), saver], max_epochs=1,
            enable_checkpointing=True).fit(Transfer(), loader())
    (saved,) = (tmp_path / "ckpts").iterdir()

    class FreezeOnly(BaseFinetuning):  # same freezing, but its saved state is not the one in the checkpoint
        def freeze_before_training(self, pl_module: core.Module) -> None:
            self.freeze(pl_module.backbone)

        def finetune_function(self, pl_module: core.Module, epoch: int, optimizer: torch.optim.Optimizer) -> None:
            pass

    with pytest.raises(core.CoreError, match="parameter groups"):
        trainer(tmp_path, [FreezeOnly()], max_epochs=2).fit(Transfer(), loader(), ckpt_path=saved)


def test_the_static_helpers_freeze_filter_and_add_groups_as_lightnings_do() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Sequential(nn.Linear(4, 2)))
    assert [type(m) for m in BaseFinetuning.flatten_modules(model)] == [nn.Linear, nn.BatchNorm1d, nn.Linear]

    BaseFinetuning.freeze(model, train_bn=True)
    assert [p.requires_grad for p in model.parameters()] == [False, False, True, True, False, False]
    BaseFinetuning.freeze(model, train_bn=False)
    assert not any(p.requires_grad for p in model.parameters())
    assert model[1].track_running_stats is False  # a frozen BatchNorm stops tracking statistics

    head = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.5)
    BaseFinetuning.unfreeze_and_add_param_group(model[0], optimizer)  # no lr: the first group's / initial_denom_lr
    assert [group["lr"] for group in optimizer.param_groups] == [0.5, 0.05]
    assert optimizer.param_groups[1]["params"] == [model[0].weight, model[0].bias]
    with pytest.warns(core.CoreWarning, match="2 of the parameters to add are in the optimizer already"):
        kept = BaseFinetuning.filter_on_optimizer(optimizer, [*model[0].parameters(), *model[2].parameters()])
    assert kept == [model[2][0].weight, model[2][0].bias]
    BaseFinetuning.unfreeze_and_add_param_group(model, optimizer, lr=0.2, train_bn=False)
    assert optimizer.param_groups[2]["params"] == [model[2][0].weight, model[2][0].bias]  # not the BatchNorm's
    assert model[1].weight.requires_grad and model[1].track_running_stats  # but it is unfrozen


def test_a_module_without_a_backbone_or_a_subclass_without_its_methods_is_told_what_is_missing(tmp_path: Path) -> None:
    class NoBackbone(Transfer):
        def __init__(self) -> None:
            super().__init__()
            self.features = self.backbone
            del self.backbone

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            inputs, targets = batch
            return F.mse_loss(self.head(self.features(inputs)), targets)

    with pytest.raises(core.ConfigurationError, match=r"NoBackbone has no nn\.Module attribute `backbone`"):
        trainer(tmp_path, [BackboneFinetuning()], max_epochs=1).fit(NoBackbone(), loader())

    class Incomplete(BaseFinetuning):
        pass

    with pytest.raises(NotImplementedError, match="Incomplete must override freeze_before_training"):
        trainer(tmp_path, [Incomplete()], max_epochs=1).fit(Transfer(), loader())


def test_the_lightning_namespace_hands_out_these_classes() -> None:
    assert L.pytorch.callbacks.BackboneFinetuning is BackboneFinetuning
    assert L.pytorch.callbacks.BaseFinetuning is BaseFinetuning


def test_resuming_with_no_finetuning_callback_at_all_names_the_optimizer_whose_groups_differ(tmp_path: Path) -> None:
    saver = ModelCheckpoint(dirpath=tmp_path / "ckpts")
    trainer(tmp_path, [BackboneFinetuning(unfreeze_backbone_at_epoch=0), saver], max_epochs=1,
            enable_checkpointing=True).fit(Transfer(), loader())
    (saved,) = (tmp_path / "ckpts").iterdir()
    with pytest.raises(core.CheckpointError, match=r"optimizers 0 .* different number of parameter groups"):
        trainer(tmp_path, [], max_epochs=2).fit(Transfer(), loader(), ckpt_path=saved)
