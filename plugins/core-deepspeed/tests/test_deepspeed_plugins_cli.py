"""``python -m core.plugins`` lists the DeepSpeed aliases from metadata alone, and ``--check`` says plainly why they
cannot run when deepspeed does not import (a real import failure: a ``deepspeed`` module that raises, first on
the path)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ALIASES = [
    "deepspeed", "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_2_offload", "deepspeed_stage_3",
    "deepspeed_stage_3_offload",
]


def plugins_command(command: Callable[..., Any], cwd: Path, *flags: str, pythonpath: Path | None = None) -> Any:
    extra_env = None if pythonpath is None else {"PYTHONPATH": str(pythonpath)}
    return command([sys.executable, "-m", "core.plugins", *flags], cwd=cwd, timeout=120, extra_env=extra_env)


@pytest.mark.timeout(150)
def test_the_listing_shows_every_alias_without_importing_the_plugin(
    command: Callable[..., Any], tmp_path: Path
) -> None:
    finished = command(
        [sys.executable, "-X", "importtime", "-m", "core.plugins", "--kind", "strategy", "--json"], cwd=tmp_path,
        timeout=120,
    )

    assert finished.returncode == 0, finished.stderr
    rows = {row["alias"]: row for row in json.loads(finished.stdout) if row["distribution"] == "core-deepspeed"}
    assert sorted(rows) == ALIASES
    assert {row["status"] for row in rows.values()} == {"ok"}
    # -X importtime lists every module imported, one per line: "import time: self | cumulative | name".
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in finished.stderr.splitlines() if "|" in line}
    assert "core" in imported
    assert not imported & {"core_deepspeed", "deepspeed", "torch"}


@pytest.mark.timeout(150)
def test_check_reports_why_when_deepspeed_does_not_import(command: Callable[..., Any], tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "deepspeed.py").write_text("raise ImportError('no deepspeed on this machine (test)')\n")

    finished = plugins_command(command, tmp_path, "--check", "--kind", "strategy", "--json", pythonpath=shadow)

    assert finished.returncode == 0, finished.stderr  # unavailable is not broken: the rest keeps working
    rows = {row["alias"]: row for row in json.loads(finished.stdout)["plugins"]}
    for alias in ALIASES:
        assert rows[alias]["check"] == "unavailable", rows[alias]
        assert rows[alias]["check_reason"] == (
            "deepspeed is not importable here (ImportError: no deepspeed on this machine (test)); install it with: "
            "pip install 'deepspeed>=0.19,<0.20' (a dependency of core-deepspeed)"
        )
    assert rows["ddp"]["check"] == "usable"


@pytest.mark.timeout(150)
def test_check_reports_the_strategies_usable_where_deepspeed_imports(
    command: Callable[..., Any], tmp_path: Path
) -> None:
    finished = plugins_command(command, tmp_path, "--check", "--kind", "strategy", "--json")

    assert finished.returncode == 0, finished.stderr
    rows = {row["alias"]: row for row in json.loads(finished.stdout)["plugins"]}  # DeepSpeed's logs stay off stdout
    assert {rows[alias]["check"] for alias in ALIASES} == {"usable"}



# One process of a deepspeed run: the run imports deepspeed when it connects (see core_deepspeed's docstring).
IMPORT_THEN_MLFLOW = """
import sys
from core import Lite
lite = Lite(accelerator="cpu", strategy="deepspeed", devices=1)
lite.launch()
import deepspeed.autotuning.autotuner as autotuner
print("mlflow imported by deepspeed:", "mlflow" in sys.modules, autotuner.has_mlflow)
import mlflow
print("mlflow importable after:", mlflow.__name__)
"""


@pytest.mark.timeout(150)
def test_a_run_imports_deepspeed_without_mlflow_which_stays_importable(
    command: Callable[..., Any], tmp_path: Path
) -> None:
    pytest.importorskip("mlflow", reason="the test extra installs MLflow; without it there is nothing to hide")
    script = tmp_path / "import_deepspeed.py"
    script.write_text(IMPORT_THEN_MLFLOW)
    finished = command([sys.executable, str(script)], cwd=tmp_path, timeout=120)
    assert finished.returncode == 0, finished.stderr[-3000:]
    # deepspeed's autotuner did not import MLflow (and pandas: about 0.4 s of CPU per rank); the script still can.
    assert finished.stdout.splitlines() == [
        "mlflow imported by deepspeed: False False", "mlflow importable after: mlflow",
    ], finished.stdout
