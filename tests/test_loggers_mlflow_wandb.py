"""MLFlowLogger against a real ``mlflow server`` on 127.0.0.1 (and the ``file:`` backend), WandbLogger offline with its
run file read back, both writing from global rank 0 only, and neither package imported by ``import core``."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import ModelCheckpoint

mlflow = pytest.importorskip("mlflow")
wandb = pytest.importorskip("wandb")

from core.loggers import MLFlowLogger, WandbLogger  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class Regression(core.Module):
    def __init__(self, lr: float = 0.05, hidden: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = torch.nn.functional.mse_loss(self.net(inputs), targets)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, targets = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(inputs), targets))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def data(samples: int) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(samples, 3, generator=generator),
                                    torch.randn(samples, 1, generator=generator)), batch_size=4)


def fit(logger: object, root: Path, checkpointing: bool = False) -> core.Trainer:
    callbacks: list[Any] = []
    if checkpointing:
        checkpoint = ModelCheckpoint(dirpath=root / "ckpts", monitor="val_loss", save_top_k=1)
        callbacks = [checkpoint]
    trainer = core.Trainer(accelerator="cpu", max_epochs=2, logger=logger, default_root_dir=root,
                           log_every_n_steps=2, enable_progress_bar=False, enable_checkpointing=checkpointing,
                           callbacks=callbacks)
    trainer.fit(Regression(hidden=5), data(20), data(8))  # 5 steps per epoch
    return trainer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("mlflow_server")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    log = open(root / "server.log", "w")  # noqa: SIM115 -- open for the server's whole life, closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not come up: {(root / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(process.pid, 15)  # the server's own process group (its uvicorn worker included), by its PID
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=30)
        log.close()


def test_import_core_does_not_import_mlflow_or_wandb() -> None:
    code = ("import sys, core, core.loggers, core.trainer; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'wandb')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         check=True).stdout
    assert out.strip() == "[]"


def test_mlflow_server_run_holds_params_metrics_status_and_checkpoints(mlflow_server: str, tmp_path: Path) -> None:
    logger = MLFlowLogger(experiment_name="core-test", run_name="regression", tracking_uri=mlflow_server,
                          log_model=True, tags={"team": "core"})
    trainer = fit(logger, tmp_path, checkpointing=True)

    client = mlflow.tracking.MlflowClient(mlflow_server)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "regression" and run.data.tags["team"] == "core"
    assert client.get_experiment(run.info.experiment_id).name == "core-test"
    assert logger.name == run.info.experiment_id and logger.version == run.info.run_id
    assert run.data.params == {"lr": "0.05", "hidden": "5"}

    history = client.get_metric_history(run.info.run_id, "train_loss")
    steps = [metric.step for metric in history]
    assert steps == sorted(steps) and len(steps) >= 4 and set(steps) <= set(range(10))
    assert history[-1].value == pytest.approx(trainer.logged_metrics["train_loss"])
    val = client.get_metric_history(run.info.run_id, "val_loss")
    assert [metric.step for metric in val] == [4, 9]  # the step of each epoch's last batch, as in Lightning

    checkpoint = trainer.checkpoint_callback
    assert checkpoint is not None and checkpoint.best_model_path
    stem = Path(checkpoint.best_model_path).stem
    artifacts = {item.path for item in client.list_artifacts(run.info.run_id, stem)}
    assert artifacts == {f"{stem}/{Path(checkpoint.best_model_path).name}", f"{stem}/metadata.yaml",
                         f"{stem}/aliases.txt"}
    local = client.download_artifacts(run.info.run_id, stem, str(tmp_path / "download"))
    restored = torch.load(Path(local) / Path(checkpoint.best_model_path).name, weights_only=False)
    original = torch.load(checkpoint.best_model_path, weights_only=False)
    assert restored.keys() == original.keys()
    assert (Path(local) / "aliases.txt").read_text() == "['latest', 'best']"
    import yaml

    metadata = yaml.safe_load((Path(local) / "metadata.yaml").read_text())
    assert metadata["original_filename"] == Path(checkpoint.best_model_path).name
    assert metadata["score"] == pytest.approx(checkpoint.best_k_models[checkpoint.best_model_path])
    assert metadata["Checkpoint"]["monitor"] == "val_loss" and metadata["Checkpoint"]["save_top_k"] == 1


def test_mlflow_failed_run_is_marked_failed(mlflow_server: str) -> None:
    logger = MLFlowLogger(experiment_name="core-failed", tracking_uri=mlflow_server)
    logger.log_metrics({"loss": 2.0}, step=1)
    logger.finalize("failed")
    assert mlflow.tracking.MlflowClient(mlflow_server).get_run(logger.run_id).info.status == "FAILED"


def test_mlflow_file_backend_without_a_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    logger = MLFlowLogger(save_dir=str(tmp_path / "mlruns"), prefix="fit")
    assert logger.save_dir == str(tmp_path / "mlruns")
    fit(logger, tmp_path)

    run = mlflow.tracking.MlflowClient(f"file:{tmp_path / 'mlruns'}").get_run(logger.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"lr": "0.05", "hidden": "5"}
    assert set(run.data.metrics) == {"fit-train_loss", "fit-val_loss", "fit-epoch"}
    assert logger.experiment_id is not None and logger.run_id is not None
    assert Path(logger.log_dir) == tmp_path / "mlruns" / logger.experiment_id / logger.run_id
    assert Path(logger.log_dir).is_dir()


def test_mlflow_file_backend_refused_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    logger = MLFlowLogger(save_dir=str(tmp_path / "mlruns"))
    try:
        logger.log_metrics({"loss": 1.0}, step=1)
    except core.CoreError as error:  # mlflow>=3.x refuses the file store by default
        assert "MLFLOW_ALLOW_FILE_STORE=true" in str(error) and "sqlite:///" in str(error)
        assert f"file:{tmp_path / 'mlruns'}" in str(error)
    else:  # an mlflow that still accepts it
        assert (tmp_path / "mlruns").is_dir()


def test_mlflow_hyperparameters_are_flattened_truncated_and_batched(mlflow_server: str) -> None:
    logger = MLFlowLogger(experiment_name="core-params", tracking_uri=mlflow_server)
    params: dict[str, Any] = {f"p{index}": index for index in range(150)}
    params["nested"] = {"inner": {"deep": 1}}
    params["long"] = "x" * 300
    logger.log_hyperparams(params)
    logger.finalize("success")
    stored = mlflow.tracking.MlflowClient(mlflow_server).get_run(logger.run_id).data.params
    assert len(stored) == 152 and stored["nested/inner/deep"] == "1" and stored["long"] == "x" * 250


def test_loggers_do_nothing_off_global_rank_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow_logger = MLFlowLogger(save_dir=str(tmp_path / "mlruns"))
    mlflow_logger.log_hyperparams({"lr": 1.0})
    mlflow_logger.log_metrics({"loss": 1.0}, step=1)
    mlflow_logger.finalize("success")
    assert mlflow_logger.experiment is None and mlflow_logger.version_if_chosen is None

    wandb_logger = WandbLogger(save_dir=str(tmp_path / "wandb"), offline=True)
    wandb_logger.log_hyperparams({"lr": 1.0})
    wandb_logger.log_metrics({"loss": 1.0}, step=1)
    wandb_logger.finalize("success")
    assert wandb_logger.experiment is None and wandb.run is None
    assert wandb_logger.log_dir == str(tmp_path / "wandb")  # Trainer.log_dir on another rank does not fail
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "wandb" / "wandb").exists()


# -- W&B, offline ----------------------------------------------------------------------------------------


def wandb_records(path: Path) -> Iterator[Any]:
    """The protobuf records of a ``.wandb`` run file (a LevelDB-style log of 32 KiB blocks after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, position, pending = 32768, 7, b""
    while position + 7 <= len(data):
        left = block - position % block
        length, kind = int.from_bytes(data[position + 4:position + 6], "little"), data[position + 6]
        if left < 7 or (length == 0 and kind == 0):
            position += left
            continue
        chunk = data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 2):  # full, first
            pending = chunk
        else:  # middle, last
            pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]  # generated protobuf module, no stubs
            record.ParseFromString(pending)
            yield record


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in [name for name in os.environ if name.startswith("WANDB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache"))
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc API key can be found
    connect = socket.socket.connect

    def loopback_only(sock: socket.socket, address: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            assert address[0] in ("127.0.0.1", "::1", "localhost"), f"contacted {address}"
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", loopback_only)
    yield tmp_path
    if wandb.run is not None:
        wandb.finish()
    wandb.teardown()  # stops the wandb-core service, which would otherwise live as long as this pytest process


def test_wandb_offline_run_file_holds_config_and_metric_history(offline_wandb: Path) -> None:
    save_dir = offline_wandb / "runs"
    logger = WandbLogger(save_dir=str(save_dir), offline=True, project="core-test", name="regression")
    trainer = fit(logger, offline_wandb)
    run_id = logger.version
    assert run_id is not None and logger.name == "core-test"
    assert logger.experiment.settings.mode == "offline"
    logger.experiment.finish()  # as in Lightning, the run is ended by the user

    (run_dir,) = (save_dir / "wandb").glob(f"offline-run-*-{run_id}")
    run_file = run_dir / f"run-{run_id}.wandb"
    deadline = time.monotonic() + 120  # wandb-core may still be writing the file when finish() returns
    while not any(record.WhichOneof("record_type") == "exit" for record in wandb_records(run_file)):
        assert time.monotonic() < deadline, "the offline run file never got its exit record"
        time.sleep(0.2)
    config: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "run":
            assert record.run.project == "core-test" and record.run.display_name == "regression"
    assert config["lr"] == 0.05 and config["hidden"] == 5

    train = [(row["trainer/global_step"], row["train_loss"]) for row in history if "train_loss" in row]
    val = [row["trainer/global_step"] for row in history if "val_loss" in row]
    assert [step for step, _ in train] == sorted(step for step, _ in train) and len(train) >= 4
    assert train[-1][1] == pytest.approx(trainer.logged_metrics["train_loss"])
    assert val == [4, 9]


def test_wandb_offline_with_log_model_is_refused(offline_wandb: Path) -> None:
    with pytest.raises(core.CoreError, match=r"log_model=True, offline=True.*offline=False"):
        WandbLogger(save_dir=str(offline_wandb), offline=True, log_model=True)


def test_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name in ("mlflow", "wandb") else find_spec(name, *args))
    with pytest.raises(core.CoreError, match=r"MLFlowLogger needs the mlflow package.*pip install mlflow"):
        MLFlowLogger()
    with pytest.raises(core.CoreError, match=r"WandbLogger needs the wandb package.*pip install wandb"):
        WandbLogger()


@pytest.mark.distributed
@pytest.mark.skipif(importlib.util.find_spec("core_ddp") is None, reason="core-ddp is not installed")
@pytest.mark.timeout(600)
def test_under_ddp_only_global_rank_zero_creates_and_writes_the_run(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items()
                   if key not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"}}
    environment["OMP_NUM_THREADS"] = "1"
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "logger_scripts" / "mlflow_ddp.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=240, env=environment)
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("RUN ")]
    _, run_id, world_size = line.split()
    assert world_size == "2"

    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("ddp")
    runs = client.search_runs([experiment.experiment_id])
    assert [run.info.run_id for run in runs] == [run_id]  # rank 1 created no run of its own
    assert runs[0].info.status == "FINISHED"
    assert [metric.step for metric in client.get_metric_history(run_id, "loss")] == [0, 1]  # 16 samples, 2 ranks
