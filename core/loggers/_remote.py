"""Helpers shared by the loggers that talk to a tracking service (MLflow, Weights & Biases).

Their packages are optional and heavy: they are imported when a logger is constructed, never by ``import core``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from core._errors import ConfigurationError

__all__ = ["checkpoint_metadata", "flatten", "global_rank", "new_checkpoints", "prefixed", "rank_zero_only", "require"]

F = TypeVar("F", bound=Callable[..., Any])


def require(logger: str, module: str, distribution: str) -> None:
    """Raise :class:`ConfigurationError` naming the pip command when ``module`` is not installed."""
    if importlib.util.find_spec(module) is None:
        raise ConfigurationError(
            f"{logger} needs the {distribution} package, which is not installed: pip install {distribution} "
            "(or use the dependency-free core.loggers.CSVLogger)."
        )


def global_rank() -> int:
    """This process's global rank: the process group's when one is set up, else ``$RANK`` (0 when unset)."""
    import torch.distributed

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_rank())
    return int(os.environ.get("RANK", "0"))


def rank_zero_only(method: F) -> F:
    """Run ``method`` on global rank 0; on every other rank it does nothing and returns ``None``."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if global_rank() != 0:
            return None
        return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def flatten(params: Mapping[str, Any], delimiter: str = "/", parent: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}``, as Lightning's loggers flatten hyperparameters."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{parent}{delimiter}{key}" if parent else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, delimiter, name))
        else:
            flat[name] = value
    return flat


def prefixed(prefix: str, metrics: Mapping[str, float], join: str = "-") -> dict[str, float]:
    return {f"{prefix}{join}{name}" if prefix else name: value for name, value in metrics.items()}


def new_checkpoints(checkpoint_callback: Any, logged: dict[str, float]) -> list[tuple[float, str]]:
    """The ``(mtime, path)`` of every checkpoint the callback kept that was not logged (or changed) since."""
    paths = set(getattr(checkpoint_callback, "best_k_models", {}) or {})
    for attribute in ("last_model_path", "latest_model_path", "best_model_path"):
        path = getattr(checkpoint_callback, attribute, "")
        if path:
            paths.add(path)
    found = []
    for path in sorted(paths):
        if os.path.isfile(path):
            mtime = os.path.getmtime(path)
            if logged.get(path) != mtime:
                found.append((mtime, path))
    return sorted(found)


def checkpoint_metadata(checkpoint_callback: Any, path: str, section: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The metadata Lightning's loggers attach to a logged checkpoint: score, file name and the callback's settings."""
    score = checkpoint_callback.best_k_models.get(path)
    return {
        "score": float(score) if score is not None else None,
        "original_filename": os.path.basename(path),
        section: {key: getattr(checkpoint_callback, key) for key in keys if hasattr(checkpoint_callback, key)},
    }
