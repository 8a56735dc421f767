"""16-mixed and bf16-mixed on the CPU, through the precision hooks of a resolved run.

Each test resolves a real run (``core.resolve``) and calls the hooks the runtime calls: autocast around
the forward, the precision's backward and optimizer step, its state dict.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import cast

import pytest
import torch
from core_amp import MixedPrecision

import core
from core import Catalog, discover


def only_first_party() -> Catalog:
    """The installed catalog restricted to core and core-amp, so results do not depend on what else is here."""
    return Catalog(tuple(info for info in discover().entries if info.distribution in {"core", "core-amp"}))


def resolve(precision: object, **options: object) -> core.ActiveSet:
    return core.resolve(precision=precision, accelerator="cpu", catalog=only_first_party(), **options)  # type: ignore[arg-type]


def classification_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(256, 8, generator=generator)
    labels = (features[:, 0] + features[:, 1] > 0).long()
    return features, labels


def small_model(seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))


def train_step(
    active: core.ActiveSet, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: tuple[torch.Tensor, ...]
) -> torch.Tensor:
    features, labels = batch
    with active.hook.precision_autocast():
        logits = model(features)
    logits = active.hook.precision_convert_output(data=logits)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    optimizer.zero_grad()
    active.hook.precision_backward(tensor=loss, module=model)
    active.hook.precision_optimizer_step(optimizer=optimizer, kwargs={})
    return loss.detach()


def mixed(active: core.ActiveSet) -> MixedPrecision:
    """The active precision plugin (an ActiveSet holds plugins as plain objects)."""
    return cast(MixedPrecision, active.precision)


def scaler(active: core.ActiveSet) -> torch.amp.GradScaler:
    """The 16-mixed precision's gradient scaler."""
    found = mixed(active).scaler
    assert found is not None
    return found


def grad(parameter: torch.Tensor) -> torch.Tensor:
    assert parameter.grad is not None
    return parameter.grad


def first(model: torch.nn.Module) -> torch.nn.Linear:
    """The first layer of a small_model()."""
    return cast(torch.nn.Linear, cast(torch.nn.Sequential, model)[0])


def record_output_dtypes(model: torch.nn.Module) -> list[torch.dtype]:
    dtypes: list[torch.dtype] = []
    first(model).register_forward_hook(lambda module, args, output: dtypes.append(output.dtype))
    return dtypes


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)])
def test_training_computes_in_half_keeps_float32_parameters_and_learns(precision: str, dtype: torch.dtype) -> None:
    active = resolve(precision)
    model = active.hook.precision_convert_module(module=small_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    inside = record_output_dtypes(model)
    features, labels = classification_data()
    losses = [train_step(active, model, optimizer, (features, labels)).item() for _ in range(40)]

    assert set(inside) == {dtype}, "the linear layer's output inside the forward is in the half dtype"
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}
    assert losses[-1] < 0.5 * losses[0], losses
    with torch.no_grad():
        accuracy = (model(features).argmax(dim=1) == labels).float().mean().item()
    assert accuracy > 0.9


def test_output_of_the_forward_is_converted_back_to_float32() -> None:
    active = resolve("bf16-mixed")
    with active.hook.precision_autocast():
        output = torch.nn.Linear(4, 2)(torch.randn(3, 4))
    assert output.dtype == torch.bfloat16
    converted = active.hook.precision_convert_output(data={"logits": output, "step": 3})
    assert converted["logits"].dtype == torch.float32 and converted["step"] == 3


def test_bf16_mixed_has_no_scaler_and_no_state() -> None:
    active = resolve("bf16-mixed")
    assert mixed(active).scaler is None
    assert active.hook.precision_state_dict() == {}


def test_autocast_takes_the_device_type_of_the_connected_device() -> None:
    active = resolve("16-mixed")
    assert mixed(active).device_type == "cpu"  # before connection
    active.device = torch.device("meta")
    with pytest.raises(core.ConfigurationError) as excinfo:
        active.hook.precision_autocast()
    message = str(excinfo.value)
    assert "precision='16-mixed'" in message and "'meta'" in message
    assert "Use precision='bf16-mixed' or '32-true'" in message


