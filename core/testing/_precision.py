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


def _forward_dtype(lite: core.Lite) -> str:
    module = lite.setup(torch.nn.Linear(4, 2))
    return str(module(torch.ones(3, 4, device=lite.device)).dtype)


class PrecisionConformance(Conformance):
    """Inherit this in a class named ``Test...`` and set ``alias`` (or ``plugin_factory``).

    Checks: ``precision_convert_module`` returns a module; ``precision_tensor_init_context`` restores the
    default dtype on exit; ``precision_convert_input`` keeps the structure of a batch and leaves integer
    tensors alone; a set-up module's output comes back in the default dtype; the precision's own state
    survives a ``weights_only`` save and load; and a one-process ``Lite`` run on ``accelerator`` trains.
    Hooks a precision does not implement are skipped: ``Lite`` supplies the defaults.
    """

    kind: ClassVar[str] = "precision"
    accelerator: ClassVar[str] = "cpu"
    """The accelerator alias of the runs (a precision that needs a GPU sets ``"cuda"``)."""

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

    def test_trains_in_a_lite_run(self, plugin: object) -> None:
        losses = train_briefly(accelerator=self.accelerator, precision=plugin)
        assert losses[-1] < losses[0], f"the loss did not go down in this precision: {losses}"
