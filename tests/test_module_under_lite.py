"""A core.Module that Lite set up, with no Trainer, works through that Lite (a LightningModule under Fabric).

Lightning's tests of it (tests_pytorch/core/test_lightning_module.py: test_fabric_log, test_fabric_log_dict,
test_fabric_logger_access, test_grad_clipping_lm_fabric) are here in this project's words.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core


class Recorder:
    """A logger that keeps what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], int | None]] = []

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.calls.append((dict(metrics), step))


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layer(inputs)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def gradients(module: torch.nn.Module) -> list[torch.Tensor]:
    return [parameter.grad for parameter in module.parameters() if parameter.grad is not None]


def test_log_and_log_dict_reach_the_lites_loggers_and_refuse_what_cannot_be_logged() -> None:
    recorder = Recorder()
    lite = core.Lite(accelerator="cpu", loggers=[recorder])
    module = Net()
    lite.setup(module)
    assert module.lite is lite and module.logger is recorder and module.loggers == [recorder]
    module.log("loss", torch.tensor(0.5))
    module.log_dict({"a": 1, "b": 0.25})
    module.log("kept back", 3, logger=False)
    module.log_dict({"kept back too": 3}, logger=False)
    assert recorder.calls == [({"loss": 0.5}, None), ({"a": 1, "b": 0.25}, None)]
    with pytest.raises(core.ConfigurationError, match="`list` values cannot be logged"):
        module.log("bad", [1])
    with pytest.raises(core.ConfigurationError, match="nested dictionaries cannot be logged"):
        module.log_dict({"outer": {"inner": 1}})
    assert len(recorder.calls) == 2  # a refused call sends nothing


def test_a_lite_without_loggers_has_no_logger_and_an_empty_list() -> None:
    module = Net()
    core.Lite(accelerator="cpu").setup_module(module)
    assert module.loggers == []
    with pytest.raises(IndexError):
        _ = module.logger


@pytest.mark.parametrize("algorithm", ["value", "norm"])
def test_optimizers_manual_backward_and_clip_gradients_go_through_the_lite(algorithm: str) -> None:
    lite = core.Lite(accelerator="cpu")
    module = Net()
    wrapped, optimizer = lite.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
    assert module.optimizers() is optimizer
    module.manual_backward(wrapped(torch.full((2, 4), 100.0)).sum())
    before = [grad.clone() for grad in gradients(module)]
    assert len(before) == 2 and max(grad.abs().max() for grad in before) > 1.0
    module.clip_gradients(optimizer, gradient_clip_val=0.01, gradient_clip_algorithm=algorithm)
    grads = gradients(module)
    if algorithm == "value":
        assert all(grad.abs().max() <= 0.01 for grad in grads)
    else:
        assert torch.linalg.vector_norm(torch.cat([grad.flatten() for grad in grads])) == pytest.approx(0.01)
    clipped = [grad.clone() for grad in grads]
    module.clip_gradients(optimizer)  # no value: no clipping, as a Trainer without gradient_clip_val
    assert all(torch.equal(now, grad) for now, grad in zip(gradients(module), clipped, strict=True))


def test_a_trainer_answers_instead_and_a_pickled_module_leaves_its_lite_behind(tmp_path: Any) -> None:
    lite = core.Lite(accelerator="cpu")
    module = Net()
    lite.setup_module(module)
    assert pickle.loads(pickle.dumps(module)).lite is None
    trainer = core.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                           enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module, DataLoader(TensorDataset(torch.ones(4, 4)), batch_size=2))
    assert module.optimizers() is trainer.optimizers[0]  # the Trainer's, not the (empty) list set up with the Lite
    with pytest.warns(core.CoreWarning, match="outside a Trainer run does nothing"):
        module.log("after", 1.0)
