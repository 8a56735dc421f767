"""Turning a ``Lite.save`` state into plain state dicts, and restoring a loaded one in place."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from core._errors import CheckpointError, ConfigurationError

PRECISION_KEY: Final = "core/precision"
"""Where a precision with its own state (a gradient scaler) keeps it in the checkpoint."""

Filter = Mapping[str, Callable[[str, Any], bool]]
Convert = Callable[[Any, Any], Any]
"""``(object, its saved state) -> state``: the precision's conversion of a module's state on save or load."""


def is_stateful(value: object) -> bool:
    """Modules, optimizers, schedulers: anything with ``state_dict`` and ``load_state_dict``."""
    return (
        not isinstance(value, type)
        and callable(getattr(value, "state_dict", None))
        and callable(getattr(value, "load_state_dict", None))
    )


def _check_filter(state: Mapping[str, Any], filter: Filter | None) -> None:
    for key, predicate in (filter or {}).items():
        if key not in state:
            raise ConfigurationError(
                f"save(filter=...) names the key {key!r}, which the state does not have; state keys: {sorted(state)}."
            )
        if not callable(predicate):
            raise ConfigurationError(
                f"save(filter={{{key!r}: {predicate!r}}}): expected a function (name, value) -> bool."
            )


def to_checkpoint(
    state: Mapping[str, Any], filter: Filter | None, precision_state: dict[str, Any], convert: Convert | None = None
) -> dict[str, Any]:
    """The state with every stateful object replaced by its state dict, filtered, plus the precision's state.

    :param convert: Applied to each stateful object's state dict before the filter (a precision's plain form).
    """
    if PRECISION_KEY in state:
        raise ConfigurationError(f"The state key {PRECISION_KEY!r} is reserved for the precision's own state.")
    _check_filter(state, filter)
    checkpoint: dict[str, Any] = {}
    for key, value in state.items():
        converted = value.state_dict() if is_stateful(value) else value
        if convert is not None and is_stateful(value):
            converted = convert(value, converted)
        predicate = (filter or {}).get(key)
        if predicate is not None:
            if not isinstance(converted, Mapping):
                raise ConfigurationError(
                    f"save(filter=...) applies to {key!r}, but its value is a {type(converted).__name__}, not a "
                    f"state dict."
                )
            converted = {name: item for name, item in converted.items() if predicate(name, item)}
        checkpoint[key] = converted
    if precision_state:
        checkpoint[PRECISION_KEY] = precision_state
    return checkpoint


def restore(
    state: dict[str, Any], checkpoint: dict[str, Any], strict: bool, path: str, convert: Convert | None = None
) -> dict[str, Any]:
    """Load ``checkpoint`` into the objects of ``state`` in place and return the entries it did not ask for.

    ``convert`` turns each stateful object's saved entry into what it loads (a precision's converted form) before
    anything is checked.

    Stateful objects get ``load_state_dict``; plain values in ``state`` are replaced by the saved ones. Every
    module's keys and shapes are checked before anything is loaded, so a checkpoint that does not fit raises
    :class:`CheckpointError` naming the first mismatches and leaves every object as it was.
    """
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"The checkpoint {path!r} holds a {type(checkpoint).__name__}, not a dict of entries.")
    missing = sorted(key for key in state if key not in checkpoint)
    if strict and missing:
        raise CheckpointError(
            f"The checkpoint {path!r} has no entry for {missing}; it holds {sorted(checkpoint)}. "
            f"Pass strict=False to load what is there."
        )
    for key, target in state.items():
        if key in checkpoint:
            checkpoint[key] = _without_compile_prefix(target, checkpoint[key])
            if convert is not None and is_stateful(target):
                checkpoint[key] = convert(target, checkpoint[key])
    for key, target in state.items():  # check everything first: a failure leaves every object untouched
        if key in checkpoint and is_stateful(target):
            _check_fits(target, checkpoint[key], strict, f"{path!r}, entry {key!r}")
    _load_all(state, checkpoint, strict, path)
    for key in list(state):
        if key in checkpoint and not is_stateful(state[key]):
            state[key] = checkpoint.pop(key)
    for key in state:
        checkpoint.pop(key, None)
    return checkpoint


def _load_all(state: dict[str, Any], checkpoint: dict[str, Any], strict: bool, path: str) -> None:
    """Load every stateful entry, all or nothing.

    Modules, checked key by key and shape by shape above, load last; optimizers and other stateful objects
    first, each backed up before it loads while another may still fail, and put back if one does.
    """
    import copy

    import torch

    targets = [(key, target) for key, target in state.items() if key in checkpoint and is_stateful(target)]
    targets.sort(key=lambda item: isinstance(item[1], torch.nn.Module))
    backups: list[tuple[Any, Any]] = []
    try:
        for index, (key, target) in enumerate(targets):
            if index < len(targets) - 1 and not isinstance(target, torch.nn.Module):
                backups.append((target, copy.deepcopy(target.state_dict())))
            _load_into(target, checkpoint[key], strict, f"{path!r}, entry {key!r}")
    except CheckpointError:
        for target, backup in backups:
            target.load_state_dict(backup)
        raise


_SHOWN: Final = 5  # mismatching keys named in a message
_COMPILE_PREFIX: Final = "_orig_mod."


def _without_compile_prefix(target: Any, saved: Any) -> Any:
    """A module state saved from a ``torch.compile`` wrapper (keys ``_orig_mod.*``), as the plain module's."""
    import torch

    if not (isinstance(target, torch.nn.Module) and isinstance(saved, Mapping) and saved):
        return saved
    expected = target.state_dict()
    if all(isinstance(name, str) and name.startswith(_COMPILE_PREFIX) for name in saved) and not any(
        name.startswith(_COMPILE_PREFIX) for name in expected
    ):
        return {name[len(_COMPILE_PREFIX):]: value for name, value in saved.items()}
    return saved


