"""The contract of a structural precision (one that replaces layers): Lite's side of it, and the kit checking it.

A test precision replaces each ``nn.Linear`` by a layer with a *new*, rescaled ``weight`` parameter and a
``weight_scale`` buffer, so that without Lite's help an optimizer made before setup would hold dead tensors and a
plain checkpoint would not load (the key check would refuse the missing ``weight_scale``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import core
from core import hookimpl
from core.testing import PrecisionConformance
from core.toolkit.precisions import LinearFilter, alias_factory, layers_of_type, swap_linear_layers


class ScaledLinear(torch.nn.Module):
    def __init__(self, layer: torch.nn.Linear) -> None:
        super().__init__()
        scale = layer.weight.detach().abs().max().clamp(min=1e-8)
        self.weight = torch.nn.Parameter(layer.weight.detach() / scale)
        self.bias = layer.bias
        self.weight_scale: torch.Tensor
        self.register_buffer("weight_scale", scale.reshape(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight.float() * self.weight_scale, self.bias)


class ScaledPrecision:
    """Every eligible Linear becomes a ScaledLinear; checkpoints are written plain (float32 weights, no scales)."""

    kind = "precision"
    name = "scaled"

    def __init__(self) -> None:
        self.converted: list[list[str]] = []
        self.materialized = 0

    @hookimpl
    def precision_convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        names = LinearFilter(skip_output_head=False).chosen(module)
        self.converted.append(swap_linear_layers(module, names, lambda layer, _: ScaledLinear(layer)))
        return module

    @hookimpl
    def precision_module_materialized(self, module: torch.nn.Module) -> None:
        self.materialized += 1

    @hookimpl
    def precision_module_state_to_save(self, module: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any]:
        for name, _ in layers_of_type(module, ScaledLinear):
            prefix = f"{name}." if name else ""
            scale = state.pop(prefix + "weight_scale")
            state[prefix + "weight"] = state[prefix + "weight"].float() * scale
        return state

    @hookimpl
    def precision_module_state_to_load(self, module: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any]:
        for name, _ in layers_of_type(module, ScaledLinear):
            prefix = f"{name}." if name else ""
            if prefix + "weight_scale" in state:
                continue  # saved converted already
            weight = state[prefix + "weight"].float()
            scale = weight.abs().max().clamp(min=1e-8)
            state[prefix + "weight"] = weight / scale
            state[prefix + "weight_scale"] = scale.reshape(1)
        return state


class TestScaledPrecisionConformance(PrecisionConformance):
    plugin_factory = ScaledPrecision
    round_trip_rtol = 1e-5  # weights divided by their scale and multiplied back


class Net(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16))

    def training_step(self, batch: Any, batch_index: int) -> torch.Tensor:
        return self.body(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_the_trainer_hands_over_the_users_model_converted_once_with_optimizers_repointed() -> None:
    precision = ScaledPrecision()
    net = Net()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 16)), batch_size=8)
    trainer = core.Trainer(accelerator="cpu", devices=1, precision=precision, max_epochs=1, logger=False,
                           enable_checkpointing=False, enable_progress_bar=False)
    before = net.body[0].weight.detach().clone()  # type: ignore[operator]
    trainer.fit(net, data)
    trainer.fit(net, data)
    # Names without the step wrapper's "module." prefix, and one conversion for two runs of the same model.
    assert precision.converted == [["body.0", "body.2"]]
    optimizer = trainer.optimizers[0]
    assert {id(p) for group in optimizer.param_groups for p in group["params"]} == {id(p) for p in net.parameters()}
    assert isinstance(net.body[0], ScaledLinear), f"body.0 is a {type(net.body[0]).__name__}"
    assert not torch.equal(net.body[0].weight.float() * net.body[0].weight_scale, before), "nothing trained"


def test_setup_optimizers_after_setup_module_is_repointed_too() -> None:
    lite = core.Lite(accelerator="cpu", devices=1, precision=ScaledPrecision())
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    module = lite.setup_module(model)
    set_up = lite.setup_optimizers(optimizer)
    assert set_up.param_groups[0]["params"][0] is model[0].weight
    assert module.module is model


def test_an_optimizer_that_stepped_before_setup_is_refused() -> None:
    lite = core.Lite(accelerator="cpu", devices=1, precision=ScaledPrecision())
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 16)).sum().backward()
    optimizer.step()
    with pytest.raises(core.ConfigurationError, match="already has state"):
        lite.setup(model, optimizer)


def test_a_precision_returning_no_module_is_a_broken_plugin() -> None:
    class Broken:
        kind = "precision"

        @hookimpl
        def precision_convert_module(self, module: torch.nn.Module) -> Any:
            return "converted"

    lite = core.Lite(accelerator="cpu", devices=1, precision=Broken())
    with pytest.raises(core.BrokenPluginError, match=r"expected a torch\.nn\.Module"):
        lite.setup_module(torch.nn.Linear(2, 2))


EMPTY_INIT_PROGRAM = """
import torch
import core
from test_precision_contract import ScaledPrecision

precision = ScaledPrecision()


def run(lite):
    with lite.init_module(empty_init=True):
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16))
    on_meta = [parameter.is_meta for parameter in model.parameters()]
    lite.setup_module(model)
    return on_meta


on_meta = core.Lite(accelerator="cpu", strategy="fsdp", devices=1, precision=precision).launch(run)
print("empty:", all(on_meta) and bool(on_meta), "materialized:", precision.materialized)
"""


def test_an_empty_init_model_is_handed_back_once_the_strategy_gave_it_values() -> None:
    # fsdp on one process (gloo) creates empty-init models on the meta device and materialises them at setup; in a
    # process of its own, since the run leaves its process group to the module (and rank variables) behind.
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                                                 os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", EMPTY_INIT_PROGRAM], capture_output=True, text=True, timeout=300,
                          env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "empty: True materialized: 1" in done.stdout, done.stdout + done.stderr[-2000:]


class Moded:
    kind = "precision"

    def __init__(self, mode: str, *, scale: float = 1.0) -> None:
        self.name, self.scale = mode, scale


def test_alias_factory_makes_the_alias_plugin_with_the_users_options_and_is_named_after_the_alias() -> None:
    made = alias_factory(Moded, "int4-scaled", "The int4-scaled precision.")
    assert (made.__name__, made.__qualname__, made.__doc__) == ("int4_scaled", "int4_scaled",
                                                                  "The int4-scaled precision.")
    plugin = made(scale=0.5)
    assert isinstance(plugin, Moded) and (plugin.name, plugin.scale) == ("int4-scaled", 0.5)
    assert made().scale == 1.0
    with pytest.raises(TypeError, match="unexpected keyword argument 'shift'"):
        made(shift=1)
