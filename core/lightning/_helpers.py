"""The small Lightning helpers that programs import from submodules, over core's objects.

``is_overridden`` (``lightning.pytorch.utilities.model_helpers``), ``_unwrap_objects`` and ``is_wrapped``
(``lightning.fabric.wrappers``), ``cli_lightning_logo`` (``lightning.pytorch``) and the ``_X_AVAILABLE`` flags
that examples test before importing an optional package. Nothing here imports torch at import time.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from typing import Any, Final

from core.lightning._names import UnsupportedLightningName


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _at_least(distribution: str, minimum: str) -> bool:
    """Whether ``distribution`` is installed at version ``minimum`` or later."""
    import importlib.metadata

    from packaging.version import InvalidVersion, Version

    try:
        return Version(importlib.metadata.version(distribution)) >= Version(minimum)
    except (importlib.metadata.PackageNotFoundError, InvalidVersion):
        return False


_TORCHVISION_AVAILABLE: Final = _installed("torchvision")
_TENSORBOARD_AVAILABLE: Final = _installed("tensorboard")
_TENSORBOARDX_AVAILABLE: Final = _installed("tensorboardX")
_WANDB_AVAILABLE: Final = _installed("wandb")
_MLFLOW_AVAILABLE: Final = _installed("mlflow")
_JSONARGPARSE_SIGNATURES_AVAILABLE: Final = _installed("jsonargparse") and _installed("docstring_parser")
_RICH_AVAILABLE: Final = _installed("rich")
_TORCHMETRICS_GREATER_EQUAL_0_11: Final = _at_least("torchmetrics", "0.11.0")
"""Whether torchmetrics has its ``task=`` API (``Accuracy(task="multiclass", num_classes=2)``)."""
_OMEGACONF_AVAILABLE: Final = _installed("omegaconf")
_COMET_AVAILABLE: Final = False
"""False whether or not comet_ml is installed: core has no CometLogger, so a program should take its other branch."""
_LITLOGGER_AVAILABLE: Final = False
"""False: core has no LitLogger."""

LIGHTNING_LOGO: Final = r"""
        /\
       /  \      core (Lightning's names)
      / /\ \
      \ \/ /
       \  /
        \/
"""


def cli_lightning_logo() -> None:
    """Print the logo, as Lightning's examples do at the top of ``if __name__ == "__main__"``."""
    print(LIGHTNING_LOGO)


def is_overridden(method_name: str, instance: object | None = None, parent: type | None = None) -> bool:
    """Whether ``instance``'s class overrides ``method_name`` of ``parent`` (Lightning's ``model_helpers``).

    Without ``parent``, it is core's Module, DataModule or Callback, whichever ``instance`` is. A method the
    parent does not have counts as not overridden, as in Lightning.
    """
    if instance is None:
        return False
    if parent is None:
        from core.callbacks import Callback
        from core.module import DataModule, Module

        parent = next((base for base in (Module, DataModule, Callback) if isinstance(instance, base)), None)
        if parent is None:
            raise UnsupportedLightningName(
                f"is_overridden({method_name!r}, {type(instance).__name__}) needs parent=: the instance is not a "
                "LightningModule, LightningDataModule or Callback (core.Module, core.DataModule, core.Callback)."
            )
    instance_attr = _unwrapped(getattr(instance, method_name, None))
    parent_attr = _unwrapped(getattr(parent, method_name, None))
    if instance_attr is None or parent_attr is None:
        return False
    instance_code = getattr(getattr(instance_attr, "__func__", instance_attr), "__code__", None)
    parent_code = getattr(parent_attr, "__code__", None)
    return instance_code is not None and instance_code is not parent_code


def _unwrapped(attr: Any) -> Any:
    """The function behind ``attr``: through ``functools.wraps`` (``__wrapped__``), ``Mock(wraps=...)`` and
    ``functools.partial``, as lightning_utilities' ``is_overridden`` looks through them."""
    if attr is None:
        return None
    if hasattr(attr, "__wrapped__"):
        attr = attr.__wrapped__
    mock = sys.modules.get("unittest.mock")  # not imported: no object can be a Mock
    if mock is not None and isinstance(attr, mock.Mock):
        return attr._mock_wraps
    if isinstance(attr, functools.partial):
        return attr.func
    return attr


def is_wrapped(obj: object) -> bool:
    """Whether ``obj`` is a module, optimizer or data loader that ``Lite.setup*`` returned (Fabric's name)."""
    from core.lite import LiteDataLoader, LiteModule, LiteOptimizer

    return isinstance(obj, (LiteModule, LiteOptimizer, LiteDataLoader))


def _unwrap_one(obj: Any) -> Any:
    from core.lite import LiteDataLoader, LiteModule, LiteOptimizer

    if isinstance(obj, LiteModule):
        return obj.__dict__["_strategy_module"]
    if isinstance(obj, LiteOptimizer):
        return obj.optimizer
    if isinstance(obj, LiteDataLoader):
        return obj._loader
    return obj


def _unwrap_objects(collection: Any) -> Any:
    """``collection`` with every object ``Lite.setup*`` returned replaced by what it wraps (nested too).

    Modules come back as the strategy set them up (wrapped by DDP or FSDP where it wraps them), optimizers and
    data loaders as the user made them, as ``lightning.fabric.wrappers._unwrap_objects`` does.
    """
    if isinstance(collection, dict):
        return {key: _unwrap_objects(value) for key, value in collection.items()}
    if isinstance(collection, (list, tuple)) and not hasattr(collection, "_fields"):
        return type(collection)(_unwrap_objects(value) for value in collection)
    return _unwrap_one(collection)


def get_torchvision_model(model_name: str, **kwargs: Any) -> Any:
    """``torchvision.models.get_model(model_name, **kwargs)``; needs torchvision (pip install torchvision)."""
    if not _TORCHVISION_AVAILABLE:
        raise UnsupportedLightningName(
            f"get_torchvision_model({model_name!r}) needs torchvision, which is not installed: pip install torchvision"
        )
    models = importlib.import_module("torchvision.models")
    return models.get_model(model_name, **kwargs)


def grad_norm(module: Any, norm_type: float | int | str, group_separator: str = "/") -> dict[str, Any]:
    """The norm of each parameter's gradient and of them all (``lightning.pytorch.utilities.grad_norm``).

    Keys are ``grad_{norm_type}_norm{group_separator}{parameter name}`` and ``grad_{norm_type}_norm_total``,
    as in Lightning; parameters without a gradient are left out.
    """
    import torch

    norm_type = float(norm_type)
    if norm_type <= 0:
        raise UnsupportedLightningName(f"grad_norm(norm_type={norm_type}) needs a positive norm type (2.0, 'inf').")
    norms = {
        f"grad_{norm_type}_norm{group_separator}{name}": p.grad.data.norm(norm_type)
        for name, p in module.named_parameters()
        if p.grad is not None
    }
    if norms:
        norms[f"grad_{norm_type}_norm_total"] = torch.tensor(list(norms.values())).norm(norm_type)
    return norms
