"""``RichModelSummary``: :class:`ModelSummary`'s table drawn with rich (``pip install rich``)."""

from __future__ import annotations

import importlib
import io
from typing import TYPE_CHECKING, Any

from core.callbacks.model_summary import UNKNOWN_SIZE, ModelSummary, summary_rows, totals
from core.callbacks.rich_progress import _rich

if TYPE_CHECKING:
    from core.module import Module

__all__ = ["RichModelSummary"]


class RichModelSummary(ModelSummary):
    """The same rows and totals as :class:`ModelSummary`, as a rich table.

    :param header_style: The style of the table's header row (Lightning's default).
    :param console_kwargs: Passed to ``rich.console.Console``.
    """

    def __init__(self, max_depth: int = 1, header_style: str = "bold magenta",
                 console_kwargs: dict[str, Any] | None = None) -> None:
        _rich()
        super().__init__(max_depth=max_depth)
        self.header_style = header_style
        self.console_kwargs = dict(console_kwargs or {})

    def render(self, module: Module) -> str:
        table_module = importlib.import_module("rich.table")
        console_module = importlib.import_module("rich.console")
        rows = summary_rows(module, self.depth)
        sizes = any(row.in_size != UNKNOWN_SIZE for row in rows)
        table = table_module.Table(header_style=self.header_style)
        for column in ["", "Name", "Type", "Params", "Mode"] + (["In sizes", "Out sizes"] if sizes else []):
            table.add_column(column)
        for index, row in enumerate(rows):
            mode = "train" if row.training else "eval"
            cells = [str(index), row.name, row.layer_type, f"{row.num_parameters:,}", mode]
            table.add_row(*cells, *([str(row.in_size), str(row.out_size)] if sizes else []))
        buffer = io.StringIO()
        console = console_module.Console(**{"file": buffer, "width": 120, **self.console_kwargs})
        console.print(table)
        for line in totals(module, rows):
            console.print(line)
        return buffer.getvalue().rstrip("\n")
