"""Lightning's precision classes in core.lightning: BitsandbytesPrecision works, TransformerEngine's says why not."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import core


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))


def test_fabric_takes_bitsandbytes_precision_as_a_plugin() -> None:
    from core.lightning.fabric import Fabric
    from core.lightning.fabric.plugins import BitsandbytesPrecision

    precision = BitsandbytesPrecision(mode="nf4", dtype=torch.bfloat16, ignore_modules={"2"})
    fabric = Fabric(accelerator="cpu", devices=1, plugins=precision)
    model = fabric.setup(_model())
    assert [type(layer).__name__ for layer in model.module.children()] == ["Linear4bit", "ReLU", "Linear"]
    assert model(torch.ones(2, 64)).dtype == torch.float32


def test_the_trainer_takes_bitsandbytes_precision_as_a_plugin() -> None:
    import core.lightning.pytorch as pl
    from core.lightning.pytorch.plugins import BitsandbytesPrecision

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body = _model()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.body(batch[0]).float().pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1)

    net = Net()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 64)), batch_size=8)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, plugins=[BitsandbytesPrecision("nf4-dq")])
    trainer.fit(net, data)
    assert type(net.body[0]).__name__ == "Linear4bit" and type(net.body[2]).__name__ == "Linear4bit"


@pytest.mark.parametrize("namespace", ["core.lightning.fabric.plugins", "core.lightning.pytorch.plugins"])
def test_transformer_engine_precision_imports_and_points_to_fp8(namespace: str) -> None:
    import importlib

    TransformerEnginePrecision = importlib.import_module(namespace).TransformerEnginePrecision
    with pytest.raises(core.PluginUnavailableError, match=r"TransformerEngine.*precision='fp8'.*core-torchao"):
        TransformerEnginePrecision(weights_dtype=torch.bfloat16)
