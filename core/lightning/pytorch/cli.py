"""``lightning.pytorch.cli``: ``LightningCLI`` and its helpers, under Lightning's names, over :mod:`core.cli`.

``LightningCLI`` is :class:`core.cli.CoreCLI` (same arguments, subcommands, ``--config``/``--print_config``,
``config.yaml`` beside the logs), with Lightning's names for the parser and the type aliases. It needs
jsonargparse: ``pip install 'core[cli]'``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from torch.optim.lr_scheduler import ReduceLROnPlateau

from core.cli import (
    ArgsType,
    CoreArgumentParser,
    CoreCLI,
    LRSchedulerCallable,
    LRSchedulerType,
    LRSchedulerTypeTuple,
    LRSchedulerTypeUnion,
    OptimizerCallable,
    SaveConfigCallback,
    instantiate_class,
    instantiate_module,
)
from core.lightning._helpers import _JSONARGPARSE_SIGNATURES_AVAILABLE
from core.lightning._names import namespace_getattr
from core.module import DataModule, Module
from core.trainer import Trainer

__all__ = [
    "_JSONARGPARSE_SIGNATURES_AVAILABLE",
    "ArgsType",
    "LRSchedulerCallable",
    "LRSchedulerType",
    "LRSchedulerTypeTuple",
    "LRSchedulerTypeUnion",
    "LightningArgumentParser",
    "LightningCLI",
    "ModuleType",
    "OptimizerCallable",
    "ReduceLROnPlateau",
    "SaveConfigCallback",
    "instantiate_class",
    "instantiate_module",
]

ModuleType = TypeVar("ModuleType")

# Any other name of Lightning's cli module raises UnsupportedLightningName with the advice (_tree_map.py).
__getattr__ = namespace_getattr(__name__, {})


class LightningArgumentParser(CoreArgumentParser):
    """``lightning.pytorch.cli.LightningArgumentParser``: :class:`core.cli.CoreArgumentParser`, env prefix ``PL``."""

    def __init__(self, *args: Any, description: str = "Lightning Trainer command line tool",
                 env_prefix: str = "PL", default_env: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, description=description, env_prefix=env_prefix, default_env=default_env, **kwargs)


class LightningCLI(CoreCLI):
    """``lightning.pytorch.cli.LightningCLI``: :class:`core.cli.CoreCLI` with Lightning's parser and Trainer.

    The same arguments as Lightning 2.6's; ``trainer_class`` defaults to ``core.lightning.pytorch.Trainer``
    (Lightning's default logger and ``lightning_logs/version_N`` layout), ``parser_class`` to
    :class:`LightningArgumentParser`.
    """

    def __init__(
        self,
        model_class: type[Module] | Callable[..., Module] | None = None,
        datamodule_class: type[DataModule] | Callable[..., DataModule] | None = None,
        save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[Trainer] | Callable[..., Trainer] | None = None,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int = True,
        parser_kwargs: dict[str, Any] | dict[str, dict[str, Any]] | None = None,
        parser_class: type[CoreArgumentParser] = LightningArgumentParser,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: ArgsType = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
    ) -> None:
        if trainer_class is None:
            trainer_class = importlib.import_module("core.lightning.pytorch").Trainer
        super().__init__(
            model_class, datamodule_class, save_config_callback, save_config_kwargs, trainer_class,
            trainer_defaults, seed_everything_default, parser_kwargs, parser_class, subclass_mode_model,
            subclass_mode_data, args, run, auto_configure_optimizers, load_from_checkpoint_support,
        )
