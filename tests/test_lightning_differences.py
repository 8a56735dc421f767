"""The one list of differences from Lightning (docs/migrating-from-lightning.md, "Differences from Lightning") stays
true and stays one: every test it names exists (each shows core's side of its item), the defaults and signatures it
states are checked here, and no other page keeps a list of its own."""

from __future__ import annotations

import inspect
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import core
from core.callbacks import EarlyStopping

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "migrating-from-lightning.md"
TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def differences() -> str:
    return PAGE.read_text().split("\n## Differences from Lightning\n", 1)[1].split("\n## ", 1)[0]


def test_every_test_the_list_names_exists() -> None:
    named = TEST_REFERENCE.findall(differences())
    assert len(named) >= 10, named
    missing = [f"{path}::{name}" for path, name in named
               if not (ROOT / path).exists() or not re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M)]
    assert not missing, f"the list of differences names tests that do not exist: {missing}"


def test_no_other_page_keeps_its_own_list() -> None:
    # A heading may stay (the Trainer's and Lite's pages have one), but its section only links to the list.
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page == PAGE:
            continue
        for section in re.split(r"\n(?=## )", page.read_text()):
            if section.startswith("## Differences from Lightning"):
                assert "migrating-from-lightning.md#" in section, page.name
                assert not re.search(r"^- ", section, re.M), f"{page.name} lists differences of its own"


def test_early_stopping_checks_once_per_epoch_by_default() -> None:
    assert EarlyStopping(monitor="loss").check_on_train_epoch_end is True


@pytest.mark.parametrize("interval", ["00:00:10:00", timedelta(minutes=10)])
def test_a_time_based_val_check_interval_is_refused(interval: Any) -> None:
    with pytest.raises(core.ConfigurationError, match="val_check_interval"):
        core.Trainer(accelerator="cpu", val_check_interval=interval)


def test_lite_setup_takes_no_scheduler_and_load_refuses_pickles_by_default() -> None:
    assert "scheduler" not in inspect.signature(core.Lite.setup).parameters
    assert inspect.signature(core.Lite.load).parameters["weights_only"].default is True
