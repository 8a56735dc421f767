"""Every `Lite` method on the built-in single_device strategy: what it returns, which hooks it goes through,
and the errors a user meets."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import torch

import core
from core import hookimpl
from core.builtin.accelerators import CPUAccelerator
from core.builtin.precisions import TruePrecision
from core.builtin.strategies import SingleDeviceStrategy
from core.lite import LiteModule, LiteOptimizer

calls: list[str] = []  # hooks in the order the plugins below saw them


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_PORT"):
        monkeypatch.delenv(variable, raising=False)
    calls.clear()
    yield


def run(function: Callable[[core.Lite], Any], **settings: Any) -> Any:
    """Launch ``function`` on a fresh single-device CPU Lite and return what it returned."""
    return core.Lite(**{"accelerator": "cpu", "devices": 1, **settings}).launch(function)


class CountingPrecision(TruePrecision):
    """32-true that records the hooks Lite calls on it."""

    def __init__(self) -> None:
        super().__init__("counting-32", torch.float32)

    @hookimpl
    def precision_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> bool:
        calls.append(f"precision_backward(module={type(module).__name__})")
        tensor.backward()
        return True

    @hookimpl
    def precision_optimizer_step(self, optimizer: torch.optim.Optimizer, kwargs: Mapping[str, Any]) -> Any:
        calls.append(f"precision_optimizer_step({type(optimizer).__name__}, {sorted(kwargs)})")
        return optimizer.step(**kwargs)

    @hookimpl
    def precision_unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        calls.append(f"precision_unscale_gradients({type(optimizer).__name__})")

    @hookimpl
    def precision_state_dict(self) -> dict[str, Any]:
        return {"scale": 1024.0}

    @hookimpl
    def precision_load_state_dict(self, state: dict[str, Any]) -> None:
        calls.append(f"precision_load_state_dict({state})")


class CountingStrategy(SingleDeviceStrategy):
    @hookimpl
    def strategy_block_backward_sync(self, module: torch.nn.Module) -> AbstractContextManager[None]:
        calls.append(f"strategy_block_backward_sync({type(module).__name__})")
        return self._recording_context()

    @contextmanager
    def _recording_context(self) -> Iterator[None]:
        calls.append("enter no_sync")
        yield
        calls.append("exit no_sync")

    @hookimpl
    def strategy_barrier(self, name: str | None) -> None:
        calls.append(f"strategy_barrier({name})")


class MetaAccelerator(CPUAccelerator):
    """A CPU accelerator that hands out the meta device, so that every move Lite makes is visible."""

    @hookimpl
    def accelerator_setup_device(self, local_rank: int, device_ids: Any) -> torch.device:
        return torch.device("meta")


def first_layer(model: torch.nn.Module) -> torch.nn.Linear:
    """The first Linear of a small_model(), set up or not."""
    inner = model.module if isinstance(model, LiteModule) else model
    return cast(torch.nn.Linear, cast(torch.nn.Sequential, inner)[0])


def small_model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


# -------------------------------------------------------------------------------------------------
# setup
# -------------------------------------------------------------------------------------------------


def test_setup_returns_the_module_alone_or_with_its_optimizers() -> None:
    def check(lite: core.Lite) -> None:
        model = small_model()
        alone = lite.setup(model)
        assert isinstance(alone, LiteModule) and alone.module is model

        other = small_model()
        first, second = torch.optim.SGD(other.parameters(), lr=0.1), torch.optim.Adam(other.parameters())
        wrapped, sgd, adam = lite.setup(other, first, second)
        assert isinstance(wrapped, LiteModule)
        assert isinstance(sgd, LiteOptimizer) and sgd.optimizer is first
        assert isinstance(sgd, torch.optim.SGD) and isinstance(adam, torch.optim.Adam)

    run(check)


def test_a_set_up_module_keeps_the_original_state_dict_keys_and_attributes() -> None:
    def check(lite: core.Lite) -> None:
        model = small_model()
        model.label = "digits"  # type: ignore[assignment]
        wrapped = lite.setup_module(model)
        assert list(wrapped.state_dict()) == list(model.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
        assert wrapped.label == "digits"
        wrapped.label = "changed"
        assert model.label == "changed"  # attributes set on the wrapper land on the user's module
        assert first_layer(wrapped) is model[0]
        fresh = small_model()
        torch.nn.init.zeros_(first_layer(fresh).weight)
        wrapped.load_state_dict(fresh.state_dict())
        assert torch.equal(first_layer(model).weight, first_layer(fresh).weight)
        assert "LiteModule(Sequential(" in repr(wrapped)

    run(check)


def test_the_forward_of_a_set_up_module_converts_inputs_and_outputs_to_the_precision() -> None:
    def check(lite: core.Lite) -> tuple[torch.dtype, torch.dtype, torch.dtype]:
        model = lite.setup(small_model())
        seen: list[torch.dtype] = []
        first_layer(model).register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0].dtype))
        output = model(torch.randn(2, 4))
        return seen[0], first_layer(model).weight.dtype, output.dtype

    assert run(check, precision="64-true") == (torch.float64, torch.float64, torch.float32)
    assert run(check, precision="bf16-true") == (torch.bfloat16, torch.bfloat16, torch.float32)


def test_setup_moves_to_the_device_unless_asked_not_to() -> None:
    def check(lite: core.Lite) -> tuple[str, str]:
        moved = lite.setup(small_model())
        kept = lite.setup(small_model(), move_to_device=False)
        return first_layer(moved).weight.device.type, first_layer(kept).weight.device.type

    assert run(check, accelerator=MetaAccelerator()) == ("meta", "cpu")


def test_setting_up_twice_or_the_wrong_type_is_an_error() -> None:
    def check(lite: core.Lite) -> None:
        wrapped = lite.setup(small_model())
        with pytest.raises(core.CoreError, match=r"already set up by Lite.setup"):
            lite.setup(wrapped)
        with pytest.raises(core.ConfigurationError, match=r"takes a torch.nn.Module, got str"):
            lite.setup_module("model")  # type: ignore[arg-type]
        optimizer = lite.setup_optimizers(torch.optim.SGD(small_model().parameters(), lr=1.0))
        with pytest.raises(core.CoreError, match="optimizer was already set up"):
            lite.setup_optimizers(optimizer)  # refused at run time: set up already
        with pytest.raises(core.ConfigurationError, match=r"takes torch.optim.Optimizer objects, got list"):
            lite.setup_optimizers([])  # type: ignore[call-overload]

    run(check)


# -------------------------------------------------------------------------------------------------
# the training step
# -------------------------------------------------------------------------------------------------


def test_backward_and_step_go_through_the_strategy_and_precision_hooks() -> None:
    def check(lite: core.Lite) -> None:
        model = small_model()
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        loss = model(torch.randn(2, 4)).sum()
        lite.backward(loss)
        optimizer.step()
        optimizer.step(closure=lambda: torch.tensor(0.0))
        optimizer.zero_grad()
        assert all(parameter.grad is None for parameter in model.parameters())

    run(check, precision=CountingPrecision())
    assert calls == [
        # the single set-up module is passed along without model=
        "precision_backward(module=Sequential)",
        "precision_optimizer_step(SGD, [])",
        "precision_optimizer_step(SGD, ['closure'])",
    ]


def test_backward_refuses_arguments_it_cannot_pass_on() -> None:
    def check(lite: core.Lite) -> None:
        loss = lite.setup(small_model())(torch.randn(1, 4)).sum()
        with pytest.raises(core.ConfigurationError, match=r"passes no arguments to tensor.backward\(\)"):
            lite.backward(loss, retain_graph=True)

    run(check)


def test_a_learning_rate_scheduler_drives_a_set_up_optimizer() -> None:
    def check(lite: core.Lite) -> list[float]:
        model = small_model()
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=1.0))
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        rates = []
        for _ in range(3):
            lite.backward(model(torch.randn(2, 4)).sum())
            optimizer.step()
            scheduler.step()
            rates.append(optimizer.param_groups[0]["lr"])
        return rates

    assert run(check, precision=CountingPrecision()) == [0.5, 0.25, 0.125]
    assert calls.count("precision_optimizer_step(SGD, [])") == 3


def test_optimizer_state_survives_load_state_dict_through_the_wrapper() -> None:
    def check(lite: core.Lite) -> None:
        model = small_model()
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9))
        saved = optimizer.state_dict()
        saved["param_groups"][0]["lr"] = 0.01
        optimizer.load_state_dict(saved)
        assert optimizer.param_groups[0]["lr"] == optimizer.optimizer.param_groups[0]["lr"] == 0.01

    run(check)


def test_clip_gradients_by_norm_and_by_value_after_unscaling() -> None:
    def check(lite: core.Lite) -> tuple[float, float, float]:
        model = small_model()
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        lite.backward((model(torch.randn(8, 4)) * 100).sum())
        before = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
        total = lite.clip_gradients(model, optimizer, max_norm=1.0)
        after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
        assert lite.clip_gradients(model, optimizer, clip_val=0.001) is None
        largest = max(float(p.grad.abs().max()) for p in model.parameters())
        return float(total - before), float(after), largest

    difference, after, largest = run(check, precision=CountingPrecision())
    assert abs(difference) < 1e-3 and abs(after - 1.0) < 1e-4 and largest <= 0.001 + 1e-9
    assert calls[-2:] == ["precision_unscale_gradients(SGD)"] * 2


def test_clip_gradients_needs_exactly_one_limit() -> None:
    def check(lite: core.Lite) -> None:
        model = small_model()
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        neither_or_both: tuple[dict[str, Any], ...] = ({}, {"clip_val": 1.0, "max_norm": 1.0})
        for limits in neither_or_both:
            with pytest.raises(core.ConfigurationError, match=r"exactly one of clip_val= .* or max_norm="):
                lite.clip_gradients(model, optimizer, **limits)

    run(check)


def test_autocast_is_the_precision_context() -> None:
    def check(lite: core.Lite) -> tuple[torch.dtype, torch.dtype]:
        with lite.autocast():
            inside = torch.ones(1).dtype
        return inside, torch.ones(1).dtype

    assert run(check, precision="64-true") == (torch.float64, torch.float32)


def test_to_device_moves_modules_tensors_and_collections() -> None:
    def check(lite: core.Lite) -> None:
        batch: dict[str, Any] = {"x": torch.ones(2), "pair": (torch.zeros(1), 3), "name": "kept"}
        moved = lite.to_device(batch)
        assert moved["x"].is_meta and moved["pair"][0].is_meta and moved["pair"][1] == 3 and moved["name"] == "kept"
        assert lite.to_device(torch.nn.Linear(1, 1)).weight.is_meta
        assert lite.device == torch.device("meta")

    run(check, accelerator=MetaAccelerator())


def test_no_backward_sync_asks_the_strategy_for_the_forward_module() -> None:
    def check(lite: core.Lite) -> None:
        model = lite.setup(small_model())
        with lite.no_backward_sync(model):
            calls.append("body")
        with lite.no_backward_sync(model, enabled=False):
            calls.append("body without blocking")
        with pytest.raises(core.ConfigurationError, match=r"returned by Lite.setup .* got Linear") as info:
            lite.no_backward_sync(torch.nn.Linear(1, 1))
        assert isinstance(info.value, TypeError)  # Fabric's type for it

    run(check, strategy=CountingStrategy())
    assert calls == [
        "strategy_block_backward_sync(Sequential)", "enter no_sync", "body", "exit no_sync", "body without blocking",
    ]


def test_init_module_creates_parameters_in_the_precision_on_the_device() -> None:
    def check(lite: core.Lite) -> tuple[torch.dtype, str, torch.dtype]:
        with lite.init_module():
            layer = torch.nn.Linear(2, 2)
        with lite.init_module(empty_init=True):
            assert torch.nn.Linear(2, 2).weight.dtype == torch.float64
        return layer.weight.dtype, layer.weight.device.type, torch.get_default_dtype()

    assert run(check, precision="64-true") == (torch.float64, "cpu", torch.float32)
    assert run(check, precision="64-true", accelerator=MetaAccelerator())[1] == "meta"


# -------------------------------------------------------------------------------------------------
# collectives on one process
# -------------------------------------------------------------------------------------------------


def test_all_reduce_and_all_gather_accept_tensors_numbers_and_collections() -> None:
    def check(lite: core.Lite) -> None:
        reduced = lite.all_reduce({"loss": torch.tensor(2.0), "count": 3, "tag": "x"}, reduce_op="sum")
        assert torch.equal(reduced["loss"], torch.tensor(2.0)) and torch.equal(reduced["count"], torch.tensor(3))
        assert reduced["tag"] == "x"
        gathered = lite.all_gather([torch.arange(3), 5.0])
        assert gathered[0].shape == (1, 3) and torch.equal(gathered[1], torch.tensor([5.0]))
        with pytest.raises(core.ConfigurationError, match=r"Unknown reduce_op='avg'; expected one of"):
            lite.all_reduce(torch.ones(1), reduce_op="avg")

    run(check)


def test_broadcast_barrier_and_rank_zero_first() -> None:
    def check(lite: core.Lite) -> None:
        assert lite.broadcast({"a": 1}) == {"a": 1}
        with pytest.raises(core.ConfigurationError, match=r"broadcast\(src=1\) names a rank outside"):
            lite.broadcast(1, src=1)
        lite.barrier("here")
        with lite.rank_zero_first():
            calls.append("first")
        with lite.rank_zero_first(local=True):
            calls.append("local first")

    run(check, strategy=CountingStrategy())
    assert calls == [
        "strategy_barrier(here)", "first", "strategy_barrier(rank_zero_first)",
        "local first", "strategy_barrier(rank_zero_first)",
    ]


# -------------------------------------------------------------------------------------------------
# checkpoints
# -------------------------------------------------------------------------------------------------


def test_save_and_load_restore_modules_and_optimizers_in_place_and_return_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "run.ckpt"

    def check(lite: core.Lite) -> None:
        model = small_model()
        model, optimizer = lite.setup(model, torch.optim.Adam(model.parameters(), lr=0.01))
        lite.backward(model(torch.randn(4, 4)).sum())
        optimizer.step()
        lite.save(path, {"model": model, "optimizer": optimizer, "step": 7, "note": "first"})

        raw = torch.load(path, weights_only=True)
        assert list(raw["model"]) == ["0.weight", "0.bias", "2.weight", "2.bias"]  # portable keys
        assert raw["step"] == 7 and raw["core/precision"] == {"scale": 1024.0}

        other = small_model()
        torch.nn.init.zeros_(first_layer(other).weight)
        other, other_optimizer = lite.setup(other, torch.optim.Adam(other.parameters(), lr=0.5))
        state: dict[str, Any] = {"model": other, "optimizer": other_optimizer, "step": 0}
        remainder = lite.load(path, state)
        assert remainder == {"note": "first"}
        assert state["step"] == 7
        assert torch.equal(first_layer(other).weight, first_layer(model).weight)
        assert other_optimizer.param_groups[0]["lr"] == 0.01
        assert other_optimizer.state_dict()["state"][0]["step"] == 1

        assert lite.load(path)["note"] == "first"  # no state: the whole checkpoint

    run(check, precision=CountingPrecision())
    assert calls[-1] == "precision_load_state_dict({'scale': 1024.0})"


def test_load_with_strict_names_missing_keys(tmp_path: Path) -> None:
    path = tmp_path / "small.ckpt"

    def check(lite: core.Lite) -> None:
        lite.save(path, {"step": 1})
        with pytest.raises(core.CheckpointError) as error:
            lite.load(path, {"step": 0, "model": small_model()})
        assert "has no entry for ['model']" in str(error.value) and "strict=False" in str(error.value)
        state: dict[str, Any] = {"step": 0, "model": small_model()}
        assert lite.load(path, state, strict=False) == {}
        assert state["step"] == 1

    run(check)


def test_save_filter_keeps_only_chosen_entries(tmp_path: Path) -> None:
    path = tmp_path / "filtered.ckpt"

    def check(lite: core.Lite) -> None:
        model = lite.setup(small_model())
        lite.save(path, {"model": model}, filter={"model": lambda name, value: name.endswith("weight")})
        assert list(lite.load(path)["model"]) == ["0.weight", "2.weight"]
        with pytest.raises(core.ConfigurationError, match="names the key 'optimizer', which the state does not have"):
            lite.save(path, {"model": model}, filter={"optimizer": lambda name, value: True})

    run(check)


def test_load_of_a_missing_file_names_it(tmp_path: Path) -> None:
    def check(lite: core.Lite) -> None:
        with pytest.raises(core.CheckpointError, match=r"No checkpoint at .*nowhere.ckpt"):
            lite.load(tmp_path / "nowhere.ckpt", {})

    run(check)


# -------------------------------------------------------------------------------------------------
# utilities
# -------------------------------------------------------------------------------------------------


def test_seed_everything_is_a_static_method_seeding_workers_by_default() -> None:
    assert core.Lite.seed_everything(5, verbose=False) == 5
    first = torch.rand(2)
    core.Lite(accelerator="cpu", devices=1).seed_everything(5, verbose=False)
    assert torch.equal(torch.rand(2), first)
    from core.lite._seed import seeds_workers

    assert seeds_workers()
    core.Lite.seed_everything(5, workers=False, verbose=False)
    assert not seeds_workers()


def test_repr_shows_the_phase_and_the_active_set() -> None:
    text = repr(core.Lite(accelerator="cpu", devices=1, precision="bf16-true"))
    assert text.startswith("<Lite new") and "bf16-true" in text and "single_device" in text


def test_set_up_modules_and_optimizers_can_be_deep_copied() -> None:
    # An exponential moving average of the weights, or a snapshot, starts with a deep copy.
    def check(lite: core.Lite) -> None:
        model = small_model()
        model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
        model_copy, optimizer_copy = copy.deepcopy(model), copy.deepcopy(optimizer)
        assert isinstance(model_copy, LiteModule) and isinstance(optimizer_copy, torch.optim.SGD)
        assert first_layer(model_copy).weight is not first_layer(model).weight
        assert torch.equal(model_copy(torch.ones(1, 4)), model(torch.ones(1, 4)))
        assert optimizer_copy.optimizer is not optimizer.optimizer  # type: ignore[attr-defined]  # LiteOptimizer's
        assert optimizer_copy.param_groups[0]["momentum"] == 0.9

    run(check)
