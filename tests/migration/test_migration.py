"""Lightning-style programs run through ``core.lightning`` with one changed import, on 1 and 2 processes.

Each program in programs/ is what a Lightning 2.x user writes. The tests here run it as a script (a real
process, forked from an interpreter that already imported torch: see _fork_server.py; two DDP processes over
gloo where it makes sense, the second started by the launcher as a fresh interpreter) and compare what it
produced with the same computation written in plain PyTorch: bitwise where Lightning promises it (one process,
same order of operations), within a stated tolerance where floating-point sums are reordered across processes.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

PROGRAMS = Path(__file__).parent / "programs"
sys.path.insert(0, str(PROGRAMS))

from _common import classification_data, loader, make_net, regression_data  # noqa: E402

pytestmark = [pytest.mark.slow]

# Averaging gradients over 2 processes sums the same numbers in a different order than one process does:
# the weights agree to float32 rounding, not bitwise.
DDP_ATOL = 1e-5
_LAUNCH_VARIABLES = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                     "CORE_GLOBAL_SEED", "CORE_SEED_WORKERS", "LOCAL_WORLD_SIZE", "GROUP_RANK"}


def program_environment() -> dict[str, str]:
    """This process's environment without launcher variables, one thread per process (as every program gets it)."""
    environment = {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}
    environment["OMP_NUM_THREADS"] = "1"
    return environment


class ForkServer:
    """``_fork_server.py``: each program runs in a fork of one interpreter that imported torch (see its docstring)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        with open(log, "wb") as errors:
            self.process = subprocess.Popen(
                [sys.executable, str(Path(__file__).parent / "_fork_server.py")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=program_environment(), bufsize=0,
            )
        self.buffer = b""
        self.runs = 0

    def _reply(self, deadline: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        descriptor = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if select.select([descriptor], [], [], remaining)[0]:
                chunk = os.read(descriptor, 4096)
                assert chunk, f"the fork server exited ({self.process.wait()}):\n{self.log.read_text()[-3000:]}"
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(self, arguments: list[str], cwd: Path, timeout: float,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``python ARGUMENTS`` in ``cwd`` with the programs' environment (and ``env``), output captured, as
        ``subprocess.run``."""
        assert self.process.stdin is not None
        self.runs += 1  # the output files sit beside the server's log, never in a directory a program looks at
        name = f"{self.runs}-{Path(arguments[0]).stem}"
        stdout, stderr = self.log.with_name(f"{name}.out"), self.log.with_name(f"{name}.err")
        request = {"argv": arguments, "cwd": str(cwd), "env": {**program_environment(), **(env or {})},
                   "stdout": str(stdout), "stderr": str(stderr)}
        deadline = time.monotonic() + timeout
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        pid = self._reply(deadline)["pid"]
        try:
            returncode = self._reply(deadline)["returncode"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._reply(time.monotonic() + 60)
            raise subprocess.TimeoutExpired(arguments, timeout, stdout.read_text(), stderr.read_text()) from None
        output = subprocess.CompletedProcess(arguments, returncode, stdout.read_text(), stderr.read_text())
        stdout.unlink()
        stderr.unlink()
        return output

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_SERVER: list[ForkServer] = []


@pytest.fixture(scope="module", autouse=True)
def fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    server = ForkServer(tmp_path_factory.mktemp("fork-server") / "server.log")
    _SERVER.append(server)
    yield server
    _SERVER.remove(server)
    server.close()


def run(program: str, out: Path, devices: int = 1, *extra: str, timeout: float = 240) -> dict[str, Any]:
    """Run one program as a user would (``python program.py``: a process of its own, forked from an interpreter
    that imported torch, see _fork_server.py) and return what rank 0 wrote."""
    finished = _SERVER[-1].run([str(PROGRAMS / program), str(out), str(devices), *extra], out.parent, timeout)
    assert finished.returncode == 0, f"{program} failed ({finished.returncode}):\n{finished.stdout}\n{finished.stderr}"
    result_file = out / "result.json"
    return json.loads(result_file.read_text()) if result_file.exists() else {}


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "weights.pt", weights_only=True)


def _prefixed(name: str, message: str) -> str:
    return f"{name}: {message}"


def assert_same(found: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], atol: float = 0.0) -> None:
    assert list(found) == list(expected)
    for name, tensor in expected.items():
        if atol == 0.0:
            assert torch.equal(found[name], tensor), f"{name} differs: max {(found[name] - tensor).abs().max()}"
        else:
            torch.testing.assert_close(found[name], tensor, atol=atol, rtol=0, msg=functools.partial(_prefixed, name))


