"""Every flag of ``Trainer(...)``, declared once: name, type, default, check and the line the docs show.

:data:`FLAGS` is the single source; adding a flag is one :class:`Flag` here plus the code that uses it.
``scripts/gen_trainer_flags.py`` (``make flags``) writes from it what must be plain code for users, mypy and IDEs
to read: ``Trainer.__init__``'s parameters, the fields of :class:`~core.trainer.TrainerConfig` (each typed by its
check's return annotation) and the Trainer's read-only views of the loop flags (:class:`FlagView`), each between
``# <generated: ...>`` markers, plus the flag table of docs/trainer-flags.md. ``tests/test_trainer_flag_declaration.py``
fails, naming the command, when what is checked in is not what the script writes.

Each flag belongs to one of three groups, which say where its value goes:

- ``lite``: handed to every run's :class:`core.Lite` as given (``Lite`` resolves and checks them);
- ``trainer``: turned into the Trainer's own objects (loggers, callbacks, profiler) when it is made;
- ``loop``: checked into the frozen :class:`~core.trainer.TrainerConfig` the loops read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, NoReturn, TypeVar, overload

import attrs

from core._checks import is_whole
from core._errors import ConfigurationError
from core.trainer._data import check_limit

if TYPE_CHECKING:
    from typing_extensions import Never, Self  # typing's own from Python 3.11

CLIP_ALGORITHMS: Final = ("norm", "value")

Group = Literal["lite", "trainer", "loop"]
Check = Callable[[Any, str], Any]
"""Checks the value given for the flag named by the second argument; returns it normalised (the record's value)."""


@attrs.frozen
class Flag:
    """One flag of ``Trainer(...)``.

    :param name: The keyword argument.
    :param type: Its annotation in ``Trainer.__init__``, as written there.
    :param default: Its default in ``Trainer.__init__``.
    :param doc: One line for the docs' flag table (Markdown).
    :param group: Where the value goes (see the module's docstring).
    :param check: For a ``loop`` flag, how its value is checked and normalised; ``None``: kept as given.
    :param shown_default: The default as the docs show it, when ``repr(default)`` would mislead.
    :param barebones_conflict: ``barebones=True`` refuses any value of this flag but ``None``, ``False`` and ``0``.
    :param own_property: For a ``loop`` flag, the Trainer defines ``trainer.<name>`` by hand (it can change during
        a run), so no :class:`FlagView` is generated for it.
    """

    name: str
    type: str
    default: Any
    doc: str
    group: Group
    check: Check | None = None
    shown_default: str | None = None
    barebones_conflict: bool = False
    own_property: bool = False

    @property
    def record_type(self) -> str:
        """The type of the flag's field in ``TrainerConfig``: its check's return annotation, as written there."""
        returned = getattr(self.check, "__annotations__", {}).get("return")
        if not isinstance(returned, str):  # every module of the checks uses postponed (string) annotations
            raise TypeError(f"The check of the loop flag {self.name!r} needs a return annotation (the record's type).")
        return returned

    def checked(self, value: object) -> Any:
        """``value`` checked and normalised by this flag's check (as given without one)."""
        return value if self.check is None else self.check(value, self.name)


class ArgumentTypeError(ConfigurationError, TypeError):
    """A flag or an entry point's argument of the wrong type (``gradient_clip_val=(1, 2)``, ``fit(nn.Linear())``):
    a :class:`core.ConfigurationError` that is also Python's ``TypeError``, which Lightning raises there."""


# --- the checks shared by several flags ---------------------------------------------------------------------------

def positive_int(value: object, flag: str, minimum: int = 1) -> int:
    if not is_whole(value, minimum):
        raise ConfigurationError(f"{flag}={value!r}: expected a whole number >= {minimum}.")
    return value


def _count_from_zero(value: object, flag: str) -> int:
    return positive_int(value, flag, minimum=0)


def _optional_count(value: object, flag: str) -> int | None:
    return None if value is None else positive_int(value, flag, minimum=0)


def _at_least(value: object, flag: str) -> int:
    return _optional_count(value, flag) or 0  # None: no minimum


def _limit(value: object, flag: str) -> int | float:
    return check_limit(1.0 if value is None else value, flag)  # None: the whole loader


def _as_bool(value: object, flag: str) -> bool:
    return bool(value)


def _optional_bool(value: object, flag: str) -> bool | None:
    return None if value is None else bool(value)


# --- the checks of one flag each ----------------------------------------------------------------------------------

def _root_dir(value: str | os.PathLike[str] | None, flag: str) -> str:
    if value is None:
        return os.getcwd()
    path = os.fspath(value)
    # a local path starting with ``~`` is the user's home, as in a shell (Lightning's rule); a URL is kept
    return path if "://" in path else os.path.normpath(os.path.expanduser(path))


def _limit_or_unlimited(value: object, flag: str) -> int:
    if is_whole(value, -1):
        return value
    raise ConfigurationError(
        f"`{flag}` must be a non-negative integer or -1 (no limit). You passed in {value!r}: "
        f"Trainer({flag}=...) takes a whole number >= 0, or -1."
    )


def _max_epochs(value: object, flag: str) -> int:
    # None was replaced by 1000 or -1 before the checks, once max_steps is known (core.trainer._config._overridden).
    return _limit_or_unlimited(value, flag)


def _max_steps(value: object, flag: str) -> int:
    return _limit_or_unlimited(-1 if value is None else value, flag)


def _val_check_interval(value: object, flag: str) -> int | float:
    interval = 1.0 if value is None else value
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0 or (
        isinstance(interval, float) and interval > 1.0
    ):
        raise ConfigurationError(
            f"{flag}={value!r}: expected a fraction of the epoch (float in (0, 1]) or "
            f"a number of training batches (int >= 1)."
        )
    return interval


def _check_val_every_n_epoch(value: object, flag: str) -> int | None:
    # None is checked against val_check_interval in TrainerConfig.from_flags.
    if value is None or is_whole(value, 1):
        return value
    raise ConfigurationError(
        f"`{flag}` should be an integer, found {value!r}: validate in every N-th epoch (a whole number >= 1), "
        f"or None to count val_check_interval's batches across epochs."
    )


def _sanity_steps(value: object, flag: str) -> int:
    return -1 if value == -1 else positive_int(value, flag, minimum=0)


def _clip_val(value: object, flag: str) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ArgumentTypeError(f"`{flag}` should be an int or a float. Got {value!r}: a number >= 0, or None.")
    if value is not None and value < 0:
        raise ConfigurationError(f"{flag}={value!r}: expected a number >= 0 or None.")
    return None if not value else float(value)


def _clip_algorithm(value: object, flag: str) -> str:
    chosen = "norm" if value is None else value.lower() if isinstance(value, str) else value
    if chosen not in CLIP_ALGORITHMS:
        raise ConfigurationError(
            f"`{flag}` {value} is invalid. Allowed algorithms: {list(CLIP_ALGORITHMS)} (None: 'norm')."
        )
    return str(chosen)


def _log_every(value: object, flag: str) -> int:
    return 50 if value is None else positive_int(value, flag)


def _fast_dev_run(value: object, flag: str) -> int:
    if isinstance(value, bool):
        return int(value)
    if not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{flag}={value!r}: expected True/False or a number of batches >= 0.")
    return value


_LITE = "as for `Lite`: "

FLAGS: Final[tuple[Flag, ...]] = (
    Flag("accelerator", "object", "auto", _LITE + "an accelerator alias (`cpu`, `cuda`, ...) or plugin object",
         "lite"),
    Flag("strategy", "object", "auto", _LITE + "a strategy alias (`single_device`, `ddp`, ...) or plugin object",
         "lite"),
    Flag("devices", "object", "auto", _LITE + "how many devices (or which indices) per node", "lite"),
    Flag("num_nodes", "int", 1, _LITE + "how many nodes the run spans", "lite"),
    Flag("precision", "object", None, _LITE + "a precision alias (`32-true`, `bf16-mixed`, ...); `None`: `32-true`",
         "lite"),
    Flag("plugins", "object", None, _LITE + "aliases or plugin objects of any kind (an environment, a checkpoint_io, "
         "extensions)", "lite"),
    Flag("logger", "object", None, "`True` (also `None`): a `CSVLogger` in `default_root_dir`; `False`; a logger or "
         "a list", "trainer", barebones_conflict=True),
    Flag("callbacks", "Callback | Sequence[Callback] | None", None, "a callback or a list", "trainer"),
    Flag("default_root_dir", "str | os.PathLike[str] | None", None, "where default logs and checkpoints go (a "
         "leading `~` is the home directory)", "loop",
         _root_dir, shown_default="working directory"),
    Flag("enable_checkpointing", "bool | None", None, "add `ModelCheckpoint()` (the latest epoch, in "
         "`<default_root_dir>/checkpoints`) unless one is given; `None`: on", "trainer", barebones_conflict=True),
    Flag("enable_progress_bar", "bool | None", None, "add a progress bar (tqdm's when installed, else plain lines) "
         "unless one is given; `None`: on", "trainer", barebones_conflict=True),
    Flag("enable_model_summary", "bool | None", None, "add a `ModelSummary` (printed when fit starts) unless one is "
         "given; `None`: on", "trainer", barebones_conflict=True),
    Flag("max_epochs", "int | None", None, "stop after this many epochs; `None` means 1000 unless `max_steps` is set; "
         "`-1` never", "loop", _max_epochs),
    Flag("min_epochs", "int | None", None, "run at least this many epochs even if a callback sets `should_stop`",
         "loop", _at_least),
    Flag("max_steps", "int", -1, "stop after this many optimizer steps (`-1`: no limit)", "loop", _max_steps),
    Flag("min_steps", "int | None", None, "take at least this many optimizer steps even if a callback sets "
         "`should_stop`", "loop", _at_least),
    Flag("val_check_interval", "int | float | None", None, "float: validate after each such fraction of the epoch "
         "(`None`: `1.0`, at its end); int: every N training batches", "loop", _val_check_interval),
    Flag("check_val_every_n_epoch", "int | None", 1, "validate in every N-th epoch; `None` with an int "
         "`val_check_interval` counts batches across epochs", "loop", _check_val_every_n_epoch),
    Flag("limit_train_batches", "int | float | None", None, "int: that many training batches per epoch; float: that "
         "fraction (`None`: all)", "loop", _limit),
    Flag("limit_val_batches", "int | float | None", None, "the same for each validation loader", "loop", _limit),
    Flag("limit_test_batches", "int | float | None", None, "the same for each test loader", "loop", _limit),
    Flag("limit_predict_batches", "int | float | None", None, "the same for each predict loader", "loop", _limit),
    Flag("num_sanity_val_steps", "int | None", None, "validation batches per loader before training, metrics "
         "discarded (`-1`: all, `0`: none; `None`: 2, 0 under `barebones`)", "loop", _sanity_steps,
         barebones_conflict=True),
    Flag("accumulate_grad_batches", "int", 1, "batches per optimizer step; the loss is divided by it; gradients are "
         "synchronised on the window's last batch only (`Lite.no_backward_sync`); the last batch of an epoch always "
         "steps", "loop", positive_int, own_property=True),
    Flag("gradient_clip_val", "float | None", None, "clip gradients to this norm or value before each step through "
         "`Lite.clip_gradients` (unscaled first by the precision)", "loop", _clip_val),
    Flag("gradient_clip_algorithm", "str | None", None, "`\"norm\"` (also `None`) or `\"value\"`", "loop",
         _clip_algorithm),
    Flag("log_every_n_steps", "int | None", None, "send step metrics to the loggers every N optimizer steps "
         "(`None`: 50)", "loop", _log_every, barebones_conflict=True),
    Flag("deterministic", "bool", False, "`torch.use_deterministic_algorithms(True)`", "loop", _as_bool),
    Flag("inference_mode", "bool", True, "evaluate under `torch.inference_mode` rather than `no_grad`", "loop",
         _as_bool),
    Flag("fast_dev_run", "int | bool", False, "`True` (1) or `n`: `n` batches of each stage, once (`max_steps=n`, one "
         "epoch, no sanity check), the loggers replaced by a `DummyLogger` that records nothing, no checkpoints",
         "loop", _fast_dev_run, barebones_conflict=True),
    Flag("max_time", "object", None, "stop training at a step boundary once this much time is used "
         "(`\"DD:HH:MM:SS\"`, a `timedelta` or a dict like `{\"hours\": 12}`); adds a `Timer`", "trainer"),
    Flag("overfit_batches", "int | float", 0.0, "int or fraction: train and validate on only the first such batches "
         "of each loader, every epoch (replaces `limit_train_batches` / `limit_val_batches`); the training loader's "
         "shuffling is turned off with a `CoreWarning`", "loop", check_limit),
    Flag("benchmark", "bool | None", None, "set `torch.backends.cudnn.benchmark`; `None` leaves it (off under "
         "`deterministic`)", "loop", _optional_bool),
    Flag("use_distributed_sampler", "bool", True, "`False`: each process reads its loaders as given (split the data "
         "yourself)", "loop", _as_bool),
    Flag("detect_anomaly", "bool", False, "run fit under `torch.autograd.set_detect_anomaly(True)`: the error names "
         "the operation whose backward made a NaN (slow)", "loop", _as_bool, barebones_conflict=True),
    Flag("sync_batchnorm", "bool", False, "BatchNorm layers become `SyncBatchNorm` before set-up; torch supports it on "
         "CUDA, XPU and HPU, so several CPU processes are refused when the Trainer is made", "loop", _as_bool),
    Flag("reload_dataloaders_every_n_epochs", "int", 0, "set the fit's loaders up again (calling "
         "`train_dataloader()` / `val_dataloader()`) before every n-th epoch; `0`: once per fit", "loop",
         _count_from_zero),
    Flag("barebones", "bool", False, "turn off logging (`self.log` raises), checkpointing, the progress bar, the "
         "model summary and the sanity check to time the loop alone; asking for one of them at the same time is a "
         "`ConfigurationError`", "loop", _as_bool),
    Flag("profiler", "object", None, "`\"simple\"`, `\"advanced\"`, `\"pytorch\"` or a `core.profilers.Profiler`: time "
         "the run's actions and report them at the end of each entry point (see Profiling); `None` wraps nothing",
         "trainer", barebones_conflict=True),
    Flag("enable_autolog_hparams", "bool", True, "log the hyperparameters of the Module and DataModule "
         "(`save_hyperparameters`) to every logger when a run starts", "loop", _as_bool),
)
"""The flags in the order of ``Trainer.__init__``'s parameters."""

BY_NAME: Final[dict[str, Flag]] = {flag.name: flag for flag in FLAGS}


def flags_of(group: Group) -> tuple[Flag, ...]:
    return tuple(flag for flag in FLAGS if flag.group == group)


def barebones_conflicts(given: dict[str, object], group: Group) -> list[str]:
    """``name=value`` for each flag of ``group`` that ``barebones=True`` refuses and ``given`` asks for."""
    return [f"{flag.name}={given[flag.name]!r}" for flag in flags_of(group)
            if flag.barebones_conflict and flag.name in given and given[flag.name] not in (None, False, 0)]


def refuse_barebones_conflicts(conflicts: list[str]) -> None:
    """Lightning's rule: in barebones mode what costs speed is off, and asking for it too is an error."""
    if conflicts:
        raise ConfigurationError(
            f"`Trainer(barebones=True, {', '.join(conflicts)})` was passed: barebones mode turns off everything that "
            f"can slow the loop (sanity checking, development runs, anomaly detection, logging, checkpointing, the "
            f"progress bar, the model summary, profiling); drop {' and '.join(conflicts)} or barebones=True."
        )


Value = TypeVar("Value")


class FlagView(Generic[Value]):
    """``trainer.<flag>``: a loop flag's checked value, read from ``trainer.config``; read-only, as a property.

    ``scripts/gen_trainer_flags.py`` writes one per loop flag into the Trainer's class body
    (``max_epochs: FlagView[int] = FlagView()``), typed by the flag's record type, so mypy and IDEs see
    ``trainer.max_epochs`` as an ``int`` and an assignment to it as an error.
    """

    name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.__doc__ = BY_NAME[name].doc

    @overload
    def __get__(self, trainer: None, owner: type) -> Self: ...
    @overload
    def __get__(self, trainer: object, owner: type) -> Value: ...
    def __get__(self, trainer: Any, owner: type) -> Self | Value:
        if trainer is None:
            return self
        value: Value = getattr(trainer.config, self.name)
        return value

    def __set__(self, trainer: object, value: Never) -> NoReturn:
        raise AttributeError(
            f"trainer.{self.name} is read-only: pass it when constructing the Trainer (Trainer({self.name}=...)); "
            f"trainer.config holds every flag."
        )
