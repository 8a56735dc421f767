"""The tokens/s plot linked from bench/results.md: every ``tokens/s`` row, raw DDP as the reference line."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench._harness import Result

PLOT = "tokens_per_s.png"


def plot_tokens(results: Sequence[Result], out: Path) -> Path | None:
    """Write ``out/tokens_per_s.png`` (a horizontal bar per framework and strategy); None without such rows."""
    rows = [result for result in results if result.name.startswith("tokens/s")]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [row.name.split(" vs ")[0].removeprefix("tokens/s, ") for row in rows]
    figure, axis = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.5))
    colors = ["tab:orange" if "compiled" in label else "tab:blue" for label in labels]
    axis.barh(labels, [row.ours for row in rows], color=colors)
    references = {(row.baseline, "compiled" in label) for row, label in zip(rows, labels, strict=True)}
    for baseline, compiled in sorted(references, key=str):
        if baseline is not None:
            style = ":" if compiled else "--"
            axis.axvline(baseline, color="black", linestyle=style,
                         label=f"raw DDP {'compiled' if compiled else 'eager'} ({baseline:.0f})")
    axis.invert_yaxis()
    axis.set_xlabel("tokens/s (2 ranks, higher is better); blue eager, orange compiled")
    axis.set_title(rows[0].name.split("(", 1)[-1].rstrip(")"), fontsize=8)
    axis.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    path = out / PLOT
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
