"""The harness's replacement for Lightning's ``tests_fabric/conftest.py`` and ``tests_pytorch/conftest.py``.

Lightning's own conftests import its internals (signal connector, launchers, XLA flags), which core does not
have. This one keeps what the tests of public behaviour rely on: the fixtures they request by name and the
clean-up between tests (environment variables, process group, determinism). Fixtures that mock Lightning's
internals (``xla_available``, ``cuda_count_2``, ...) are left out: the tests that use them are on the reviewed
"not applicable" list, or fail visibly.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed

_ALLOWED_LEAKS = {
    "CUBLAS_WORKSPACE_CONFIG", "CUDA_DEVICE_ORDER", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "PL_GLOBAL_SEED", "PL_SEED_WORKERS", "RANK", "CUDA_MODULE_LOADING", "KMP_INIT_AT_FORK",
    "KMP_DUPLICATE_LIB_OK", "CRC32C_SW_MODE", "TRITON_CACHE_DIR", "OMP_NUM_THREADS", "TORCHINDUCTOR_CACHE_DIR",
    "LD_LIBRARY_PATH", "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",
    "CORE_GLOBAL_SEED", "CORE_SEED_WORKERS",  # core's names for PL_GLOBAL_SEED and PL_SEED_WORKERS
}
"""Lightning's conftest allow-list of variables a test may leave set (the rest fails the test, as there)."""


@pytest.fixture(autouse=True)
def restore_env_variables() -> Iterator[None]:
    backup = os.environ.copy()
    yield
    leaked = os.environ.keys() - backup.keys() - _ALLOWED_LEAKS
    os.environ.clear()
    os.environ.update(backup)
    assert not leaked, f"test is leaking environment variable(s): {set(leaked)}"


@pytest.fixture(autouse=True)
def teardown_process_group() -> Iterator[None]:
    yield
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@pytest.fixture(autouse=True)
def reset_deterministic_algorithm() -> Iterator[None]:
    yield
    torch.use_deterministic_algorithms(False)


@pytest.fixture
def reset_cudnn_benchmark() -> Iterator[None]:
    yield
    torch.backends.cudnn.benchmark = False


@pytest.fixture
def cuda_count_0(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CUDA device, through torch's public functions (Lightning patches its own helper)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def mps_count_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.fixture
def caplog(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Lightning's workaround: loggers that do not propagate still reach ``caplog``."""
    root = logging.getLogger()
    root_propagate = root.propagate
    root.propagate = True
    names = [n for n in logging.root.manager.loggerDict if n.startswith(("lightning", "core"))]
    saved = {name: logging.getLogger(name).propagate for name in names}
    for name in names:
        logging.getLogger(name).propagate = True
    yield caplog
    root.propagate = root_propagate
    for name, propagate in saved.items():
        logging.getLogger(name).propagate = propagate


@pytest.fixture
def tmpdir_server(tmp_path: Path) -> Iterator[Any]:
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    with ThreadingHTTPServer(("localhost", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server.server_address
        server.shutdown()


@pytest.fixture
def single_process_pg() -> Iterator[None]:
    from core.toolkit import find_free_port

    saved = os.environ.copy()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(find_free_port()), RANK="0", WORLD_SIZE="1")
    torch.distributed.init_process_group("gloo")
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def datadir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("Datasets")
