"""The Module, the callbacks and the loggers see the Trainer through ``core.module.TrainerView``: none of their
modules imports ``core.trainer``, not even under ``TYPE_CHECKING``, so no circle of annotations runs through the
Trainer and the callbacks it imports. The graph is built with type-checking imports included (import-linter's
contracts leave them out)."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import BasePredictionWriter
from core.module import TrainerView

BELOW_THE_TRAINER = ("core.callbacks", "core.loggers", "core.module")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    """Every import of ``core``'s modules, type-checking ones included, but the root package's own: ``core/__init__.py``
    is the public surface, which names every lazily loaded class (the Trainer too) for type checkers and imports
    none of them at run time; it is in no layer, so a chain through it is no circle of the layers."""
    built = grimp.build_graph("core", exclude_type_checking_imports=False, cache_dir=None)
    for imported in built.find_modules_directly_imported_by("core"):
        built.remove_import(importer="core", imported=imported)
    return built


@pytest.mark.parametrize("package", BELOW_THE_TRAINER)
def test_no_module_below_the_trainer_imports_it_even_for_annotations(graph: grimp.ImportGraph, package: str) -> None:
    direct = sorted(
        f"{importer} -> {imported}"
        for importer in graph.find_descendants(package) | {package}
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported == "core.trainer" or imported.startswith("core.trainer.")
    )
    assert direct == []
    # Nor through another package.
    assert not graph.chain_exists(importer=package, imported="core.trainer", as_packages=True)


def test_the_check_sees_type_checking_imports(graph: grimp.ImportGraph) -> None:
    # core.lightning imports the Trainer only under TYPE_CHECKING: a graph without those imports would not see it.
    assert "core.trainer" in graph.find_modules_directly_imported_by("core.lightning")


class Writer(BasePredictionWriter):
    def __init__(self) -> None:
        super().__init__(write_interval="batch_and_epoch")
        self.batch_indices: list[object] = []
        self.epoch_indices: list[object] = []

    def write_on_batch_end(self, trainer: TrainerView, module: core.Module, prediction: object,
                           batch_indices: object, batch: object, batch_idx: int, dataloader_idx: int) -> None:
        self.batch_indices.append(batch_indices)

    def write_on_epoch_end(self, trainer: TrainerView, module: core.Module, predictions: object,
                           batch_indices: object) -> None:
        self.epoch_indices.append(batch_indices)


class Tiny(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.seen_views: list[bool] = []

    def predict_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
        view: TrainerView = self.trainer
        self.seen_views.append(view.step_module is not None and view.state == "predict")
        return self.layer(batch[0])


def test_the_trainer_is_a_trainer_view_and_the_prediction_writer_reads_it(tmp_path: Path) -> None:
    trainer = core.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                           enable_checkpointing=False, default_root_dir=tmp_path, callbacks=[Writer()])
    view: TrainerView = trainer  # mypy checks the Trainer against the protocol here
    loader = DataLoader(TensorDataset(torch.randn(6, 2)), batch_size=4)
    module = Tiny()
    trainer.predict(module, loader)
    writer = trainer.callbacks[0]
    assert isinstance(writer, Writer)
    assert writer.batch_indices == [[0, 1, 2, 3], [4, 5]]
    assert writer.epoch_indices == [[[[0, 1, 2, 3], [4, 5]]]]
    assert module.seen_views == [True, True]
    assert view.step_module is None and view.predictions == trainer.run_state.predictions
