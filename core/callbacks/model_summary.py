"""``ModelSummary``: a table of the module's layers and parameter counts when fit starts (global rank 0).

Lightning's columns: name, type, parameters, mode (train / eval), and, when the Module has an
``example_input_array``, the input and output sizes of each layer from one forward pass of that example (run in
eval mode without gradients, the module's modes restored afterwards). Then the totals and the parameters' size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from core._checks import is_whole
from core._errors import ConfigurationError
from core.callbacks._callback import Callback

if TYPE_CHECKING:
    from core.module import Module, TrainerView

__all__ = ["LayerSummary", "ModelSummary", "summarize", "summary_rows"]

UNKNOWN_SIZE = "?"


class LayerSummary:
    """One row: a submodule's name, type, parameter count, mode and (after an example forward) its sizes."""

    def __init__(self, name: str, module: torch.nn.Module) -> None:
        self.name = name
        self.layer_type = type(module).__name__
        self.num_parameters = sum(parameter.numel() for parameter in module.parameters())
        self.training = module.training
        self.in_size: Any = UNKNOWN_SIZE
        self.out_size: Any = UNKNOWN_SIZE


def _size(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, (list, tuple)):
        sizes = [_size(item) for item in value]
        return sizes[0] if len(sizes) == 1 else sizes
    return UNKNOWN_SIZE


def _example_sizes(module: Module, layers: dict[str, torch.nn.Module], rows: list[LayerSummary]) -> None:
    """Fill each row's in/out sizes from one forward of ``module.example_input_array`` (hooks removed after)."""
    example = getattr(module, "example_input_array", None)
    if example is None:
        return
    by_name = {row.name: row for row in rows}

    def recorder(name: str) -> Any:
        def record(_: torch.nn.Module, inputs: Any, output: Any) -> None:
            by_name[name].in_size = _size(inputs)
            by_name[name].out_size = _size(output)
        return record

    handles = [layer.register_forward_hook(recorder(name)) for name, layer in layers.items()]
    modes = [(submodule, submodule.training) for submodule in module.modules()]
    device = next((parameter.device for parameter in module.parameters()), torch.device("cpu"))
    moved = example.to(device) if isinstance(example, torch.Tensor) else example
    try:
        module.eval()
        with torch.no_grad():
            if isinstance(moved, dict):
                module(**moved)
            elif isinstance(moved, (list, tuple)):
                module(*moved)
            else:
                module(moved)
    finally:
        for handle in handles:
            handle.remove()
        for submodule, training in modes:
            submodule.training = training


def summary_rows(module: torch.nn.Module, max_depth: int = 1) -> list[LayerSummary]:
    """The rows of the summary: every submodule down to ``max_depth``, sizes filled when there is an example."""
    layers = {name: child for name, child in module.named_modules() if name and name.count(".") < max_depth}
    rows = [LayerSummary(name, child) for name, child in layers.items()]
    if hasattr(module, "example_input_array"):
        _example_sizes(module, layers, rows)  # type: ignore[arg-type]
    return rows


def _table(header: Sequence[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(row[column]) for row in [list(header), *body]) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in [header, *body]]
    lines.insert(1, "-" * len(lines[0]))
    return lines


def totals(module: torch.nn.Module, rows: list[LayerSummary]) -> list[str]:
    """The lines after the table: trainable / non-trainable / total parameters, their size, modules per mode."""
    trainable = sum(parameter.numel() for parameter in module.parameters() if parameter.requires_grad)
    total = sum(parameter.numel() for parameter in module.parameters())
    size_mb = sum(parameter.numel() * parameter.element_size() for parameter in module.parameters()) / 1e6
    in_train = sum(1 for submodule in module.modules() if submodule.training)
    in_eval = sum(1 for _ in module.modules()) - in_train
    return [f"{trainable:,} trainable params", f"{total - trainable:,} non-trainable params", f"{total:,} total params",
            f"{size_mb:,.3f} total estimated model params size (MB)", f"{in_train} modules in train mode",
            f"{in_eval} modules in eval mode"]


def summarize(module: torch.nn.Module, max_depth: int = 1) -> str:
    """The table: one row per submodule down to ``max_depth``, then the totals."""
    rows = summary_rows(module, max_depth)
    sizes = any(row.in_size != UNKNOWN_SIZE for row in rows)
    header = ["", "Name", "Type", "Params", "Mode"] + (["In sizes", "Out sizes"] if sizes else [])
    body = [[str(index), row.name, row.layer_type, f"{row.num_parameters:,}", "train" if row.training else "eval"]
            + ([str(row.in_size), str(row.out_size)] if sizes else []) for index, row in enumerate(rows)]
    lines = _table(header, body)
    return "\n".join([*lines, "-" * len(lines[0]), *totals(module, rows)])


class ModelSummary(Callback):
    """Print :func:`summarize` of the module when fit starts. ``max_depth=-1``: every level; ``0``: none."""

    def __init__(self, max_depth: int = 1) -> None:
        if not is_whole(max_depth, -1):
            raise ConfigurationError(f"ModelSummary(max_depth={max_depth!r}): expected -1 or a whole number >= 0.")
        self.max_depth = max_depth
        self.summary: str | None = None

    @property
    def depth(self) -> int:
        return 10**6 if self.max_depth == -1 else self.max_depth

    def on_fit_start(self, trainer: TrainerView, module: Module) -> None:
        if self.max_depth == 0:
            return
        self.summary = self.render(module)
        trainer.print(self.summary)

    def render(self, module: Module) -> str:
        """The text printed when fit starts (:class:`RichModelSummary` draws it with rich)."""
        return summarize(module, max_depth=self.depth)