def mse(net: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(net(inputs), targets)


def raw_sgd(epochs: int, batch_size: int, lr: float) -> tuple[torch.nn.Module, list[float]]:
    """The plain PyTorch loop every simple program stands for."""
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        for inputs, targets in loader(regression_data(), batch_size):
            optimizer.zero_grad()
            loss = mse(net, inputs, targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return net, losses


# ------------------------------------------------------------------------------------------------- Fabric


@pytest.mark.parametrize("devices", [1, pytest.param(2, marks=pytest.mark.distributed)])
def test_p01_a_fabric_loop_matches_the_plain_loop(tmp_path: Path, devices: int) -> None:
    result = run("p01_fabric_loop.py", tmp_path / "out", devices)
    net, losses = raw_sgd(epochs=3, batch_size=32, lr=0.05)
    assert result["world_size"] == devices
    if devices == 1:
        assert_same(weights(tmp_path / "out"), net.state_dict())
        assert result["losses"] == losses
    else:  # each rank takes every second sample of the same 32: together, the plain loop's batch
        assert_same(weights(tmp_path / "out"), net.state_dict(), atol=DDP_ATOL)
        assert result["losses"] == pytest.approx(losses, abs=1e-5)


@pytest.mark.parametrize("devices", [1, pytest.param(2, marks=pytest.mark.distributed)])
def test_p02_fabric_save_load_resumes_exactly_and_returns_the_remainder(tmp_path: Path, devices: int) -> None:
    result = run("p02_fabric_checkpoint.py", tmp_path / "out", devices)
    net = make_net()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(3):
        for inputs, targets in loader(regression_data(), 16 * devices):
            optimizer.zero_grad()
            mse(net, inputs, targets).backward()
            optimizer.step()
    assert_same(weights(tmp_path / "out"), net.state_dict(), atol=0.0 if devices == 1 else DDP_ATOL)
    assert result["epoch"] == 2
    assert result["remainder"] == {"note": "mid-run"}
    assert result["load_raw_equal"] is True


def test_p03_fabric_callbacks_and_loggers(tmp_path: Path) -> None:
    result = run("p03_fabric_callbacks_loggers.py", tmp_path / "out")
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    epoch_means = []
    for epoch in range(2):
        total = 0.0
        for inputs, targets in loader(regression_data(), 16):
            optimizer.zero_grad()
            loss = mse(net, inputs, targets)
            loss.backward()
            optimizer.step()
            total += loss.item()
        epoch_means.append([epoch, round(total / 4, 6)])
    assert result["epochs"] == epoch_means
    assert result["batches"] == 8 and result["steps"] == 8
    assert result["logger_is_first"] is True
    rows = read_csv(Path(result["log_dir"]) / "metrics.csv")
    train = [row for row in rows if row.get("train_loss")]
    assert [int(row["step"]) for row in train] == list(range(8))
    assert [float(row["epoch_loss"]) for row in rows if row.get("epoch_loss")] == pytest.approx(
        [mean for _, mean in epoch_means], abs=1e-6
    )


def test_p10_a_compiled_model_checkpoints_without_orig_mod_and_loads_into_the_plain_model(tmp_path: Path) -> None:
    result = run("p10_compiled_checkpoint.py", tmp_path / "out", timeout=400)
    assert result["checkpoint_keys"] == list(make_net().state_dict())
    net, _ = raw_sgd(epochs=1, batch_size=16, lr=0.05)
    # Inductor may fuse the forward and backward differently from eager: agreement to float32 rounding.
    assert_same(weights(tmp_path / "out"), net.state_dict(), atol=1e-5)


# ---------------------------------------------------------------------------------- LightningModule + Trainer


@pytest.mark.parametrize("devices", [1, pytest.param(2, marks=pytest.mark.distributed)])
def test_p04_a_module_fitted_by_the_trainer_matches_the_plain_loop(tmp_path: Path, devices: int) -> None:
    result = run("p04_module_fit.py", tmp_path / "out", devices)
    net, _ = raw_sgd(epochs=3, batch_size=32, lr=0.05)
    assert_same(weights(tmp_path / "out"), net.state_dict(), atol=0.0 if devices == 1 else DDP_ATOL)
    assert result["global_step"] == 6 and result["current_epoch"] == 3
    val_inputs, val_targets = regression_data(samples=32, seed=5).tensors
    with torch.no_grad():
        assert result["val_loss"] == pytest.approx(mse(net, val_inputs, val_targets).item(), abs=1e-6)
    assert result["lr"] == 0.05


def test_p05_checkpointing_early_stopping_and_lr_monitoring(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run("p05_callbacks_loggers.py", out)
    assert result["stopped_epoch"] == 5  # best at epoch 3, then two epochs without improvement
    best = result["best_k_models"]
    assert len(best) == 2 and all(Path(path).exists() for path in best)
    assert result["best_model_score"] == min(best.values())
    assert "epoch=3" in Path(result["best_model_path"]).name
    assert Path(result["last_model_path"]).name == "last.ckpt" and Path(result["last_model_path"]).exists()
    rows = read_csv(Path(result["log_dir"]) / "metrics.csv")
    learning_rates = [float(row["lr-SGD"]) for row in rows if row.get("lr-SGD")]
    assert learning_rates[:3] == pytest.approx([0.05, 0.025, 0.0125])


def test_p06_manual_optimization_with_two_optimizers_matches_the_plain_loop(tmp_path: Path) -> None:
    result = run("p06_gan_manual.py", tmp_path / "out")
    generator, critic = make_net(seed=1), make_net(features=1, hidden=8, seed=2)
    opt_g = torch.optim.SGD(generator.parameters(), lr=0.01)
    opt_c = torch.optim.SGD(critic.parameters(), lr=0.01)
    for _ in range(2):
        for inputs, targets in loader(regression_data(), 16):
            critic_loss = critic(generator(inputs).detach()).mean() - critic(targets).mean()
            opt_c.zero_grad()
            critic_loss.backward()
            opt_c.step()
            for parameter in critic.parameters():
                parameter.requires_grad_(False)
            generator_loss = -critic(generator(inputs)).mean() + mse(generator, inputs, targets)
            opt_g.zero_grad()
            generator_loss.backward()
            opt_g.step()
            for parameter in critic.parameters():
                parameter.requires_grad_(True)
    expected = {f"generator.{k}": v for k, v in generator.state_dict().items()}
    expected.update({f"critic.{k}": v for k, v in critic.state_dict().items()})
    assert_same(weights(tmp_path / "out"), expected)
    assert result["global_step"] == 16  # manual optimization: every optimizer.step() counts, as in Lightning


def test_p07_accumulation_clipping_and_a_step_scheduler_match_the_plain_loop(tmp_path: Path) -> None:
    result = run("p07_accumulate_clip_schedule.py", tmp_path / "out")
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    learning_rates = []
    for _ in range(2):
        for index, (inputs, targets) in enumerate(loader(regression_data(), 8)):
            learning_rates.append(optimizer.param_groups[0]["lr"])
            (mse(net, inputs, targets) / 2).backward()  # Lightning divides by accumulate_grad_batches
            if index % 2 == 1:
                torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
                optimizer.step()
                optimizer.zero_grad()
                scheduler.step()
    assert result["learning_rates"] == pytest.approx(learning_rates, rel=1e-12)
    assert result["global_step"] == 8
    assert_same(weights(tmp_path / "out"), net.state_dict())


@pytest.mark.parametrize("devices", [1, pytest.param(2, marks=pytest.mark.distributed)])
def test_p08_a_prediction_writer_writes_every_batch_and_the_epoch(tmp_path: Path, devices: int) -> None:
    out = tmp_path / "out"
    result = run("p08_predict_writer.py", out, devices)
    net = make_net()
    inputs, _ = regression_data(samples=40).tensors
    with torch.no_grad():
        expected = net(inputs)
    batches_per_rank = 5 if devices == 1 else 3  # 40 samples, batch 8; 20 per rank -> 8, 8, 4
    assert result["returned_batches"] == batches_per_rank
    for rank in range(devices):
        epoch = torch.load(out / f"epoch-{rank}.pt", weights_only=True)
        indices = [index for batch in epoch["batch_indices"][0] for index in batch]  # dataloaders x batches
        predictions = torch.cat(epoch["predictions"])  # one dataloader: a flat list of batch predictions
        assert indices == list(range(rank, 40, devices))
        torch.testing.assert_close(predictions, expected[indices], atol=1e-6, rtol=0)
        for batch in range(batches_per_rank):
            assert (out / f"batch-{rank}-{batch}.pt").exists()


@pytest.mark.distributed
def test_p09_configure_model_under_fsdp_trains_like_ddp(tmp_path: Path) -> None:
    fsdp = run("p09_configure_model_fsdp.py", tmp_path / "fsdp", 2, "fsdp")
    ddp = run("p09_configure_model_fsdp.py", tmp_path / "ddp", 2, "ddp")
    assert fsdp["configure_model_calls"] >= 1 and ddp["configure_model_calls"] >= 1
    assert_same(weights(tmp_path / "fsdp"), weights(tmp_path / "ddp"), atol=DDP_ATOL)


def test_p11_load_from_checkpoint_restores_hyperparameters_and_weights(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run("p11_load_from_checkpoint.py", out)
    result = run("p11_load_from_checkpoint.py", out, 1, "load")
    assert result["hparams"] == {"hidden": 12, "lr": 0.02, "note": "trained"}
    assert result["overridden_note"] == "overridden"
    assert_same(weights(out), torch.load(out / "trained.pt", weights_only=True))


def test_p12_fast_dev_run_runs_one_batch_of_each_stage_and_writes_nothing(tmp_path: Path) -> None:
    result = run("p12_fast_dev_run.py", tmp_path / "out")
    assert result["seen"] == {"train": 1, "val": 1, "test": 1}
    assert result["global_step"] == 1
    assert result["files"] == []  # no checkpoint, no logs


@pytest.mark.parametrize("devices", [1, pytest.param(2, marks=pytest.mark.distributed)])
def test_p13_a_datamodule_drives_fit_validate_and_test(tmp_path: Path, devices: int) -> None:
    result = run("p13_datamodule.py", tmp_path / "out", devices)
    assert result["batch_size"] == 16
    assert result["stages"][:1] == ["fit"] and "validate" in result["stages"] and "test" in result["stages"]
    tested = result["tested"][0]
    assert set(tested) == {"test_loss", "test_acc"}
    full = classification_data(samples=96)
    test_indices = torch.utils.data.random_split(full, [64, 16, 16], generator=torch.Generator().manual_seed(0))[2]
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    net.load_state_dict(weights(tmp_path / "out"))
    inputs = torch.stack([full[i][0] for i in test_indices.indices])
    labels = torch.stack([full[i][1] for i in test_indices.indices])
    with torch.no_grad():
        logits = net(inputs)
    assert tested["test_acc"] == pytest.approx((logits.argmax(1) == labels).float().mean().item(), abs=1e-6)
    assert tested["test_loss"] == pytest.approx(torch.nn.functional.cross_entropy(logits, labels).item(), abs=1e-5)


def test_p14_timer_lambda_accumulation_scheduler_and_summary(tmp_path: Path) -> None:
    result = run("p14_misc_callbacks.py", tmp_path / "out")
    assert result["epochs_ended"] == [0, 1, 2, 3]
    # 4 batches an epoch: one step per batch in epochs 0-1, one per two batches from epoch 2.
    assert result["global_step"] == 4 + 4 + 2 + 2
    assert 0 < result["train_time"] < result["train_time"] + result["remaining"] <= 600
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(4):
        accumulate = 1 if epoch < 2 else 2
        for index, (inputs, targets) in enumerate(loader(regression_data(), 16)):
            (mse(net, inputs, targets) / accumulate).backward()
            if (index + 1) % accumulate == 0:
                optimizer.step()
                optimizer.zero_grad()
    assert_same(weights(tmp_path / "out"), net.state_dict())


def test_p15_overfit_batches_uses_the_same_first_batches_of_each_loader(tmp_path: Path) -> None:
    # Lightning 2.x (trainer/setup.py, data_connector._resolve_overfit_batches): overfit_batches limits both the
    # training and the validation loader, which stay separate; training shuffling is turned off.
    result = run("p15_overfit_and_max_time.py", tmp_path / "out")
    first_values = [inputs[0, 0].item() for inputs, _ in loader(regression_data(), 8)][:2]
    first_val_values = [inputs[0, 0].item() for inputs, _ in loader(regression_data(seed=9), 8)][:2]
    assert result["train_inputs"] == first_values * 2  # 2 batches, 2 epochs
    assert result["val_inputs"] == first_val_values * 2  # the validation loader's own first 2 batches


def test_p15_max_time_stops_at_a_step_boundary_and_still_saves(tmp_path: Path) -> None:
    result = run("p15_overfit_and_max_time.py", tmp_path / "out", 1, "max_time")
    assert result["steps_seen"] == result["global_step"] > 0
    assert result["elapsed"] < 30
    assert Path(result["last"]).exists()
    saved = torch.load(result["last"], weights_only=False)
    assert saved["global_step"] == result["global_step"]


def test_p16_module_hooks_batch_transfer_optimizer_step_clipping_freeze(tmp_path: Path) -> None:
    result = run("p16_module_hooks.py", tmp_path / "out")
    assert result["calls"][:4] == ["before", "transfer", "after", "clip:0.25:value"]
    assert result["frozen"] == {"requires_grad": False, "training": False}
    assert result["unfrozen"] == {"requires_grad": True, "training": True}
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for step, (inputs, targets) in enumerate(loader(regression_data(), 16)):
        optimizer.zero_grad()
        mse(net, (inputs * 2) / 2, targets).backward()
        torch.nn.utils.clip_grad_value_(net.parameters(), 0.25)
        for group in optimizer.param_groups:
            group["lr"] = min(1.0, (step + 1) / 4.0) * 0.1
        optimizer.step()
    assert_same(weights(tmp_path / "out"), net.state_dict())
