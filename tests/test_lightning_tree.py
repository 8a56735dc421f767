"""Every module path of Lightning 2.6 imports under ``core.lightning``, or refuses with the advice error."""

from __future__ import annotations

import importlib
import subprocess
import sys
from typing import Any

import pytest

import core
import core.lightning  # installs the finder
from core.lightning import _tree_map
from core.lightning._names import Target, UnknownLightningName, Unsupported, UnsupportedLightningName
from core.lightning._tree import LIGHTNING_COMMIT, MODULES


def _import(path: str) -> Any:
    return importlib.import_module(f"core.lightning.{path}")


def test_the_table_records_the_lightning_commit_and_covers_the_tree() -> None:
    assert len(LIGHTNING_COMMIT) == 40 and int(LIGHTNING_COMMIT, 16)
    assert len(MODULES) > 200
    for path in ("pytorch.utilities.model_helpers", "fabric.wrappers", "pytorch.cli", "pytorch.demos",
                 "fabric.strategies.fsdp", "fabric.utilities.types", "pytorch.core", "pytorch.trainer"):
        assert path in MODULES


def test_every_module_of_the_table_imports_or_refuses_with_the_lightning_path_and_advice() -> None:
    imported, refused, missing_distribution = 0, 0, []
    for path in MODULES:
        expected = _tree_map.refusal(path)
        if expected is not None:
            with pytest.raises(UnsupportedLightningName) as excinfo:
                _import(path)
            message = str(excinfo.value)
            assert "lightning." in message and "Instead:" in message, message
            refused += 1
            continue
        module = _import(path)
        imported += 1
        for name, entry in _tree_map.table(path).items():
            if isinstance(entry, Unsupported):
                with pytest.raises(UnsupportedLightningName, match="is not supported by core"):
                    getattr(module, name)
                continue
            try:
                assert getattr(module, name) is not None or name.startswith("_")
            except UnsupportedLightningName as error:  # a plugin distribution this venv lacks is the user's choice
                assert "not installed" in str(error), f"{path}.{name}: {error}"
                missing_distribution.append(f"{path}.{name}")
    assert imported > 100 and refused > 100
    assert missing_distribution == [] or all("xla" in m or "tpu" in m.lower() for m in missing_distribution)


def test_the_names_examples_import_from_submodules_resolve() -> None:
    from core.lightning.fabric.strategies.fsdp import FSDPStrategy  # type: ignore[import-not-found]
    from core.lightning.fabric.wrappers import _unwrap_objects, is_wrapped  # type: ignore[import-not-found]
    from core.lightning.pytorch.callbacks.early_stopping import EarlyStopping  # type: ignore[import-not-found]
    from core.lightning.pytorch.core import LightningModule  # type: ignore[import-not-found]
    from core.lightning.pytorch.trainer.trainer import Trainer  # type: ignore[import-not-found]
    from core.lightning.pytorch.utilities.imports import _TORCHVISION_AVAILABLE  # type: ignore[import-not-found]
    from core.lightning.pytorch.utilities.model_helpers import is_overridden  # type: ignore[import-not-found]

    from core.lightning.pytorch import cli_lightning_logo

    assert LightningModule is core.Module and issubclass(Trainer, core.Trainer)
    assert Trainer is core.lightning.pytorch.Trainer  # Lightning's defaults over core's Trainer, on every path
    assert EarlyStopping is core.callbacks.EarlyStopping
    assert FSDPStrategy.__module__.startswith("core_fsdp")
    assert isinstance(_TORCHVISION_AVAILABLE, bool) and callable(cli_lightning_logo)
    assert _unwrap_objects({"a": [1, 2]}) == {"a": [1, 2]} and not is_wrapped(object())

    class WithStep(core.Module):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return None

    assert is_overridden("training_step", WithStep()) and not is_overridden("validation_step", WithStep())
    assert not is_overridden("on_fit_start", core.callbacks.EarlyStopping(monitor="x"))


def test_unwrap_objects_returns_what_lite_wrapped() -> None:
    import torch
    from core.lightning.fabric.wrappers import _unwrap_objects, is_wrapped

    lite = core.Lite(accelerator="cpu", devices=1)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    wrapped_model, wrapped_optimizer = lite.setup(model, optimizer)
    assert is_wrapped(wrapped_model) and is_wrapped(wrapped_optimizer)
    unwrapped = _unwrap_objects({"model": wrapped_model, "opt": (wrapped_optimizer,)})
    assert unwrapped["model"] is model and unwrapped["opt"][0] is optimizer


