"""``core.cli``: a command line for a Module and a DataModule, from their signatures, built on jsonargparse.

``CoreCLI(MyModel, MyData)`` in a script gives it the subcommands ``fit``, ``validate``, ``test`` and
``predict``, each taking ``--config file.yaml`` (any number, later ones win), ``--print_config`` (prints the
whole resolved configuration as YAML and exits), ``--trainer.*`` (every Trainer argument), ``--model.*`` and
``--data.*`` (the classes' ``__init__`` arguments, or ``--model CLASS_PATH`` in subclass mode), ``--optimizer``
and ``--lr_scheduler`` (any ``torch.optim`` class by name or class path, used when the model does not define
``configure_optimizers``), ``--seed_everything`` and the subcommand's own arguments (``--ckpt_path``). The
resolved configuration is written as ``config.yaml`` into the run's log directory by :class:`SaveConfigCallback`,
so ``fit --config that/config.yaml`` repeats the run. It behaves as Lightning's ``LightningCLI``, which
``core.lightning.pytorch.cli`` offers under Lightning's names; it needs ``pip install 'core[cli]'``.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from functools import partial, update_wrapper
from types import MethodType
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from core._errors import CoreError, CoreWarning
from core.callbacks import Callback
from core.loggers import Logger
from core.module import DataModule, Module
from core.profilers import Profiler
from core.trainer import Trainer

try:
    from jsonargparse import ActionConfigFile, ArgumentParser, Namespace
except ImportError as _error:  # pragma: no cover - exercised only without the extra
    raise CoreError(
        f"core.cli needs jsonargparse, which is not installed ({_error}): pip install 'core[cli]' "
        "(or pip install 'jsonargparse[signatures]')"
    ) from _error

__all__ = [
    "ArgsType",
    "CoreArgumentParser",
    "CoreCLI",
    "LRSchedulerCallable",
    "LRSchedulerTypeTuple",
    "LRSchedulerTypeUnion",
    "OptimizerCallable",
    "SaveConfigCallback",
    "instantiate_class",
    "instantiate_module",
]

ArgsType = list[str] | dict[str, Any] | Namespace | None
"""What ``args=`` accepts: command-line words, a config dict, a Namespace, or None for ``sys.argv[1:]``."""
OptimizerCallable = Callable[[Iterable[Any]], Optimizer]
LRSchedulerCallable = Callable[[Optimizer], LRScheduler | ReduceLROnPlateau]
LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeUnion = LRScheduler | ReduceLROnPlateau
LRSchedulerType = type[LRScheduler] | type[ReduceLROnPlateau]

SUBCOMMANDS: dict[str, str] = {
    "fit": "Runs the full optimization routine.",
    "validate": "Performs one evaluation epoch over the validation set.",
    "test": "Performs one evaluation epoch over the test set.",
    "predict": "Runs inference over the prediction data.",
}
"""Each subcommand and its help line; each is the Trainer method of the same name."""

_METHOD_SKIP: dict[str, set[str | int]] = {
    "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
    "validate": {"model", "dataloaders", "datamodule"},
    "test": {"model", "dataloaders", "datamodule"},
    "predict": {"model", "dataloaders", "datamodule"},
}
_CLI_KEYS = ("config", "print_config", "trainer", "model", "data", "optimizer", "lr_scheduler", "seed_everything")


def _signature_class(trainer_class: Any) -> type:
    """The class whose ``__init__`` names the Trainer's flags: ``trainer_class``, or the first base class whose
    ``__init__`` lists them when a subclass only forwards ``*args, **kwargs`` (core.lightning's Trainer)."""
    if not isinstance(trainer_class, type):
        return Trainer
    for cls in trainer_class.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        kinds = {p.kind for p in list(inspect.signature(init).parameters.values())[1:]}
        if kinds - {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
            return cls
    return trainer_class


def instantiate_class(args: Any, init: dict[str, Any]) -> Any:
    """``init["class_path"](*args, **init["init_args"])``: ``args`` is one positional argument or a tuple."""
    positional = args if isinstance(args, tuple) else (args,)
    init = init.as_dict() if isinstance(init, Namespace) else dict(init)
    module_name, _, class_name = init["class_path"].rpartition(".")
    module = __import__(module_name, fromlist=[class_name])
    return getattr(module, class_name)(*positional, **init.get("init_args", {}))


def instantiate_module(class_type: type[Any], config: dict[str, Any]) -> Any:
    """An instance of ``class_type`` (or of the subclass ``config["_class_path"]`` names) from its arguments."""
    parser = ArgumentParser(exit_on_error=False)
    if "_class_path" in config:
        parser.add_subclass_arguments(class_type, "module", fail_untyped=False)
        arguments = {key: value for key, value in config.items() if key != "_class_path"}
        config = {"class_path": config["_class_path"], "dict_kwargs": arguments}
    else:
        parser.add_class_arguments(class_type, "module", fail_untyped=False)
    return parser.instantiate(parser.parse_object({"module": config})).module


class CoreArgumentParser(ArgumentParser):
    """jsonargparse's parser with ``--config``, Lightning's helpers, and errors that suggest the close key."""

    def __init__(self, *args: Any, description: str = "core command line tool", env_prefix: str = "CORE",
                 default_env: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, description=description, env_prefix=env_prefix, default_env=default_env, **kwargs)
        self.add_argument("-c", "--config", action=ActionConfigFile,
                          help="Path to a YAML configuration file; may be given more than once, later ones win.")
        self._optimizers: dict[str, tuple[tuple[type, ...], str | None]] = {}
        self._lr_schedulers: dict[str, tuple[tuple[type, ...], str | None]] = {}
        self.callback_keys: list[str] = []

    def add_lightning_class_args(self, class_type: Any, nested_key: str,
                                 subclass_mode: bool = False, required: bool = True) -> list[str]:
        """The arguments of ``class_type``'s ``__init__`` under ``nested_key``; class paths in subclass mode."""
        if isinstance(class_type, type) and issubclass(class_type, Callback) and not subclass_mode:
            self.callback_keys.append(nested_key)  # added to the Trainer's callbacks
            return self.add_class_arguments(class_type, nested_key, fail_untyped=False, instantiate=True)
        if subclass_mode or isinstance(class_type, tuple):
            self.add_subclass_arguments(class_type, nested_key, fail_untyped=False, required=required)
            return []
        return self.add_class_arguments(class_type, nested_key, fail_untyped=False, instantiate=True,
                                        sub_configs=True)

    def add_optimizer_args(self, optimizer_class: type | tuple[type, ...] = (Optimizer,),
                           nested_key: str = "optimizer", link_to: str = "AUTOMATIC") -> None:
        """``--optimizer``: any optimizer class by name or class path, its ``params`` left out."""
        classes = optimizer_class if isinstance(optimizer_class, tuple) else (optimizer_class,)
        self.add_subclass_arguments(classes, nested_key, fail_untyped=False, instantiate=False,
                                    skip={"params"}, required=False)
        self._optimizers[nested_key] = (classes, link_to)

    def add_lr_scheduler_args(self, lr_scheduler_class: type | tuple[type, ...] = LRSchedulerTypeTuple,
                              nested_key: str = "lr_scheduler", link_to: str = "AUTOMATIC") -> None:
        """``--lr_scheduler``: any scheduler class by name or class path, its ``optimizer`` left out."""
        classes = lr_scheduler_class if isinstance(lr_scheduler_class, tuple) else (lr_scheduler_class,)
        self.add_subclass_arguments(classes, nested_key, fail_untyped=False, instantiate=False,
                                    skip={"optimizer"}, required=False)
        self._lr_schedulers[nested_key] = (classes, link_to)

    def error(self, message: str, ex: Exception | None = None) -> Any:
        """jsonargparse's error, with the close key named when a key is not expected."""
        return super().error(message + _suggestion(self, message), ex)

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        with _torch_names_first():
            return super().parse_args(*args, **kwargs)

    def parse_object(self, *args: Any, **kwargs: Any) -> Any:
        with _torch_names_first():
            return super().parse_object(*args, **kwargs)

    def parse_string(self, *args: Any, **kwargs: Any) -> Any:
        with _torch_names_first():
            return super().parse_string(*args, **kwargs)


_AMBIGUOUS = re.compile(r"Multiple subclasses with name (\S+)\. .*?: (.*)\.$")


@contextlib.contextmanager
def _torch_names_first() -> Iterator[None]:
    """A bare class name that several imported classes share means torch's, when exactly one of them is torch's.

    jsonargparse resolves ``--optimizer Adam`` by searching every imported subclass of ``Optimizer`` by name, so
    importing a package with an optimizer of the same name (``bitsandbytes.optim.Adam``) made ``Adam`` ambiguous
    and the command line an error. ``Adam`` means ``torch.optim.Adam`` as in Lightning's documentation; another
    package's class is still chosen by its class path. Other ambiguities stay jsonargparse's error, which lists the
    class paths. (jsonargparse has no option for this: its resolver is replaced while this parser parses.)
    """
    from jsonargparse import _typehints

    resolve = _typehints.resolve_class_path_by_name

    def torch_first(cls: Any, name: str) -> str:
        try:
            return resolve(cls, name)
        except ValueError as error:
            found = _AMBIGUOUS.match(str(error))
            torch_paths = [] if found is None else [
                path for path in found.group(2).split(", ") if path.startswith("torch.")]
            if len(torch_paths) != 1:
                raise
            return torch_paths[0]

    _typehints.resolve_class_path_by_name = torch_first
    try:
        yield
    finally:
        _typehints.resolve_class_path_by_name = resolve


def _all_keys(parser: ArgumentParser) -> list[str]:
    """Every key ``parser`` and its subcommands' parsers accept (``trainer.max_epochs``, ...)."""
    keys: list[str] = []
    for action in parser._actions:
        if action.dest not in ("help", "config", "print_config", "subcommand"):
            keys.append(action.dest)
        for sub in (getattr(action, "_name_parser_map", None) or {}).values():
            keys += _all_keys(sub)
    return sorted(set(keys))


_UNEXPECTED = re.compile(
    r"option '([^']+)'|Key \"([^\"]+)\" is not expected|unrecognized arguments: (\S+)", re.IGNORECASE
)


def _suggestion(parser: ArgumentParser, message: str) -> str:
    """`` Did you mean 'trainer.max_epochs'?`` for an unexpected key close to an accepted one."""
    names = ["".join(groups).lstrip("-").split("=")[0] for groups in _UNEXPECTED.findall(message)]
    keys = _all_keys(parser)
    hints = []
    for name in names:
        close = difflib.get_close_matches(name, keys, n=2, cutoff=0.6)
        if close:
            hints.append(f"Did you mean {' or '.join(repr(c) for c in close)} for {name!r}?")
    return (". " + " ".join(hints)) if hints else ""


class SaveConfigError(CoreError):
    """SaveConfigCallback found a config file of an earlier run where it would write."""


class SaveConfigCallback(Callback):
    """Writes the resolved configuration to ``trainer.log_dir/config.yaml`` when a run is set up (rank zero).

    :param overwrite: replace an existing file; without it an existing file is an error, so that a second run
        into the same directory does not hide the first one's settings.
    :param multifile: write nested config files separately, as they were given.
    :param save_to_log_dir: write the file at all; ``False`` leaves only :meth:`save_config` (for loggers).
    """

    def __init__(self, parser: ArgumentParser, config: Namespace, config_filename: str = "config.yaml",
                 overwrite: bool = False, multifile: bool = False, save_to_log_dir: bool = True) -> None:
        self.parser = parser
        self.config = config
        self.config_filename = config_filename
        self.overwrite = overwrite
        self.multifile = multifile
        self.save_to_log_dir = save_to_log_dir
        self.already_saved = False

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.already_saved:
            return
        if self.save_to_log_dir:
            log_dir = trainer.log_dir
            if log_dir is None:
                raise SaveConfigError("SaveConfigCallback needs trainer.log_dir, which is None; set default_root_dir.")
            config_path = os.path.join(log_dir, self.config_filename)
            # Rank zero looks and tells the others, so that no rank sees the file rank zero has just written.
            exists = os.path.isfile(config_path) if trainer.is_global_zero else False
            if trainer.world_size > 1:
                exists = trainer.lite.broadcast(exists)
            if not self.overwrite and exists:
                raise SaveConfigError(
                    f"SaveConfigCallback would overwrite {config_path}, the configuration of an earlier run. "
                    "Delete it, give the run another directory or version, pass save_config_callback=None to "
                    "write none, or save_config_kwargs={'overwrite': True} to replace it."
                )
            if trainer.is_global_zero:
                os.makedirs(log_dir, exist_ok=True)
                self.parser.save(self.config, config_path, skip_unset=False, overwrite=self.overwrite,
                                 multifile=self.multifile)
        if trainer.is_global_zero:
            self.save_config(trainer, pl_module, stage)
        self.already_saved = True

    def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Override to send the configuration elsewhere too (a logger's hyperparameters); does nothing here."""


class CoreCLI:
    """A command line for ``model_class`` and ``datamodule_class`` over ``trainer_class`` (module docstring).

    The arguments are Lightning's ``LightningCLI``'s: ``model_class``/``datamodule_class`` (None, or
    ``subclass_mode_*=True``, takes a class path from the command line or config), ``save_config_callback``
    (None writes no config), ``save_config_kwargs`` (``config_filename``, ``overwrite``, ``multifile``),
    ``trainer_defaults`` (defaults for ``--trainer.*``; ``callbacks`` are always added), ``seed_everything_default``
    (True: seed_everything()'s own choice, recorded in the saved config), ``parser_kwargs`` (for every parser,
    or per subcommand),
    ``args`` (None reads ``sys.argv``), ``run`` (False: no subcommands, only build ``self.model``,
    ``self.datamodule`` and ``self.trainer``) and ``auto_configure_optimizers``. Override
    :meth:`add_arguments_to_parser` to add or link arguments, and ``before_fit``/``after_fit`` (and likewise for
    the other subcommands) to act around a run.
    """

    def __init__(
        self,
        model_class: type[Module] | Callable[..., Module] | None = None,
        datamodule_class: type[DataModule] | Callable[..., DataModule] | None = None,
        save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[Trainer] | Callable[..., Trainer] = Trainer,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int = True,
        parser_kwargs: dict[str, Any] | dict[str, dict[str, Any]] | None = None,
        parser_class: type[CoreArgumentParser] = CoreArgumentParser,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: ArgsType = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
    ) -> None:
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = save_config_kwargs or {}
        self.trainer_class = trainer_class
        self.trainer_defaults = trainer_defaults or {}
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = parser_kwargs or {}
        self.parser_class = parser_class
        self.auto_configure_optimizers = auto_configure_optimizers
        self.model_class = model_class
        self._model_class = model_class or Module
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.datamodule_class = datamodule_class
        self._datamodule_class = datamodule_class or DataModule
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data
        self.load_from_checkpoint_support = load_from_checkpoint_support

        main_kwargs, subparser_kwargs = self._split_parser_kwargs(self.parser_kwargs)
        self.setup_parser(run, main_kwargs, subparser_kwargs)
        self.parse_arguments(self.parser, args)

        self.subcommand = self.config["subcommand"] if run else None
        self._set_seed()
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        if self.subcommand is not None:
            self._run_subcommand(self.subcommand)

    # -- parsers ---------------------------------------------------------------------------------------------

    @staticmethod
    def _split_parser_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        per_subcommand = {k: v for k, v in kwargs.items() if k in SUBCOMMANDS}
        return {k: v for k, v in kwargs.items() if k not in SUBCOMMANDS}, per_subcommand

    def init_parser(self, **kwargs: Any) -> CoreArgumentParser:
        """A new parser of ``parser_class``."""
        kwargs.setdefault("dump_header", [f"core.cli: {type(self).__name__}"])
        return self.parser_class(**kwargs)

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict[str, Any],
                     subparser_kwargs: dict[str, Any]) -> None:
        self.parser = self.init_parser(**main_kwargs)
        if add_subcommands:
            self._subcommand_method_arguments: dict[str, list[str]] = {}
            self._add_subcommands(self.parser, **subparser_kwargs)
        else:
            self._add_arguments(self.parser)

    def add_default_arguments_to_parser(self, parser: CoreArgumentParser) -> None:
        """``--seed_everything``: True lets ``seed_everything()`` choose (the seed in ``CORE_GLOBAL_SEED``, else 0, as
        Lightning's does with ``PL_GLOBAL_SEED``) and records it in the config; an int is the seed; False sets none."""
        parser.add_argument("--seed_everything", type=bool | int, default=self.seed_everything_default,
                            help="Seed of every generator: an int, True (CORE_GLOBAL_SEED or 0) or False (none).")

    def add_core_arguments_to_parser(self, parser: CoreArgumentParser) -> None:
        """``--trainer.*``, ``--model.*`` and ``--data.*``."""
        skip: set[str | int] = {"logger", "profiler"}
        parser.add_class_arguments(_signature_class(self.trainer_class), "trainer", fail_untyped=False,
                                   instantiate=False, skip=skip)
        parser.add_argument("--trainer.logger", type=bool | Logger | list[Logger] | None, default=None,
                            help="False for none, or a logger's class path (and --trainer.logger.ARG VALUE).")
        parser.add_argument("--trainer.profiler", type=Profiler | str | None, default=None,
                            help="A profiler alias ('simple', 'advanced', 'pytorch') or class path.")
        defaults = {f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"}
        if defaults:
            parser.set_defaults(defaults)
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        # Without datamodule_class, --data takes any DataModule's class path and may be left out.
        parser.add_lightning_class_args(self._datamodule_class, "data", subclass_mode=self.subclass_mode_data,
                                        required=self.datamodule_class is not None)

    def add_arguments_to_parser(self, parser: CoreArgumentParser) -> None:
        """Override to add arguments (``parser.add_argument``) or link them (``parser.link_arguments``)."""

    def _add_arguments(self, parser: CoreArgumentParser) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers:
            if not any(key == "optimizer" for key in parser._optimizers):
                parser.add_optimizer_args()
            if not any(key == "lr_scheduler" for key in parser._lr_schedulers):
                parser.add_lr_scheduler_args()

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The subcommands and the Trainer-method arguments each leaves to the CLI (model, data)."""
        return {name: {str(s) for s in skip} for name, skip in _METHOD_SKIP.items()}

    def _add_subcommands(self, parser: CoreArgumentParser, **kwargs: Any) -> None:
        self._subcommand_parsers: dict[str, CoreArgumentParser] = {}
        subcommands = parser.add_subcommands(required=True)
        for name, help_text in SUBCOMMANDS.items():
            subparser = self.init_parser(**kwargs.get(name, {}))
            self._add_arguments(subparser)
            added = subparser.add_method_arguments(_signature_class(self.trainer_class), name,
                                                   skip=_METHOD_SKIP[name], fail_untyped=False)
            self._subcommand_method_arguments[name] = added
            self._subcommand_parsers[name] = subparser
            subcommands.add_subcommand(name, subparser, help=help_text)

    def _parser(self, subcommand: str | None) -> CoreArgumentParser:
        return self.parser if subcommand is None else self._subcommand_parsers[subcommand]

    def parse_arguments(self, parser: CoreArgumentParser, args: ArgsType) -> None:
        """``self.config`` from ``args``: command-line words, a dict or Namespace, or ``sys.argv[1:]``."""
        if isinstance(args, (dict, Namespace)):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(args)

    # -- instantiation ---------------------------------------------------------------------------------------

    def _get(self, config: Namespace, key: str, default: Any = None) -> Any:
        if self.subcommand is not None:
            config = config[self.subcommand]
        return config.get(key, default)

    def _set_seed(self) -> None:
        from core.lite import seed_everything

        seed = self._get(self.config, "seed_everything")
        if seed is None or seed is False:
            return
        seed = seed_everything(None if seed is True else int(seed), workers=True, verbose=False)
        key = "seed_everything" if self.subcommand is None else f"{self.subcommand}.seed_everything"
        self.config[key] = seed

    def before_instantiate_classes(self) -> None:
        """Override to change ``self.config`` before the classes are made."""

    def after_instantiate_classes(self) -> None:
        """Override to act on ``self.model``, ``self.datamodule`` and ``self.trainer`` before the run."""

    def instantiate_classes(self) -> None:
        """``self.config_init``, ``self.datamodule``, ``self.model`` and ``self.trainer`` from ``self.config``."""
        self.config_init = self.parser.instantiate(self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        self._add_configure_optimizers_method_to_model(self.subcommand)
        self.trainer = self.instantiate_trainer()

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer from ``--trainer.*``, with ``trainer_defaults["callbacks"]`` and the config-saving one."""
        extra = [self._get(self.config_init, key) for key in self._parser(self.subcommand).callback_keys]
        trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        return self._instantiate_trainer(trainer_config, extra)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> Trainer:
        key = "callbacks"
        given = config.get(key) or []
        config[key] = [given] if isinstance(given, Callback) else list(given)
        config[key].extend(callbacks)
        defaults = self.trainer_defaults.get(key)
        if defaults is not None:
            config[key].extend(defaults if isinstance(defaults, list) else [defaults])
        # As in Lightning: no config file for a fast_dev_run (a check, not a run to repeat); with run=False the
        # whole configuration is saved when the program starts a run itself.
        if self.save_config_callback is not None and not config.get("fast_dev_run", False):
            config_callback = self.save_config_callback(
                self._parser(self.subcommand), self.config.get(str(self.subcommand), self.config),
                **self.save_config_kwargs,
            )
            config[key].append(config_callback)
        for name in ("logger", "profiler"):
            if config.get(name) is None:
                config.pop(name, None)
        return self.trainer_class(**config)

    @staticmethod
    def configure_optimizers(module: Module, optimizer: Optimizer, lr_scheduler: Any = None) -> Any:
        """What the model's ``configure_optimizers`` returns when ``--optimizer`` configures it."""
        if lr_scheduler is None:
            return optimizer
        if isinstance(lr_scheduler, ReduceLROnPlateau):
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": lr_scheduler,
                                                              "monitor": lr_scheduler.monitor}}  # type: ignore[attr-defined]
        return [optimizer], [lr_scheduler]

    def _add_configure_optimizers_method_to_model(self, subcommand: str | None) -> None:
        if not self.auto_configure_optimizers or self.model is None:
            return
        optimizer_init = self._get(self.config_init, "optimizer")
        if not optimizer_init:
            return
        scheduler_init = self._get(self.config_init, "lr_scheduler")
        if type(self.model).configure_optimizers is not Module.configure_optimizers:
            warnings.warn(
                f"{type(self.model).__name__}.configure_optimizers is replaced by the optimizer given with "
                f"--optimizer ({optimizer_init['class_path']}).", CoreWarning, stacklevel=2,
            )
        optimizer = instantiate_class(self.model.parameters(), optimizer_init)
        scheduler = instantiate_class(optimizer, scheduler_init) if scheduler_init else None
        method = partial(self.configure_optimizers, optimizer=optimizer, lr_scheduler=scheduler)
        update_wrapper(method, self.model.configure_optimizers)
        self.model.configure_optimizers = MethodType(method, self.model)

    # -- running ---------------------------------------------------------------------------------------------

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        config = self.config_init[subcommand]
        kwargs = {key: config[key] for key in self._subcommand_method_arguments[subcommand] if key in config}
        kwargs["model"] = self.model
        kwargs["datamodule"] = self.datamodule
        return kwargs

    def _run_subcommand(self, subcommand: str) -> None:
        before = getattr(self, f"before_{subcommand}", None)
        if callable(before):
            before()
        getattr(self.trainer, subcommand)(**self._prepare_subcommand_kwargs(subcommand))
        after = getattr(self, f"after_{subcommand}", None)
        if callable(after):
            after()