def _name(target: Any) -> str:
    """The class a user knows the object by, under wrappers that expose it (``.module``, ``.optimizer``)."""
    import torch

    for attribute, kind in (("module", torch.nn.Module), ("optimizer", torch.optim.Optimizer)):
        inner = getattr(target, attribute, None)
        while isinstance(inner, kind) and inner is not target:
            target, inner = inner, getattr(inner, attribute, None)
    return type(target).__name__


def _shape(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return str(tuple(shape)) if shape is not None else type(value).__name__


def raise_if_mismatched(
    subject: str,
    source: str,
    target: str,
    *,
    wrong: Sequence[str],
    absent: Sequence[str],
    extra: Sequence[str],
    strict: bool,
    shown: int = 5,
    plural: bool = False,
) -> None:
    """Raise :class:`core.CheckpointError` saying why saved tensors do not fit a module; return when they do.

    The one message for a state dict that cannot be loaded, whatever wrote it: tensors of another shape always
    count; keys the module has and the saved state lacks (``absent``), or the reverse (``extra``), count only
    when ``strict``. Each list is cut to ``shown`` entries, and the message ends with the fix.

    :param subject: What was saved, starting the message (``"The checkpoint 'last.ckpt'"``).
    :param source: The same, as named inside the message (``"the checkpoint"``, ``"the files"``).
    :param target: What it was loaded into (``"Linear"``).
    :param wrong: One entry per tensor of another shape (``"0.weight: checkpoint (2, 3) vs module (4, 3)"``).
    :param absent: The keys the module has and the saved state lacks.
    :param extra: The keys the saved state has and the module lacks.
    :param strict: Whether ``absent`` and ``extra`` keys are an error (as ``load_state_dict(strict=...)``).
    :param shown: How many entries of each list the message names.
    :param plural: Whether ``subject`` and ``source`` are plural (``"The weights ..."``: "do not fit", "lack").
    """
    lack, have, fit = ("lack", "have", "do not fit") if plural else ("lacks", "has", "does not fit")
    problems = []
    if wrong:
        problems.append(f"{len(wrong)} tensor(s) of another shape: " + "; ".join(wrong[:shown]))
    if strict and absent:
        problems.append(f"{len(absent)} key(s) the module has and {source} {lack}: {list(absent[:shown])}")
    if strict and extra:
        problems.append(f"{len(extra)} key(s) {source} {have} and the module lacks: {list(extra[:shown])}")
    if problems:
        raise CheckpointError(
            f"{subject} {fit} the {target}: " + "; ".join(problems)
            + ". Build the module as it was when saved" + ("" if wrong else ", or load with strict=False") + "."
        )


def _check_fits(target: Any, saved: Any, strict: bool, where: str) -> None:
    """Raise :class:`CheckpointError` when ``saved`` cannot be loaded into ``target``; load nothing."""
    import torch

    if not isinstance(target, (torch.nn.Module, torch.optim.Optimizer)):
        return  # other stateful objects (schedulers, lists of states) check their own state dicts
    if not isinstance(saved, Mapping):
        raise CheckpointError(
            f"The checkpoint {where} holds a {type(saved).__name__}, but a {_name(target)} needs a state "
            f"dict (a mapping); was it saved from something else?"
        )
    if isinstance(target, torch.nn.Module):
        expected = target.state_dict()
        wrong = [
            f"{name}: checkpoint {_shape(saved[name])} vs module {_shape(value)}"
            for name, value in expected.items()
            if name in saved and getattr(saved[name], "shape", None) != getattr(value, "shape", None)
        ]
        absent = [name for name in expected if name not in saved]
        extra = [name for name in saved if name not in expected]
        raise_if_mismatched(
            f"The checkpoint {where}", "the checkpoint", _name(target),
            wrong=wrong, absent=absent, extra=extra, strict=strict, shown=_SHOWN,
        )
    elif isinstance(target, torch.optim.Optimizer):
        if not isinstance(saved.get("state"), Mapping):
            raise CheckpointError(
                f"The checkpoint {where} is not an optimizer's state dict: it has no 'state' mapping (its keys: "
                f"{sorted(map(str, saved))[:_SHOWN]}); the file may be damaged, or the entry saved from something else."
            )
        groups = saved.get("param_groups")
        mine = target.param_groups
        if not isinstance(groups, list) or len(groups) != len(mine) or any(
            not isinstance(group, Mapping) or len(group.get("params", ())) != len(own["params"])
            for group, own in zip(groups, mine, strict=False)
        ):
            found = [len(group.get("params", ())) for group in groups] if isinstance(groups, list) else groups
            raise CheckpointError(
                f"The checkpoint {where} holds an optimizer with parameter groups of sizes {found}, but this "
                f"{_name(target)} has {[len(own['params']) for own in mine]}: build the optimizer over the "
                f"same parameters, in the same groups, as when it was saved."
            )


def _load_into(target: Any, saved: Any, strict: bool, where: str) -> None:
    import torch

    try:
        if isinstance(target, torch.nn.Module):
            target.load_state_dict(saved, strict=strict)
        else:
            target.load_state_dict(saved)
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as error:
        raise CheckpointError(
            f"The checkpoint {where} could not be loaded into the {_name(target)}: "
            f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        ) from error
