"""``ModelSummary``: a table of the module's layers and parameter counts when fit starts (global rank 0)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from core._errors import ConfigurationError
from core.callbacks._callback import Callback

if TYPE_CHECKING:
    from core.module import Module
    from core.trainer import Trainer


def summarize(module: torch.nn.Module, max_depth: int = 1) -> str:
    """The table: one row per submodule down to ``max_depth`` (name, type, parameters), then the totals."""
    rows = [("", "Name", "Type", "Params")]
    for index, (name, child) in enumerate(
        (name, child) for name, child in module.named_modules() if name and name.count(".") < max_depth
    ):
        count = sum(parameter.numel() for parameter in child.parameters())
        rows.append((str(index), name, type(child).__name__, f"{count:,}"))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    trainable = sum(parameter.numel() for parameter in module.parameters() if parameter.requires_grad)
    total = sum(parameter.numel() for parameter in module.parameters())
    lines += ["-" * len(lines[0]), f"{trainable:,} trainable params", f"{total - trainable:,} non-trainable params",
              f"{total:,} total params"]
    return "\n".join(lines)


class ModelSummary(Callback):
    """Print :func:`summarize` of the module when fit starts. ``max_depth=-1``: every level; ``0``: none."""

    def __init__(self, max_depth: int = 1) -> None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
            raise ConfigurationError(f"ModelSummary(max_depth={max_depth!r}): expected -1 or a whole number >= 0.")
        self.max_depth = max_depth
        self.summary: str | None = None

    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        if self.max_depth == 0:
            return
        self.summary = summarize(module, max_depth=10**6 if self.max_depth == -1 else self.max_depth)
        trainer.print(self.summary)
