"""The precision kit: conversions, contexts, its own state, and a run in that precision."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, Final

import pytest
import torch

import core
from core.registry import discover, resolve
from core.testing._base import Conformance, caller_python_path, timeout
from core.testing._lite import train_briefly

STRATEGY_JOB_TIMEOUT: Final = 600.0
"""Seconds the 2-process job of :attr:`PrecisionConformance.strategies` may take (it usually takes 30 to 90)."""

# One 2-process job per test class, started by the first test that reads it.
_strategy_jobs: dict[type, dict[int, Any]] = {}


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
    return _summary(saved)


def _load(lite: core.Lite, path: str) -> dict[str, Any]:
    model = _model()
    model.apply(_zero)
    module = lite.setup(model)
    lite.load(path, {"model": module})
    again = path + ".again"
    lite.save(again, {"model": module})
    saved = torch.load(again, weights_only=True)["model"]
    return _summary(saved)


def _summary(saved: dict[str, torch.Tensor]) -> dict[str, Any]:
    """By key: shape, dtype, the sum of the values and the sum of their magnitudes (the scale of rounding errors)."""
    return {
        name: (tuple(value.shape), str(value.dtype), float(value.double().sum()), float(value.double().abs().sum()))
        for name, value in saved.items()
    }


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
    :attr:`round_trip_rtol`); a one-process ``Lite`` run on ``accelerator`` trains; and in one job of 2 processes
    (gloo), under each of :attr:`strategies` the precision allows, a run trains with an optimizer made before setup
    (holding the set-up parameters) and its checkpoint loads into a ``32-true`` run of the same strategy.
    Hooks a precision does not implement are skipped: ``Lite`` supplies the defaults.
    """

    kind: ClassVar[str] = "precision"
    accelerator: ClassVar[str] = "cpu"
    """The accelerator alias of the runs (a precision that needs a GPU sets ``"cuda"``)."""
    round_trip_rtol: ClassVar[float] = 1e-6
    """How close a checkpoint's values come back through a converted run, as a fraction of the sum of their magnitudes
    (at least the saved dtype's epsilon; a quantizing precision sets more)."""
    strategies: ClassVar[tuple[str, ...]] = ("ddp", "fsdp")
    """Strategies the 2-process check runs the precision under (CPU, gloo), one after the other in one job; those
    the precision's ``supports`` refuses or that are not installed are left out."""

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
        for name, (_, _, total, magnitude) in reference.items():
            # The rounding of the precision's own dtype is allowed (a bf16-true checkpoint holds bfloat16 values).
            dtype = getattr(torch, saved[name][1].removeprefix("torch."))
            rtol = max(self.round_trip_rtol, torch.finfo(dtype).eps if dtype.is_floating_point else 0.0)
            for what, found in (("an unconverted run loading the converted run's checkpoint", loaded_plain),
                                ("the converted run loading an unconverted checkpoint", loaded_converted)):
                assert abs(found[name][2] - total) <= rtol * magnitude + 1e-12, (
                    f"{what}: {name!r} sums to {found[name][2]}, the saved model's to {total} (allowed: "
                    f"{rtol:g} of the sum of magnitudes, {magnitude:g})"
                )

    def _strategy_job(self, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[int, Any]]:
        installed = set(discover().installed_aliases("strategy"))
        chosen = [name for name in self.strategies if name in installed and self._combines_with(name)]
        cls = type(self)
        if chosen and cls not in _strategy_jobs:
            directory = tmp_path_factory.mktemp(f"precision-{cls.__name__}")
            spec = {"strategies": chosen, "precision": self.reference(), "accelerator": self.accelerator, "devices": 2}
            (directory / "spec.json").write_text(json.dumps(spec))
            out = str(directory / "record")
            environment = {**os.environ, "OMP_NUM_THREADS": "1",
                           "PYTHONPATH": os.pathsep.join([*caller_python_path(), os.environ.get("PYTHONPATH", "")])}
            command = [sys.executable, "-m", "core.run", "--accelerator", self.accelerator, "--devices", "2",
                       "-m", "core.testing._precision_job", str(directory / "spec.json"), out]
            done = subprocess.run(command, env=environment, capture_output=True, text=True,
                                  timeout=STRATEGY_JOB_TIMEOUT)
            records = {rank: Path(f"{out}.{rank}.json") for rank in range(2)}
            if done.returncode != 0 or not all(path.exists() for path in records.values()):
                pytest.fail(f"the precision job ({' '.join(command)}) failed with exit code {done.returncode}:\n"
                            f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}", pytrace=False)
            _strategy_jobs[cls] = {rank: json.loads(path.read_text()) for rank, path in records.items()}
        return chosen, _strategy_jobs.get(cls, {})

    def _combines_with(self, strategy: str) -> bool:
        """Whether the resolver accepts this precision with ``strategy`` (each side's ``supports``)."""
        try:
            resolve(accelerator=self.accelerator, strategy=strategy, devices=2, precision=self.make_plugin(),
                    plugins=["local"])
        except core.ConfigurationError:
            return False
        return True

    @pytest.mark.distributed
    @timeout(STRATEGY_JOB_TIMEOUT + 60)
    def test_trains_and_saves_plainly_under_each_strategy(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        chosen, records = self._strategy_job(tmp_path_factory)
        if not chosen:
            pytest.skip(f"none of {self.strategies} is installed and allowed by the precision's supports")
        reference = sorted(_model().state_dict())
        for rank, record in records.items():
            for strategy in chosen:
                result = record[strategy]
                assert result["ok"], f"strategy={strategy!r}, global rank {rank}:\n{result['error']}"
                assert result["finite_losses"], f"strategy={strategy!r}: losses {result['trained']['losses']}"
                assert result["trained"]["unknown"] == 0, (
                    f"strategy={strategy!r}: the optimizer made before setup holds tensors that are not the set-up "
                    f"model's parameters"
                )
                assert result["loaded"]["keys"] == reference and result["loaded"]["finite"], (
                    f"strategy={strategy!r}: a 32-true run loading the checkpoint holds {result['loaded']}"
                )

    def test_trains_in_a_lite_run(self, plugin: object) -> None:
        losses = train_briefly(accelerator=self.accelerator, precision=plugin)
        assert losses[-1] < losses[0], f"the loss did not go down in this precision: {losses}"