def test_16_mixed_scales_the_backward_and_unscales_once_before_clipping() -> None:
    active = resolve("16-mixed")
    model = small_model()
    reference = small_model()
    features, labels = classification_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    with active.hook.precision_autocast():
        loss = torch.nn.functional.cross_entropy(active.hook.precision_convert_output(data=model(features)), labels)
    active.hook.precision_backward(tensor=loss, module=model)
    with torch.autocast("cpu", dtype=torch.float16):
        reference_loss = torch.nn.functional.cross_entropy(reference(features).float(), labels)
    reference_loss.backward()

    # The unscaled reference loses precision in float16's narrow range (that is what scaling prevents).
    close = {"rtol": 1e-2, "atol": 1e-4}
    scale = scaler(active).get_scale()
    assert scale == 2.0**16
    scaled = grad(first(model).weight).clone()
    torch.testing.assert_close(scaled / scale, first(reference).weight.grad, rtol=close["rtol"], atol=close["atol"])
    active.hook.precision_unscale_gradients(optimizer=optimizer)
    torch.testing.assert_close(first(model).weight.grad, scaled / scale)
    # Clipping code may unscale again; the second call must change nothing (GradScaler alone would raise).
    active.hook.precision_unscale_gradients(optimizer=optimizer)
    torch.testing.assert_close(first(model).weight.grad, scaled / scale)
    before = first(model).weight.detach().clone()
    active.hook.precision_optimizer_step(optimizer=optimizer, kwargs={})
    torch.testing.assert_close(first(model).weight.detach(), before - 0.1 * scaled / scale)


@pytest.mark.parametrize("bad_value", [math.inf, math.nan])
def test_an_inf_or_nan_gradient_skips_the_step_and_halves_the_scale(bad_value: float) -> None:
    active = resolve("16-mixed")
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    features, labels = classification_data()
    train_step(active, model, optimizer, (features, labels))  # a normal step first: the scaler is in use
    scale = scaler(active).get_scale()

    with active.hook.precision_autocast():
        loss = torch.nn.functional.cross_entropy(active.hook.precision_convert_output(data=model(features)), labels)
    optimizer.zero_grad()
    active.hook.precision_backward(tensor=loss, module=model)
    grad(cast(torch.nn.Linear, model[2]).bias)[0] = bad_value
    before = [parameter.detach().clone() for parameter in model.parameters()]
    active.hook.precision_optimizer_step(optimizer=optimizer, kwargs={})

    for old, parameter in zip(before, model.parameters(), strict=True):
        assert torch.equal(old, parameter.detach()), "the step must be skipped entirely"
    assert scaler(active).get_scale() == scale * 0.5

    train_step(active, model, optimizer, (features, labels))
    assert not torch.equal(before[0], first(model).weight.detach()), "the next finite step updates again"


def test_a_closure_is_run_before_the_scaled_step_and_lbfgs_is_refused() -> None:
    active = resolve("16-mixed")
    model = small_model()
    features, labels = classification_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        with active.hook.precision_autocast():
            loss = torch.nn.functional.cross_entropy(model(features).float(), labels)
        active.hook.precision_backward(tensor=loss, module=model)
        return loss

    before = first(model).weight.detach().clone()
    returned = active.hook.precision_optimizer_step(optimizer=optimizer, kwargs={"closure": closure})
    assert isinstance(returned, torch.Tensor) and returned.ndim == 0
    assert not torch.equal(before, first(model).weight.detach())

    lbfgs = torch.optim.LBFGS(model.parameters())
    with pytest.raises(core.ConfigurationError, match=r"cannot step LBFGS.*Use precision='bf16-mixed' or '32-true'"):
        active.hook.precision_optimizer_step(optimizer=lbfgs, kwargs={"closure": closure})


def _trained_scaler_state(active: core.ActiveSet, steps: int) -> dict[str, object]:
    model = small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    features, labels = classification_data()
    for _ in range(steps):
        train_step(active, model, optimizer, (features, labels))
    # One overflow so that the scale differs from the default.
    with active.hook.precision_autocast():
        loss = torch.nn.functional.cross_entropy(model(features).float(), labels)
    active.hook.precision_backward(tensor=loss, module=model)
    grad(first(model).weight).fill_(math.inf)
    active.hook.precision_optimizer_step(optimizer=optimizer, kwargs={})
    train_step(active, model, optimizer, (features, labels))
    return active.hook.precision_state_dict()


