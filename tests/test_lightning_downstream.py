"""What a downstream Fabric program (litgpt) needs beyond the Lightning names, each with Lightning's semantics.

The ``lightning`` alias; the lazy checkpoint loader behind ``lightning.fabric.utilities.load._lazy_load``;
``init_module(empty_init=True)``; ``_materialize_meta_tensors``; ``Throughput`` / ``ThroughputMonitor`` (the expected
values are Lightning 2.6's own tests/tests_fabric/utilities/test_throughput.py); ``get_available_flops`` (CUDA device
names are mocked: this machine has no GPU, so a real device name and ``torch.cuda.get_device_capability`` are not
covered); ``measure_flops``; ``strategy.precision``; ``auto_device_count`` (CUDA's is 0 here: the count on a GPU
machine is not covered); and a single-process Lite built inside a 2-process run.
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
from core.builtin.accelerators import CPUAccelerator
from core.lite import Throughput, ThroughputMonitor, get_available_flops, measure_flops
from core.toolkit.checkpoint import NotYetLoadedTensor, lazy_load, materialize_tensors
from core.toolkit.tensors import EmptyInit, materialize_meta_tensors

ROOT = Path(__file__).resolve().parent


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


# -- the alias -----------------------------------------------------------------------------------------------------


def test_install_alias_makes_the_three_lightning_packages_core_lightning_in_a_fresh_process() -> None:
    done = _python(
        "import sys, core.lightning\n"
        "core.lightning.install_alias(); core.lightning.install_alias()\n"
        "import lightning, lightning.fabric, lightning.pytorch, lightning_fabric, pytorch_lightning\n"
        "from lightning.fabric.utilities.load import _lazy_load\n"
        "from core.toolkit.checkpoint import lazy_load\n"
        "assert lightning is core.lightning and lightning.fabric is core.lightning.fabric\n"
        "assert lightning_fabric is core.lightning.fabric and pytorch_lightning is core.lightning.pytorch\n"
        "assert _lazy_load is lazy_load and lightning.Fabric is core.Lite\n"
        "print(sum(type(f).__name__ == 'LightningAlias' for f in sys.meta_path))\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"  # installed once, however often it is called


def test_the_core_lightning_alias_distribution_answers_import_lightning_without_a_call() -> None:
    done = _python("import lightning, pytorch_lightning, core.lightning\n"
                   "assert lightning is core.lightning and pytorch_lightning is core.lightning.pytorch\n"
                   "import importlib.metadata as m; print(m.version('core-lightning-alias'))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0.1.0"


# -- lazy loading --------------------------------------------------------------------------------------------------


def test_lazy_load_gives_shapes_at_once_and_values_on_use(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 4)
    path = tmp_path / "checkpoint.pth"
    torch.save({"model": model.state_dict(), "scale": torch.nn.Parameter(torch.full((2,), 3.0)), "step": 7}, path)

    loaded = lazy_load(path)
    weight = loaded["model"]["weight"]
    assert isinstance(weight, NotYetLoadedTensor)
    assert (weight.shape, weight.dtype) == (torch.Size([4, 3]), torch.float32)
    assert weight.archiveinfo._mapped is None  # nothing read yet: the file is mapped on the first value
    other = torch.nn.Linear(3, 4)
    other.load_state_dict(loaded["model"])  # copies tensor by tensor, each read on use
    assert weight.archiveinfo._mapped is not None
    assert torch.equal(other.weight, model.weight) and torch.equal(other.bias, model.bias)
    full = materialize_tensors(loaded)
    assert type(full["scale"]) is torch.nn.Parameter and torch.equal(full["scale"], torch.full((2,), 3.0))
    assert full["step"] == 7 and torch.equal(full["model"]["bias"], model.bias)
    assert torch.equal(torch.add(weight, 0), model.weight)  # any torch function reads it (as Lightning)


def test_lazy_load_refuses_what_is_not_a_torch_archive(tmp_path: Path) -> None:
    with pytest.raises(core.CheckpointError, match="no such file"):
        lazy_load(tmp_path / "missing.pth")
    (tmp_path / "text.pth").write_text("not a checkpoint")
    with pytest.raises(core.CheckpointError, match=r"not a torch\.save archive"):
        lazy_load(tmp_path / "text.pth")


# -- empty_init and meta tensors -----------------------------------------------------------------------------------


def _draws_after_init(empty_init: bool | None) -> bool:
    lite = core.Lite(accelerator="cpu", devices=1)
    torch.manual_seed(0)
    with lite.init_module(empty_init=empty_init):
        torch.nn.Linear(8, 8)
    after = torch.rand(3)
    torch.manual_seed(0)
    return not torch.equal(after, torch.rand(3))


def test_init_module_empty_init_skips_initialisation_on_one_device_as_lightning() -> None:
    assert not _draws_after_init(empty_init=True)  # torch.nn.init skipped: no random number drawn
    assert _draws_after_init(empty_init=None)  # Lightning's default on one device initialises
    assert _draws_after_init(empty_init=False)
    with EmptyInit():
        layer = torch.nn.Linear(2, 2)
    with EmptyInit(enabled=False):
        torch.manual_seed(1)
        initialised = torch.nn.Linear(2, 2)
    torch.manual_seed(1)
    assert torch.equal(initialised.weight, torch.nn.Linear(2, 2).weight) and layer.weight.shape == (2, 2)


def test_materialize_meta_tensors_allocates_and_resets_only_meta_modules() -> None:
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU())
    real = torch.nn.Linear(3, 1)
    model.append(real)
    before = real.weight.clone()
    first = model[0]
    assert isinstance(first, torch.nn.Linear)
    materialize_meta_tensors(model, "cpu")
    assert not any(tensor.is_meta for tensor in model.parameters())
    assert first.weight.abs().sum() > 0 and torch.equal(real.weight, before)

    class NoReset(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.empty(2, device="meta"))

    with pytest.raises(core.ConfigurationError, match="NoReset has tensors on the meta device and no reset_param"):
        materialize_meta_tensors(NoReset(), "cpu")


# -- throughput ----------------------------------------------------------------------------------------------------


def test_throughput_matches_lightning() -> None:
    throughput = Throughput()
    throughput.update(time=2.0, batches=1, samples=2)
    assert throughput.compute() == {"time": 2.0, "batches": 1, "samples": 2}
    with pytest.raises(core.ConfigurationError, match="same number of samples"):
        throughput.update(time=2.1, batches=2, samples=3, lengths=4)

    throughput = Throughput(window_size=2)
    throughput.update(time=2, batches=1, samples=2, lengths=4)
    throughput.update(time=2.5, batches=2, samples=4, lengths=8)
    assert throughput.compute() == {"time": 2.5, "batches": 2, "samples": 4, "lengths": 8,
                                    "device/batches_per_sec": 2.0, "device/samples_per_sec": 4.0,
                                    "device/items_per_sec": 8.0}
    with pytest.raises(core.ConfigurationError, match="Expected the value to increase"):
        throughput.update(time=2.5, batches=3, samples=3, lengths=4)

    throughput = Throughput(available_flops=50, window_size=2)
    throughput.update(time=1, batches=1, samples=2, flops=10, lengths=10)
    throughput.update(time=2, batches=2, samples=4, flops=10, lengths=20)
    assert throughput.compute() == {"time": 2, "batches": 2, "samples": 4, "lengths": 20,
                                    "device/batches_per_sec": 1.0, "device/flops_per_sec": 10.0,
                                    "device/items_per_sec": 10.0, "device/mfu": 0.2, "device/samples_per_sec": 2.0}
    with pytest.raises(core.ConfigurationError, match="window_size=1"):
        Throughput(window_size=1)


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int | None]] = []

    def log_dict(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls.append((dict(metrics), step))


def test_throughput_monitor_logs_lightnings_values_through_the_lite(monkeypatch: pytest.MonkeyPatch) -> None:
    lite = core.Lite(accelerator="cpu", devices=1)
    recorder = _Recorder()
    monkeypatch.setattr(lite, "log_dict", recorder.log_dict)
    monkeypatch.setattr("core.lite._throughput.get_available_flops", lambda device, dtype: 100)
    monitor = ThroughputMonitor(lite, window_size=4)
    monitor.world_size = 2  # as Lightning's test: pretend two devices
    lengths = 0
    for iteration in range(1, 6):  # Lightning's mock_train_loop (a lit-gpt style loop)
        lengths += 6
        monitor.update(time=iteration + 0.5, batches=iteration, samples=iteration * 3, lengths=lengths, flops=10)
        monitor.compute_and_log()
    assert [step for _, step in recorder.calls] == [0, 1, 2, 3, 4]
    assert recorder.calls[0][0] == {"time": 1.5, "batches": 1, "samples": 3, "lengths": 6}
    assert recorder.calls[3][0] == {"time": 4.5, "batches": 4, "samples": 12, "lengths": 24,
                                    "device/batches_per_sec": 1.0, "device/samples_per_sec": 3.0,
                                    "batches_per_sec": 2.0, "samples_per_sec": 6.0, "items_per_sec": 12.0,
                                    "device/items_per_sec": 6.0, "flops_per_sec": 20.0,
                                    "device/flops_per_sec": 10.0, "device/mfu": 0.1}


def test_get_available_flops_reads_lightnings_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    cases = {("NVIDIA H100 PCIe", torch.bfloat16): 756e12, ("NVIDIA H100 80GB HBM3", torch.bfloat16): 989.4e12,
             ("NVIDIA H100 NVL", torch.float16): 1978.8e12, ("NVIDIA H200", torch.bfloat16): 2.0e15,
             ("NVIDIA H200 NVL", torch.bfloat16): 1.7e15, ("NVIDIA A100-SXM4-40GB", torch.float32): 19.5e12,
             ("NVIDIA GeForce RTX 4090", torch.bfloat16): 82.6e12, ("Tesla T4", torch.float16): 65e12}
    for (name, dtype), flops in cases.items():
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, name=name: name)
        assert get_available_flops(torch.device("cuda"), dtype) == int(flops), name
    # float32 counts as TF32 on Ampere or later once matmuls may use it, as in Lightning
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-40GB")
        assert get_available_flops(torch.device("cuda"), torch.float32) == int(156e12)
    finally:
        torch.set_float32_matmul_precision(previous)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "CocoNut")
    with pytest.warns(core.CoreWarning, match="FLOPs not found for 'CocoNut'"):
        assert get_available_flops(torch.device("cuda"), torch.bfloat16) is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.warns(core.CoreWarning, match="does not support torch.bfloat16"):
        assert get_available_flops(torch.device("cuda"), torch.bfloat16) is None
    assert get_available_flops(torch.device("cpu"), torch.float32) is None


def test_measure_flops_counts_forward_and_backward_on_the_meta_device() -> None:
    with torch.device("meta"):
        model = torch.nn.Linear(32, 2)
        batch = torch.randn(2, 32)
    forward = measure_flops(model, lambda: model(batch))
    both = measure_flops(model, lambda: model(batch), lambda output: output.sum())
    assert forward == 2 * 2 * 32 * 2 and both == 2 * forward  # backward: the weight's gradient (the input needs none)


# -- strategy.precision, auto_device_count -------------------------------------------------------------------------


def test_strategy_precision_and_auto_device_count() -> None:
    lite = core.Lite(accelerator="cpu", devices=1)
    strategy: Any = lite.strategy
    assert strategy.precision.dtype == torch.float32
    assert strategy.precision is lite.active.precision
    assert lite.accelerator.auto_device_count() == 1 == CPUAccelerator.auto_device_count()  # type: ignore[attr-defined]
    from core_cuda import CUDAAccelerator

    assert CUDAAccelerator.auto_device_count() == torch.cuda.device_count()  # 0 here: no GPU on this machine


# -- a Lite inside a launched run ----------------------------------------------------------------------------------


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_a_single_process_lite_inside_a_two_process_run() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "lite_scripts" / "nested_single_process.py")],
                          capture_output=True, text=True, timeout=170, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = sorted(done.stdout.splitlines())
    assert lines == ["inner world_size=1 rank=0 device=cpu out=(1, 2)", "outer rank=0 world_size=2",
                     "outer rank=1 world_size=2"]


def test_a_single_process_lite_outside_a_run_still_checks_world_size() -> None:
    # A fresh process: Lites of earlier tests that ran implicitly (setup without launch) stay running here.
    done = subprocess.run([sys.executable, "-c", "import core; core.Lite(accelerator='cpu', devices=1)"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "WORLD_SIZE": "2"})
    assert done.returncode != 0 and "WORLD_SIZE=2 is set in the environment" in done.stderr


# -- TensorBoard's hyperparameters ---------------------------------------------------------------------------------


def _events(log_dir: str) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(log_dir)
    events.Reload()
    return events


def test_tensorboard_logs_hyperparameters_with_hp_metric_as_lightning(tmp_path: Path) -> None:
    from core.lightning.fabric.loggers import TensorBoardLogger
    from core.lightning.pytorch.loggers import TensorBoardLogger as TrainerTensorBoardLogger

    logger = TensorBoardLogger(tmp_path)
    logger.log_hyperparams({"lr": 0.1, "model": {"layers": 2, "activation": None}})
    logger.finalize("success")
    events = _events(logger.log_dir)
    assert [(scalar.step, scalar.value) for scalar in events.Scalars("hp_metric")] == [(0, -1.0)]
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(events.summary_metadata)
    assert (Path(logger.log_dir) / "hparams.yaml").read_text().startswith("lr: 0.1")
    session = events.summary_metadata["_hparams_/session_start_info"].plugin_data.content
    assert b"model/layers" in session and b"model/activation" in session  # flattened, None shown as a string

    quiet = TrainerTensorBoardLogger(tmp_path / "quiet", default_hp_metric=False)
    quiet.log_hyperparams({"lr": 0.1})
    quiet.log_hyperparams({"lr": 0.1}, metrics=0.5, step=3)
    quiet.finalize("success")
    assert [(scalar.step, scalar.value) for scalar in _events(quiet.log_dir).Scalars("hp_metric")] == [(3, 0.5)]


def test_seed_everything_prints_seed_set_to_n_as_lightning_under_core_lightning_only() -> None:
    lightning_style = _python("import core.lightning as L; L.seed_everything(42)")
    assert lightning_style.returncode == 0 and lightning_style.stderr == "Seed set to 42\n"
    library = _python("import core; core.seed_everything(42)")  # core alone stays a quiet library
    assert library.returncode == 0 and library.stderr == ""
