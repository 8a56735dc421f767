"""``save_hyperparameters`` and ``hparams``, shared by :class:`core.Module` and :class:`core.DataModule`."""

from __future__ import annotations

import argparse
import ast
import csv
import inspect
import json
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from core._errors import ConfigurationError, CoreError, CoreWarning

__all__ = ["AttributeDict"]


class AttributeDict(dict[str, Any]):
    """A dict whose keys read as attributes too: ``module.hparams.lr``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute {name!r}: no hyperparameter {name!r}; saved: "
                f"{sorted(self)}."
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        del self[name]  # a KeyError for a name it does not hold, as Lightning's


def _hyperparameters_from_caller(frame: Any, ignore: Iterable[str]) -> dict[str, Any]:
    """The arguments of the ``__init__`` that called ``save_hyperparameters``, with their current values."""
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    values = {name: frame.f_locals[name] for name in names[1:] if name in frame.f_locals}  # drop self
    if code.co_flags & inspect.CO_VARKEYWORDS:
        has_varargs = bool(code.co_flags & inspect.CO_VARARGS)
        keywords_name = code.co_varnames[code.co_argcount + code.co_kwonlyargcount + has_varargs]
        values.update(frame.f_locals.get(keywords_name, {}))
    skipped = set(ignore)
    return {name: value for name, value in values.items() if name not in skipped and not name.startswith("__")}


class _HyperparametersMixin:
    """``save_hyperparameters`` and ``hparams``, shared by :class:`Module` and :class:`DataModule`."""

    def save_hyperparameters(
        self, *args: Any, ignore: Sequence[str] | str | None = None, logger: bool = True
    ) -> None:
        """Record the constructor's arguments (or the names / mapping given) as ``self.hparams``.

        :param args: Names of ``__init__`` arguments to keep, or one dict / ``argparse.Namespace``; none
            means every argument.
        :param ignore: Argument names to leave out (modules, datasets).
        :param logger: Send them to the loggers when a run starts.

        The Trainer writes them to every logger (``hparams.json``) and into checkpoints (values other than
        numbers, strings, booleans, ``None`` and lists / dicts of those are stored as their ``repr``).
        """
        ignored = [ignore] if isinstance(ignore, str) else list(ignore or ())
        if len(args) == 1 and isinstance(args[0], (Mapping, argparse.Namespace)):
            given = vars(args[0]) if isinstance(args[0], argparse.Namespace) else dict(args[0])
            chosen = {name: value for name, value in given.items() if name not in ignored}
        else:
            frame = inspect.currentframe()
            caller = frame.f_back if frame is not None else None
            if caller is None:
                raise CoreError("save_hyperparameters() could not find the __init__ that called it.")
            try:
                found = _hyperparameters_from_caller(caller, ignored)
            finally:
                del frame, caller
            names = [name for name in args if isinstance(name, str)]
            unknown = sorted(set(names) - set(found))
            if unknown:
                raise ConfigurationError(
                    f"save_hyperparameters({', '.join(map(repr, names))}): {unknown} are not arguments of the "
                    f"__init__ that called it; its arguments are {sorted(found)}."
                )
            chosen = {name: found[name] for name in names} if names else found
        self.__dict__["_hparams"] = AttributeDict(chosen)
        self.__dict__["_log_hyperparams"] = logger

    @property
    def hparams(self) -> AttributeDict:
        """What :meth:`save_hyperparameters` recorded (empty until it is called)."""
        hparams: AttributeDict | None = self.__dict__.get("_hparams")
        if hparams is None:
            hparams = self.__dict__["_hparams"] = AttributeDict()
        return hparams

    @property
    def hparams_for_loggers(self) -> AttributeDict:
        """:attr:`hparams` when :attr:`logs_hparams`, else nothing: what a run sends to the loggers."""
        return self.hparams if self.logs_hparams else AttributeDict()

    @property
    def logs_hparams(self) -> bool:
        """Whether a run hands this object's hyperparameters to its loggers (Lightning's ``_log_hyperparams``): True
        after ``save_hyperparameters()`` (also with nothing to save), False after ``save_hyperparameters(logger=False)``
        and without any call."""
        return bool(self.__dict__.get("_log_hyperparams", False))


def read_hparams_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The hyperparameters in a logger's file: ``.yaml`` / ``.yml`` (needs pyyaml), ``.json``, or ``.csv`` of
    ``key,value`` rows whose values read as Python literals (Lightning's tags file)."""
    where = os.fspath(path)
    extension = os.path.splitext(where)[1].lower()
    if extension not in (".yaml", ".yml", ".json", ".csv"):
        raise ConfigurationError(
            f"hparams_file={where!r}: expected a .yaml, .yml, .json or .csv file (what the loggers write)."
        )
    if not os.path.isfile(where):  # Lightning's rule: a warning, and the checkpoint's own hyperparameters
        warnings.warn(
            f"hparams_file={where!r} does not exist: the checkpoint's own hyperparameters are used. Pass the hparams "
            f"file a logger wrote (its log_dir).", CoreWarning, stacklevel=3,
        )
        return {}
    with open(where, newline="") as file:
        if extension == ".json":
            loaded = json.load(file)
        elif extension == ".csv":
            loaded = {row[0]: _literal(row[1]) for row in list(csv.reader(file))[1:] if len(row) == 2}
        else:
            try:
                import yaml
            except ImportError as error:
                raise ConfigurationError(
                    f"hparams_file={where!r} is YAML, which needs pyyaml: pip install pyyaml."
                ) from error
            loaded = yaml.safe_load(file)
    if not isinstance(loaded, Mapping):
        raise ConfigurationError(f"hparams_file={where!r} holds {type(loaded).__name__}; expected a mapping of names.")
    return dict(loaded)


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