def test_scaler_state_round_trips_through_a_weights_only_checkpoint(tmp_path: Path) -> None:
    saved = resolve("16-mixed")
    state = _trained_scaler_state(saved, steps=3)
    assert state["scale"] == 2.0**15 and state["_growth_tracker"] == 1
    path = str(tmp_path / "precision.ckpt")
    saved.hook.checkpoint_io_save(checkpoint={"precision": state}, path=path, storage_options=None)

    restored = resolve("16-mixed")
    loaded = restored.hook.checkpoint_io_load(path=path, map_location="cpu", weights_only=True)
    restored.hook.precision_load_state_dict(state=loaded["precision"])
    assert restored.hook.precision_state_dict() == state
    assert scaler(restored).get_scale() == 2.0**15


def test_state_loaded_before_the_first_step_is_kept() -> None:
    active = resolve("16-mixed")
    state = {"scale": 128.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
    active.hook.precision_load_state_dict(state={**state, "_growth_tracker": 5})
    active.device = torch.device("cpu")
    assert active.hook.precision_state_dict()["scale"] == 128.0
    assert active.hook.precision_state_dict()["_growth_tracker"] == 5


def test_an_empty_precision_state_keeps_the_fresh_scaler_and_a_partial_one_is_refused() -> None:
    active = resolve("16-mixed")
    fresh = active.hook.precision_state_dict()
    active.hook.precision_load_state_dict(state={})  # a checkpoint written under 32-true or bf16-mixed
    assert active.hook.precision_state_dict() == fresh
    with pytest.raises(core.CheckpointError) as excinfo:
        active.hook.precision_load_state_dict(state={"scale": 4.0})
    message = str(excinfo.value)
    assert "lacks the gradient scaler fields" in message and "'_growth_tracker'" in message


@pytest.mark.parametrize(
    ("spelling", "canonical"), [(16, "16-mixed"), ("16", "16-mixed"), ("bf16", "bf16-mixed")]
)
def test_legacy_spellings_warn_and_resolve_to_the_canonical_name(spelling: object, canonical: str) -> None:
    with pytest.warns(core.CoreDeprecationWarning, match=f"legacy spelling of '{canonical}'.*precision='{canonical}'"):
        active = resolve(spelling)
    assert active.config.precision == canonical
    assert mixed(active).name == canonical


def test_canonical_spellings_do_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    resolve("16-mixed")
    resolve("bf16-mixed")
    assert not [w for w in recwarn if issubclass(w.category, core.CoreDeprecationWarning)]


def _strategy_named(name: str) -> object:
    """A strategy object passed in code, so the refusal below comes from core-amp's declaration alone."""
    from core.toolkit.strategies import SingleDeviceStrategy

    strategy = SingleDeviceStrategy()
    strategy.name = name  # type: ignore[misc]
    return strategy


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed", "16"])
def test_mixed_precision_with_dp_is_refused_naming_both_and_the_way_out(precision: str) -> None:
    with pytest.raises(core.ConfigurationError) as excinfo, warnings.catch_warnings():
        warnings.simplefilter("ignore", core.CoreDeprecationWarning)
        resolve(precision, strategy=_strategy_named("dp"))
    message = str(excinfo.value)
    canonical = "16-mixed" if precision == "16" else precision
    assert f"The precision '{canonical}'" in message and "(core-amp)" in message
    assert "the strategy 'dp'" in message
    assert "never strategy ['dp']" in message
    assert "use strategy='ddp' instead" in message


def test_the_device_type_is_validated_once_not_on_every_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    active = resolve("16-mixed")
    active.hook.precision_autocast()
    asked: list[str] = []
    original = torch.amp.is_autocast_available
    def recording(device_type: str) -> bool:
        asked.append(device_type)
        return original(device_type)

    monkeypatch.setattr(torch.amp, "is_autocast_available", recording)
    for _ in range(3):
        with active.hook.precision_autocast():
            pass
    assert asked == []
    active.device = torch.device("meta")  # a new device type is validated again
    with pytest.raises(core.ConfigurationError):
        active.hook.precision_autocast()
    assert asked == ["meta"]


def test_the_legacy_warning_points_at_the_users_line_and_is_shown_by_default(tmp_path: Path) -> None:
    """Python hides DeprecationWarnings unless attributed to __main__: the warning must name the user's call."""
    script = tmp_path / "train.py"
    script.write_text("import core\n\nactive = core.resolve(accelerator='cpu', precision=16)\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    expected = f"{script}:3: CoreDeprecationWarning: precision=16 (or '16') is a legacy spelling of '16-mixed'"
    assert expected in result.stderr
