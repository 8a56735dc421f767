"""Claims of docs/trainer-callbacks.md, trainer-logging.md and trainer-checkpoints.md checked against the code.

The pages spell out constructor signatures (names, order, defaults); a user passes them as printed, so each
printed signature must be the code's. And ``ckpt_path="best"`` loads the first ModelCheckpoint's
``best_model_path``, which without ``monitor`` is its latest file.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
import core.callbacks as callbacks
import core.loggers as loggers

DOCS = Path(__file__).resolve().parents[1] / "docs"

# (page, the name as printed before its parenthesis, the object whose signature it is)
SIGNATURES: list[tuple[str, str, Any]] = [
    *[("trainer-callbacks.md", name, getattr(callbacks, name)) for name in (
        "ModelCheckpoint", "EarlyStopping", "LearningRateMonitor", "ProgressBar", "TQDMProgressBar",
        "RichProgressBar", "ModelSummary", "RichModelSummary", "DeviceStatsMonitor", "OnExceptionCheckpoint",
        "ThroughputMonitor", "BackboneFinetuning", "StochasticWeightAveraging", "WeightAveraging",
        "EMAWeightAveraging")],
    ("trainer-logging.md", "self.log", core.Module.log),
    ("trainer-logging.md", "core.loggers.CSVLogger", loggers.CSVLogger),
    ("trainer-logging.md", "core.loggers.TensorBoardLogger", loggers.TensorBoardLogger),
    ("trainer-logging.md", "MLFlowLogger", loggers.MLFlowLogger),
    ("trainer-logging.md", "WandbLogger", loggers.WandbLogger),
]


def printed_signature(page: str, name: str) -> list[str]:
    """The arguments of the first ``NAME(...)`` the page prints in backticks, one string each."""
    text = (DOCS / page).read_text()
    found = re.search(r"`" + re.escape(name) + r"\((?P<args>[^`]*)\)`", text)
    assert found, f"{page} prints no signature of {name}"
    return [arg.strip() for arg in " ".join(found["args"].split()).split(",") if arg.strip()]


@pytest.mark.parametrize(("page", "name", "target"), SIGNATURES, ids=[name for _, name, _ in SIGNATURES])
def test_a_printed_signature_is_the_codes(page: str, name: str, target: Any) -> None:
    parameters = [parameter for parameter in inspect.signature(target).parameters.values() if parameter.name != "self"]
    printed = printed_signature(page, name)
    want: list[str] = []
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and "*" not in want:
            want.append("*")
        want.append("**" if parameter.kind is inspect.Parameter.VAR_KEYWORD else parameter.name)
    got = ["**" if arg.startswith("**") else arg.partition("=")[0] for arg in printed]
    assert got == want, f"{page}: {name}({', '.join(printed)}) but the code takes {want}"
    for arg, parameter in zip([arg for arg in printed if arg != "*"], parameters, strict=True):
        if "=" not in arg or arg.startswith("**"):
            continue
        try:
            default = ast.literal_eval(arg.partition("=")[2])
        except (ValueError, SyntaxError):
            continue  # a name (multiplicative) or $VARIABLE: not a literal to compare
        actual = parameter.default
        assert default == actual or default == str(actual), f"{page}: {arg} but the default is {actual!r}"


class _Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_ckpt_path_best_without_monitor_loads_the_first_model_checkpoints_latest_file(tmp_path: Path) -> None:
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    trainer = core.Trainer(accelerator="cpu", devices=1, max_epochs=2, default_root_dir=tmp_path, logger=False,
                           enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    module = _Net()
    trainer.fit(module, loader)
    checkpoint = trainer.checkpoint_callback
    assert checkpoint is not None and checkpoint.monitor is None
    assert Path(checkpoint.best_model_path).name == "epoch=1-step=4.ckpt"
    saved = {name: value.clone() for name, value in module.state_dict().items()}
    with torch.no_grad():
        module.layer.weight.add_(1.0)
    trainer.validate(module, loader, ckpt_path="best")
    for name, value in module.state_dict().items():
        assert torch.equal(value, saved[name]), f"{name}: ckpt_path='best' did not load the latest file"
