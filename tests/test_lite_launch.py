"""How `Lite.launch` drives a run through the hooks: the order of setup and teardown in every process,
the subclass style, pickled launches (what a spawning strategy does), and the errors around the lifecycle."""

from __future__ import annotations

import copy
import os
import pickle
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from typing_extensions import assert_type

import core
from core import hookimpl
from core.builtin.accelerators import CPUAccelerator
from core.builtin.checkpoint_io import TorchCheckpointIO
from core.builtin.environments import LocalEnvironment
from core.builtin.strategies import SingleDeviceStrategy

calls: list[str] = []  # hooks in the order the plugins below saw them


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_PORT"):
        monkeypatch.delenv(variable, raising=False)
    calls.clear()
    yield
    calls.clear()


class RecordingAccelerator(CPUAccelerator):
    @hookimpl
    def accelerator_setup_device(self, local_rank: int, device_ids: Sequence[int]) -> torch.device:
        calls.append(f"accelerator_setup_device(local_rank={local_rank}, device_ids={list(device_ids)})")
        return torch.device("cpu")

    @hookimpl
    def accelerator_teardown(self) -> None:
        calls.append("accelerator_teardown")


class RecordingStrategy(SingleDeviceStrategy):
    @hookimpl
    def strategy_launch(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        calls.append("strategy_launch")
        return function(*args, **kwargs)

    @hookimpl
    def strategy_setup_environment(self) -> None:
        calls.append("strategy_setup_environment")

    @hookimpl
    def strategy_teardown(self) -> None:
        calls.append("strategy_teardown")


class PicklingStrategy(RecordingStrategy):
    """Sends the function through pickle, as a strategy starting processes with `spawn` does."""

    @hookimpl
    def strategy_launch(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        calls.append("strategy_launch")
        received = pickle.loads(pickle.dumps(function))
        os.environ["CORE_TEST_IN_CHILD"] = "1"
        try:
            return received(*args, **kwargs)
        finally:
            del os.environ["CORE_TEST_IN_CHILD"]


class ElsewhereStrategy(RecordingStrategy):
    """Runs the function in a copy of the Lite only (the launching process is not a rank)."""

    @hookimpl
    def strategy_launch(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        return pickle.loads(pickle.dumps(function))(*args, **kwargs)


class RecordingEnvironment(LocalEnvironment):
    @hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> core.ClusterInfo:
        calls.append("environment_cluster_info")
        return super().environment_cluster_info(devices_per_node, num_nodes)

    @hookimpl
    def environment_teardown(self) -> None:
        calls.append("environment_teardown")
        super().environment_teardown()


class RecordingCheckpointIO(TorchCheckpointIO):
    @hookimpl
    def checkpoint_io_teardown(self) -> None:
        calls.append("checkpoint_io_teardown")


def recording_lite(strategy: object | None = None, cls: type[core.Lite] = core.Lite) -> core.Lite:
    return cls(
        accelerator=RecordingAccelerator(),
        strategy=strategy or RecordingStrategy(),
        devices=1,
        plugins=[RecordingEnvironment(), RecordingCheckpointIO()],
    )


SETUP = [
    "strategy_launch",
    "environment_cluster_info",
    "accelerator_setup_device(local_rank=0, device_ids=[0])",
    "strategy_setup_environment",
]
TEARDOWN = ["strategy_teardown", "checkpoint_io_teardown", "accelerator_teardown", "environment_teardown"]


def record_and_return(lite: core.Lite, value: int, *, times: int = 1) -> int:
    calls.append(f"function(value={value}, times={times}, device={lite.device})")
    return value * times


def test_launch_sets_up_calls_the_function_with_the_lite_first_and_tears_down_in_order() -> None:
    lite = recording_lite()
    calls.clear()  # resolution asks the environment too; only the launch matters here

    assert lite.launch(record_and_return, 7, times=3) == 21

    assert calls == [*SETUP, "function(value=7, times=3, device=cpu)", *TEARDOWN]


def test_teardown_runs_when_the_function_raises_and_the_error_comes_out() -> None:
    def broken(lite: core.Lite) -> None:
        calls.append("function")
        raise KeyError("boom in the user's loop")

    lite = recording_lite()
    calls.clear()
    with pytest.raises(KeyError, match="boom in the user's loop"):
        lite.launch(broken)
    assert calls == [*SETUP, "function", *TEARDOWN]


class FailingTeardownStrategy(RecordingStrategy):
    @hookimpl
    def strategy_teardown(self) -> None:
        calls.append("strategy_teardown")
        raise RuntimeError("could not destroy the process group")


def test_every_teardown_runs_even_when_one_fails_and_the_first_failure_is_raised() -> None:
    lite = recording_lite(FailingTeardownStrategy())
    calls.clear()
    with pytest.raises(RuntimeError, match="could not destroy the process group"):
        lite.launch(record_and_return, 1)
    assert calls[-4:] == TEARDOWN


class Doubler(core.Lite):
    def run(self, value: int) -> int:
        calls.append(f"Doubler.run({value}) on {self.device}")
        return 2 * value


class LoudDoubler(Doubler):
    def run(self, value: int) -> int:
        calls.append("LoudDoubler.run")
        return super().run(value) + 1  # the parent's run must not launch a second time


def test_subclass_run_goes_through_the_same_launch() -> None:
    lite = recording_lite(cls=Doubler)
    calls.clear()
    assert lite.run(5) == 10
    assert calls == [*SETUP, "Doubler.run(5) on cpu", *TEARDOWN]


def test_an_overriding_run_calling_super_launches_once() -> None:
    lite = recording_lite(cls=LoudDoubler)
    calls.clear()
    assert lite.run(5) == 11
    assert calls == [*SETUP, "LoudDoubler.run", "Doubler.run(5) on cpu", *TEARDOWN]


def test_a_pickled_launch_resolves_again_and_sets_up_the_receiving_process() -> None:
    lite = recording_lite(PicklingStrategy())
    calls.clear()

    assert lite.launch(record_and_return, 4) == 4
    # The receiving side resolves the settings again (silently), then sets up and tears down as usual.
    assert calls == [*SETUP, "function(value=4, times=1, device=cpu)", *TEARDOWN]
    assert lite.launch.__self__ is lite and lite._phase == "ended"  # type: ignore[attr-defined]  # the launching copy is done too


def test_the_received_lite_is_a_fresh_copy_on_the_same_settings() -> None:
    lite = recording_lite(PicklingStrategy())
    described = lite.launch(describe_received, lite)
    assert described is not None
    received_is_same, in_child, strategy_name = described
    assert not received_is_same and in_child and strategy_name == "single_device"


def test_a_pickled_subclass_run_finds_the_original_run_again() -> None:
    lite = recording_lite(PicklingStrategy(), cls=LoudDoubler)
    assert lite.run(2) == 5
    assert "LoudDoubler.run" in calls and "Doubler.run(2) on cpu" in calls


def test_a_pickled_launch_seeds_the_receiving_process_from_the_global_seed() -> None:
    lite = recording_lite(PicklingStrategy())
    core.seed_everything(1234, verbose=False)
    expected = torch.rand(3)
    torch.manual_seed(999)  # the launching process moved on; the received Lite must start from the seed again
    drawn = lite.launch(draw_three)
    assert_type(drawn, torch.Tensor)  # make typecheck: launch returns the function's type, not T | None
    assert torch.equal(drawn, expected)


def describe_received(received: core.Lite, original: core.Lite) -> tuple[bool, bool, str]:
    return received is original, os.environ.get("CORE_TEST_IN_CHILD") == "1", received.active.config.strategy


def draw_three(lite: core.Lite) -> torch.Tensor:
    return torch.rand(3)


def test_launch_without_a_function_connects_this_process_and_the_script_goes_on() -> None:
    lite = recording_lite()
    calls.clear()
    assert lite.launch() is None
    assert calls == SETUP
    assert lite.device == torch.device("cpu")
    module = lite.setup(torch.nn.Linear(2, 2))
    assert isinstance(module, core.lite.LiteModule)
    lite._teardown()  # what the atexit handler does at the end of the script
    assert calls[-4:] == TEARDOWN


def test_launch_without_a_function_is_refused_when_the_strategy_runs_the_ranks_elsewhere() -> None:
    lite = recording_lite(ElsewhereStrategy())
    with pytest.raises(core.CoreError) as error:
        lite.launch()
    assert "ran the processes elsewhere" in str(error.value)
    assert "lite.launch(train)" in str(error.value)


def test_methods_before_launch_say_what_to_call_first_when_processes_must_be_started() -> None:
    pytest.importorskip("core_ddp", reason="a strategy that starts processes: plugins/core-ddp")
    lite = core.Lite(accelerator="cpu", strategy="ddp", devices=2)
    for call in (
        lambda: lite.setup(torch.nn.Linear(1, 1)),
        lambda: lite.backward(torch.ones(1, requires_grad=True).sum()),
        lambda: lite.all_reduce(torch.ones(1)),
        lambda: lite.barrier(),
        lambda: lite.save("x.ckpt", {}),
        lambda: lite.device,
    ):
        with pytest.raises(core.CoreError) as error:
            call()
        message = str(error.value)
        assert "needs a launched run: strategy 'ddp' starts 2 processes, which only launch() can do" in message
        assert "lite.launch(train)" in message and "override run()" in message


def test_one_process_needs_no_launch_as_in_fabric(tmp_path: Path) -> None:
    lite = core.Lite(accelerator="cpu", devices=1)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    expected = copy.deepcopy(model)
    module, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))  # no launch() before
    assert lite.device == torch.device("cpu") and lite.world_size == 1
    inputs = torch.ones(4, 2)
    loss = module(inputs).sum()
    lite.backward(loss)
    optimizer.step()
    reference = torch.optim.SGD(expected.parameters(), lr=0.1)
    expected(inputs).sum().backward()
    reference.step()
    torch.testing.assert_close(model.weight, expected.weight)
    lite.save(tmp_path / "one.ckpt", {"model": module})
    assert (tmp_path / "one.ckpt").exists()
    with pytest.raises(core.CoreError, match="a Lite runs once"):  # the implicit launch was this Lite's run
        lite.launch(record_and_return, 1)


def test_methods_after_the_run_ended_say_so() -> None:
    lite = core.Lite(accelerator="cpu", devices=1)
    lite.launch(record_and_return, 1)
    with pytest.raises(core.CoreError, match=r"Lite.setup\(\) was called after the run ended"):
        lite.setup(torch.nn.Linear(1, 1))
    with pytest.raises(core.CoreError, match="a Lite runs once"):
        lite.launch(record_and_return, 1)


def test_calling_run_of_the_base_class_explains_the_two_styles() -> None:
    with pytest.raises(core.CoreError, match=r"subclass Lite and override run\(self, ...\), or call lite.launch"):
        core.Lite(accelerator="cpu", devices=1).run()


def test_launch_refuses_a_non_callable() -> None:
    with pytest.raises(core.ConfigurationError, match=r"launch\(\) takes a function .* got 42"):
        core.Lite(accelerator="cpu", devices=1).launch(42)  # type: ignore[call-overload]


def test_rank_properties_are_known_before_launch_and_print_is_rank_zero_only(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lite = core.Lite(accelerator="cpu", devices=1)
    ranks = (lite.world_size, lite.global_rank, lite.local_rank, lite.node_rank, lite.is_global_zero)
    assert ranks == (1, 0, 0, 0, True)
    lite.print("from rank zero")
    assert capsys.readouterr().out == "from rank zero\n"

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    other = core.Lite(accelerator="cpu", devices=2, strategy=MultiProcessStrategy())
    assert (other.world_size, other.global_rank, other.local_rank, other.is_global_zero) == (2, 1, 1, False)
    other.print("from rank one")
    assert capsys.readouterr().out == ""


class MultiProcessStrategy(RecordingStrategy):
    name = "multi_test"
    max_processes = None


def test_deprecated_gpus_maps_to_cuda_devices_with_a_warning() -> None:
    deprecated = pytest.warns(core.CoreDeprecationWarning, match=r"gpus=2 is deprecated; pass accelerator='cuda'")
    with deprecated, pytest.raises(core.CoreError) as error:
        core.Lite(gpus=2)
    # Resolution then asks for the CUDA accelerator, which cannot run on this machine.
    assert "cuda" in str(error.value).lower()


def test_deprecated_tpu_cores_maps_to_tpu_devices_with_a_warning() -> None:
    deprecated = pytest.warns(core.CoreDeprecationWarning, match=r"tpu_cores=8 is deprecated; pass accelerator='tpu'")
    with deprecated, pytest.raises(core.CoreError) as error:
        core.Lite(tpu_cores=8)
    assert "tpu" in str(error.value).lower()


def test_deprecated_shorthands_conflicting_with_the_new_arguments_are_errors() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation warning before the error
        with pytest.raises(core.ConfigurationError, match=r"gpus=2 and devices=3 both choose the devices"):
            core.Lite(gpus=2, devices=3)
        with pytest.raises(core.ConfigurationError, match=r"gpus=1 implies accelerator='cuda', but accelerator='cpu'"):
            core.Lite(accelerator="cpu", gpus=1)
        with pytest.raises(core.ConfigurationError, match="at most one of gpus= and tpu_cores="):
            core.Lite(gpus=1, tpu_cores=8)


class FailingSetupStrategy(RecordingStrategy):
    @hookimpl
    def strategy_setup_environment(self) -> None:
        calls.append("strategy_setup_environment")
        raise TimeoutError("the other ranks never joined")


def test_a_failing_process_group_setup_is_still_torn_down() -> None:
    lite = recording_lite(FailingSetupStrategy())
    calls.clear()
    with pytest.raises(TimeoutError, match="the other ranks never joined"):
        lite.launch(record_and_return, 1)
    assert calls == [*SETUP, *TEARDOWN]  # the function never ran