def test_a_path_lightning_does_not_have_is_the_advice_error_not_module_not_found() -> None:
    with pytest.raises(UnsupportedLightningName, match=r"'early_stoping' is not a Lightning name or module in "
                       r"lightning.pytorch.callbacks .* Did you mean 'early_stopping'"):
        import core.lightning.pytorch.callbacks.early_stoping  # type: ignore[import-not-found]
    with pytest.raises(UnsupportedLightningName, match=r"lightning.pytorch.loops\) is not supported .* Instead:"):
        import core.lightning.pytorch.loops.fit_loop  # type: ignore[import-not-found]
    with pytest.raises(UnsupportedLightningName, match=r"'loopz' is not a Lightning name or module in "
                       r"lightning.pytorch .* Did you mean 'loops'"):
        import core.lightning.pytorch.loopz.x  # type: ignore[import-not-found]  # noqa: F401


def test_a_misspelt_from_import_keeps_the_advice_while_probing_tools_get_attribute_errors() -> None:
    import core.lightning.pytorch.callbacks as callbacks

    with pytest.raises(UnsupportedLightningName, match=r"'EarlyStoping' is not a Lightning name .*'EarlyStopping'"):
        from core.lightning.pytorch.callbacks import EarlyStoping  # noqa: F401
    with pytest.raises(UnsupportedLightningName, match=r"Fabrik is not a Lightning name .*'Fabric'") as info:
        from core.lightning import Fabrik  # noqa: F401
    assert not isinstance(info.value, (AttributeError, ImportError))
    assert getattr(callbacks, "EarlyStoping", None) is None and not hasattr(core.lightning, "CSVLogger")
    with pytest.raises(UnknownLightningName):
        callbacks.EarlyStoping  # noqa: B018


def test_accelerator_and_strategy_work_as_annotations_and_refuse_subclassing() -> None:
    from core.lightning.fabric.accelerators import Accelerator
    from core.lightning.fabric.strategies import Strategy
    from core.lightning.pytorch.strategies import Strategy as PytorchStrategy

    def configure(accelerator: Accelerator, strategy: Strategy) -> str:
        return f"{accelerator}/{strategy}"

    assert configure.__annotations__ == {"accelerator": "Accelerator", "strategy": "Strategy", "return": "str"}
    assert PytorchStrategy is Strategy
    active = core.resolve(accelerator="cpu", devices=1)
    assert isinstance(active.accelerator, Accelerator) and isinstance(active.strategy, Strategy)
    assert not isinstance(active.strategy, Accelerator)
    with pytest.raises(UnsupportedLightningName, match=r"class MyStrategy\(lightning.fabric.strategies.Strategy\) .*"
                       r"python -m core.plugins new strategy mine"):
        class MyStrategy(Strategy):
            pass
    with pytest.raises(UnsupportedLightningName, match="no accelerator base class"):
        class MyAccelerator(Accelerator):
            pass


def test_the_type_names_programs_annotate_with_hold_for_torch_objects() -> None:
    import torch
    from core.lightning.pytorch.utilities.types import STEP_OUTPUT, OptimizerLRScheduler  # type: ignore[import-not-found]

    optimizer = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    types = core.lightning.fabric.utilities.types  # the attribute path Lightning's build-your-own-trainer example uses
    assert isinstance(optimizer, types.Optimizable) and isinstance(optimizer, types.Steppable)
    assert isinstance(scheduler, types.LRScheduler) and not isinstance(scheduler, types.Optimizable)
    assert STEP_OUTPUT is not None and OptimizerLRScheduler is not None


def test_grad_norm_matches_torch() -> None:
    import torch

    from core.lightning.pytorch.utilities import grad_norm

    model = torch.nn.Linear(3, 2)
    model(torch.ones(4, 3)).sum().backward()
    norms = grad_norm(model, norm_type=2)
    assert model.weight.grad is not None and model.bias.grad is not None
    assert torch.allclose(norms["grad_2.0_norm/weight"], model.weight.grad.norm())
    total = torch.stack([model.weight.grad.norm(), model.bias.grad.norm()]).norm()
    assert torch.allclose(norms["grad_2.0_norm_total"], total)


def test_importing_tree_modules_costs_no_torch() -> None:
    code = (
        "import sys, core.lightning.pytorch.callbacks.early_stopping, core.lightning.pytorch.utilities.imports, "
        "core.lightning.fabric.strategies.fsdp; print('torch' in sys.modules)"
    )
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert finished.stdout.strip() == "False"


def test_every_entry_is_a_target_or_an_unsupported_with_advice() -> None:
    for path in MODULES:
        for entry in _tree_map.table(path).values():
            assert isinstance(entry, (Target, Unsupported))
            if isinstance(entry, Unsupported):
                assert entry.why and entry.instead
