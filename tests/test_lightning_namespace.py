"""``import core.lightning as L``: Lightning's names over core's, lazily, with clear errors for the rest."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import core
import core.lightning as L
from core.lightning import _tables
from core.lightning._names import Target, Unsupported, UnsupportedLightningName, resolve_name


def test_importing_the_namespace_imports_neither_torch_nor_any_plugin() -> None:
    code = (
        "import sys, core.lightning as L, core.lightning.pytorch.callbacks, core.lightning.fabric.strategies; "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('core_')))"
    )
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert finished.stdout.strip() == "[]"


def test_the_top_level_names_are_core_classes() -> None:
    assert L.Fabric is core.Lite
    assert L.LightningModule is core.Module
    assert L.LightningDataModule is core.DataModule
    # Lightning's default logger and output layout (lightning_logs/version_N/...) over core's Trainer.
    assert issubclass(L.Trainer, core.Trainer) and L.Trainer is L.pytorch.Trainer
    assert L.Callback is core.Callback
    assert L.seed_everything is L.pytorch.seed_everything  # core.seed_everything with PL_GLOBAL_SEED (Lightning's)
    assert L.pytorch.Trainer is not core.Trainer
    assert L.fabric.Fabric is core.Lite


def test_from_imports_of_submodules_work_as_with_lightning() -> None:
    import core_ddp
    import core_fsdp
    import core_slurm

    from core.lightning.fabric.plugins.environments import SLURMEnvironment
    from core.lightning.fabric.strategies import DDPStrategy, FSDPStrategy
    from core.lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
    from core.lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    assert DDPStrategy is core_ddp.DDPStrategy and FSDPStrategy is core_fsdp.FSDPStrategy
    assert SLURMEnvironment is core_slurm.SLURMEnvironment
    assert ModelCheckpoint is core.callbacks.ModelCheckpoint and EarlyStopping is core.callbacks.EarlyStopping
    assert issubclass(CSVLogger, core.loggers.CSVLogger)
    assert issubclass(TensorBoardLogger, core.loggers.TensorBoardLogger)
    assert CSVLogger(save_dir=".").name == "lightning_logs"  # Lightning's default, where core's is "logs"


def test_a_lightning_strategy_object_is_accepted_by_lite_as_in_fabric() -> None:
    strategy = L.fabric.strategies.DDPStrategy(find_unused_parameters=True, process_group_backend="gloo")
    active = core.resolve(accelerator="cpu", strategy=strategy, devices=2)
    assert active.config.strategy == "ddp"
    assert active.strategy is strategy


def test_an_unsupported_lightning_name_says_why_and_what_to_use_instead() -> None:
    with pytest.raises(UnsupportedLightningName) as excinfo:
        L.pytorch.callbacks.ModelPruning  # noqa: B018
    message = str(excinfo.value)
    assert "core.lightning.pytorch.callbacks.ModelPruning is not supported by core" in message
    assert "torch.nn.utils.prune" in message
    assert isinstance(excinfo.value, core.CoreError) and not isinstance(excinfo.value, AttributeError)
    from core.lightning.fabric.strategies import Strategy  # annotation-only use works (tests/test_lightning_tree.py)

    with pytest.raises(UnsupportedLightningName, match="there is no strategy base class"):
        class Mine(Strategy):
            pass


def test_a_misspelt_name_suggests_the_close_ones() -> None:
    with pytest.raises(UnsupportedLightningName, match=r"core.lightning.Fabrik is not a Lightning name .* 'Fabric'"):
        L.Fabrik  # noqa: B018


def test_private_and_dunder_names_stay_attribute_errors_for_tools_that_probe_modules() -> None:
    assert not hasattr(L, "__wrapped__")
    assert not hasattr(L.pytorch.callbacks, "_private")


def test_a_name_from_an_uninstalled_distribution_says_what_to_install() -> None:
    table = {"FancyStrategy": Target("core_fancy_not_installed", "FancyStrategy", "core-fancy")}
    with pytest.raises(UnsupportedLightningName, match=r"provided by core-fancy, which is not installed .*"
                       r"pip install core-fancy"):
        resolve_name("lightning.fabric.strategies", "FancyStrategy", table)


def test_every_table_entry_is_a_target_or_says_what_to_use_instead() -> None:
    tables = [value for name, value in vars(_tables).items() if name.isupper() and isinstance(value, dict)]
    assert len(tables) >= 6
    for table in tables:
        for entry in table.values():
            assert isinstance(entry, (Target, Unsupported))
            if isinstance(entry, Unsupported):
                assert entry.why and entry.instead


def test_rank_zero_only_runs_on_rank_zero_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.lightning.pytorch.utilities import rank_zero_only

    calls: list[Any] = []
    record = rank_zero_only(calls.append)
    monkeypatch.setenv("RANK", "1")
    assert record("on rank 1") is None
    monkeypatch.setenv("RANK", "0")
    record("on rank 0")
    assert calls == ["on rank 0"]


def test_every_target_in_the_tables_resolves_to_an_object() -> None:
    tables = {name: value for name, value in vars(_tables).items() if name.isupper() and isinstance(value, dict)}
    missing = []
    for table_name, table in tables.items():
        for name, entry in table.items():
            if isinstance(entry, Target):
                try:
                    resolve_name(table_name, name, table)
                except UnsupportedLightningName as error:
                    if "not installed" not in str(error):  # an uninstalled plugin is the user's choice
                        missing.append(f"{table_name}.{name}: {error}")
    assert missing == []


def test_the_migration_guide_lists_every_name_of_the_tables() -> None:
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[1] / "docs" / "migrating-from-lightning.md").read_text()
    tables = [value for name, value in vars(_tables).items() if name.isupper() and isinstance(value, dict)]
    for table in tables:
        for name, entry in table.items():
            line = next((row for row in guide.splitlines() if row.startswith(f"| `{name}` |")), None)
            assert line is not None, f"{name} is missing from docs/migrating-from-lightning.md"
            assert ("supported" in line) if isinstance(entry, Target) else ("not supported" in line)
