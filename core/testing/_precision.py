"""The precision kit: conversions, contexts, its own state, and a run in that precision."""

from __future__ import annotations

import io
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import pytest
import torch

import core
from core.testing._base import Conformance
from core.testing._lite import train_briefly


def _model() -> torch.nn.Module:
    """Layers a structural precision converts (dimensions multiples of 64), a head, and a non-linear layer."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.LayerNorm(128), torch.nn.Linear(128, 64), torch.nn.Linear(64, 64)
    )


def _optimizer_references(lite: core.Lite) -> dict[str, Any]:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # made before setup, as the Trainer makes it
    module, optimizer = lite.setup(model, optimizer)
    held = {id(parameter) for group in optimizer.param_groups for parameter in group["params"]}
    present = {id(parameter) for parameter in module.parameters()}
    trainable = {id(parameter) for parameter in module.parameters() if parameter.requires_grad}
    before = [parameter.detach().float().clone() for parameter in module.parameters() if parameter.requires_grad]
    loss = module(torch.randn(8, 64, device=lite.device)).float().pow(2).mean()
    lite.backward(loss)
    optimizer.step()
    after = [parameter.detach().float() for parameter in module.parameters() if parameter.requires_grad]
    return {
        "unknown": len(held - present),
        "left_out": len(trainable - held),
        "moved": sum(not torch.equal(a, b) for a, b in zip(before, after, strict=True)),
        "trainable": len(before),
    }


def _save(lite: core.Lite, path: str) -> dict[str, Any]:
    module = lite.setup(_model())
    lite.save(path, {"model": module})
    saved = torch.load(path, weights_only=True)["model"]
    return {name: (tuple(value.shape), str(value.dtype), float(value.float().sum())) for name, value in saved.items()}


def _load(lite: core.Lite, path: str) -> dict[str, Any]:
    model = _model()
    model.apply(_zero)
    module = lite.setup(model)
    lite.load(path, {"model": module})
    again = path + ".again"
    lite.save(again, {"model": module})
    saved = torch.load(again, weights_only=True)["model"]
    return {name: (tuple(value.shape), str(value.dtype), float(value.float().sum())) for name, value in saved.items()}


def _zero(layer: torch.nn.Module) -> None:
    with torch.no_grad():
        for parameter in layer.parameters(recurse=False):
            parameter.zero_()


def _forward_dtype(lite: core.Lite) -> str:
    module = lite.setup(torch.nn.Linear(4, 2))
    return str(module(torch.ones(3, 4, device=lite.device)).dtype)


class PrecisionConformance(Conformance):
    """Inherit this in a class named ``Test...`` and set ``alias`` (or ``plugin_factory``).

    Checks: ``precision_convert_module`` returns a module; ``precision_tensor_init_context`` restores the
    default dtype on exit; ``precision_convert_input`` keeps the structure of a batch and leaves integer
    tensors alone; a set-up module's output comes back in the default dtype; the precision's own state
    survives a ``weights_only`` save and load; an optimizer made before ``Lite.setup`` holds the set-up model's
    parameters (a structural conversion included), every trainable one, and a step changes them; checkpoints of a
    converted run have the unconverted model's keys and shapes and load into an unconverted run and back (values within
    :attr:`round_trip_rtol`); and a one-process ``Lite`` run on ``accelerator`` trains.
    Hooks a precision does not implement are skipped: ``Lite`` supplies the defaults.
    """

    kind: ClassVar[str] = "precision"
    accelerator: ClassVar[str] = "cpu"
    """The accelerator alias of the runs (a precision that needs a GPU sets ``"cuda"``)."""
    round_trip_rtol: ClassVar[float] = 1e-6
    """How close a checkpoint's values come back through a converted run (a quantizing precision loses some)."""

    def require(self, plugin: object, hook: str) -> None:
        if not self.implements(plugin, hook):
            pytest.skip(f"{hook} is optional and not implemented (Lite's default applies)")

    def test_convert_module_returns_a_module(self, plugin: object) -> None:
        self.require(plugin, "precision_convert_module")
        converted = self.call(plugin, self.kind, "precision_convert_module", module=torch.nn.Linear(4, 2))
        assert isinstance(converted, torch.nn.Module), f"precision_convert_module returned {converted!r}"

    def test_tensor_init_context_restores_the_default_dtype(self, plugin: object) -> None:
        self.require(plugin, "precision_tensor_init_context")
        before = torch.get_default_dtype()
        context = self.call(plugin, self.kind, "precision_tensor_init_context")
        assert isinstance(context, AbstractContextManager), f"precision_tensor_init_context returned {context!r}"
        with context:
            torch.nn.Linear(2, 2)
        assert torch.get_default_dtype() == before, (
            f"the default dtype was {before} before precision_tensor_init_context and "
            f"{torch.get_default_dtype()} after it"
        )

    def test_autocast_is_a_context(self, plugin: object) -> None:
        self.require(plugin, "precision_autocast")
        before = torch.get_default_dtype()
        context = self.call(plugin, self.kind, "precision_autocast")
        assert isinstance(context, AbstractContextManager), f"precision_autocast returned {context!r}"
        with context:
            pass
        assert torch.get_default_dtype() == before

    def test_convert_input_keeps_structure_and_integers(self, plugin: object) -> None:
        self.require(plugin, "precision_convert_input")
        batch: dict[str, Any] = {"x": torch.ones(2, 3), "labels": torch.tensor([1, 2]), "extra": [torch.zeros(1), "a"]}
        converted = self.call(plugin, self.kind, "precision_convert_input", data=batch)
        assert isinstance(converted, dict) and set(converted) == set(batch), f"the batch became {converted!r}"
        assert converted["labels"].dtype == torch.int64, "integer tensors must keep their dtype"
        assert isinstance(converted["extra"], list) and converted["extra"][1] == "a"
        assert converted["x"].is_floating_point() and converted["x"].shape == (2, 3)

    def test_state_survives_a_weights_only_checkpoint(self, plugin: object) -> None:
        self.require(plugin, "precision_state_dict")
        state = self.call(plugin, self.kind, "precision_state_dict")
        assert isinstance(state, dict), f"precision_state_dict returned {state!r}, expected a dict"
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=True)
        self.call(plugin, self.kind, "precision_load_state_dict", state=loaded)

    def test_module_output_comes_back_in_the_default_dtype(self, plugin: object) -> None:
        lite = core.Lite(accelerator=self.accelerator, strategy="single_device", devices=1, precision=plugin,
                         plugins=["local"])
        dtype = lite.launch(_forward_dtype)
        assert dtype == str(torch.get_default_dtype()), (
            f"a set-up module returned {dtype}; precision_convert_output must give back {torch.get_default_dtype()}"
        )

    def _lite(self, plugin: object) -> core.Lite:
        return core.Lite(accelerator=self.accelerator, strategy="single_device", devices=1, precision=plugin,
                         plugins=["local"])

    def test_optimizer_made_before_setup_follows_the_conversion(self, plugin: object) -> None:
        found = self._lite(plugin).launch(_optimizer_references)
        assert found["unknown"] == 0, (
            f"after Lite.setup(model, optimizer) the optimizer holds {found['unknown']} tensor(s) that are no longer "
            f"the model's parameters: a conversion that replaces parameters must keep their names (weight, bias) so "
            f"that Lite re-points the optimizer"
        )
        assert found["left_out"] == 0, (
            f"{found['left_out']} trainable parameter(s) of the set-up model are not in the optimizer made before setup"
        )
        assert found["moved"] > 0, f"one optimizer step changed none of the {found['trainable']} trainable parameters"

    def test_checkpoints_load_between_converted_and_unconverted_runs(self, plugin: object, tmp_path: Any) -> None:
        converted, plain = str(tmp_path / "converted.ckpt"), str(tmp_path / "plain.ckpt")
        saved = self._lite(plugin).launch(_save, converted)
        reference = self._lite("32-true").launch(_save, plain)
        assert {name: value[0] for name, value in saved.items()} == {
            name: value[0] for name, value in reference.items()
        }, "a converted run must save the keys and shapes of the unconverted model (precision_module_state_to_save)"
        loaded_plain = self._lite("32-true").launch(_load, converted)
        loaded_converted = self._lite(plugin).launch(_load, plain)
        for name, (_, _, total) in reference.items():
            for what, found in (("an unconverted run loading the converted run's checkpoint", loaded_plain),
                                ("the converted run loading an unconverted checkpoint", loaded_converted)):
                assert found[name][2] == pytest.approx(total, rel=self.round_trip_rtol, abs=self.round_trip_rtol), (
                    f"{what}: {name!r} sums to {found[name][2]}, the saved model's to {total}"
                )

    def test_trains_in_a_lite_run(self, plugin: object) -> None:
        losses = train_briefly(accelerator=self.accelerator, precision=plugin)
        assert losses[-1] < losses[0], f"the loss did not go down in this precision: {losses}"
