"""Shared machinery: alternating measurements, result records and the report files."""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path

import attrs


@attrs.frozen
class Result:
    """One row of bench/results.md: our figure against the baseline's, measured in the same run."""

    name: str
    ours: float
    baseline: float | None
    unit: str
    target: str
    met: bool | None = None
    note: str = ""

    @classmethod
    def from_dict(cls, row: dict[str, object]) -> Result:
        """A row of results.json back into a Result (the derived ``ratio`` is dropped)."""
        names = {field.name for field in attrs.fields(cls)}
        return cls(**{key: value for key, value in row.items() if key in names})  # type: ignore[arg-type]

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline == 0:
            return None
        return self.ours / self.baseline


def alternate(
    baseline: Callable[[], float], candidate: Callable[[], float], repetitions: int
) -> tuple[float, float, list[float], list[float]]:
    """Run baseline and candidate as A B A B ... and return both medians and the raw samples.

    Alternating spreads slow drifts of the machine (another process, thermal state) over both sides.
    """
    a_samples: list[float] = []
    b_samples: list[float] = []
    for _ in range(repetitions):
        a_samples.append(baseline())
        b_samples.append(candidate())
    return statistics.median(a_samples), statistics.median(b_samples), a_samples, b_samples


def time_command(command: Sequence[str], env: dict[str, str] | None = None) -> float:
    """Wall time of one run of ``command``; a failure is an error, never a fast sample."""
    start = time.perf_counter()
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({completed.returncode}):\n{completed.stderr[-2000:]}")
    return elapsed


def machine_description() -> str:
    import os

    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, {system}"


def _format(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "us":
        return f"{value:.2f} us"
    if unit == "MB":
        return f"{value:.0f} MB"
    if unit == "x":
        return f"{value:.3f}x"
    return f"{value:g} {unit}".strip()


def write_report(results: Sequence[Result], out: Path, header: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    import torch

    meta = {
        "date": date.today().isoformat(),
        "machine": machine_description(),
        "torch": torch.__version__,
        "command": " ".join([Path(sys.executable).name, "-m", "bench", *sys.argv[1:]]),
    }
    rows = []
    for result in results:
        ratio = result.ratio
        met = "" if result.met is None else ("yes" if result.met else "**no**")
        rows.append(
            f"| {result.name} | {_format(result.ours, result.unit)} | {_format(result.baseline, result.unit)} | "
            f"{'-' if ratio is None else f'{ratio:.3f}x'} | {result.target} | {met} | {result.note} |"
        )
    lines = [
        "# Benchmark results",
        "",
        header,
        "",
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']}",
        f"- torch: {meta['torch']}",
        f"- command: `{meta['command']}`",
        "",
        "| what | ours | baseline | ratio | target | met | note |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    # The hand-written reading of the current figures (why a target is missed and what would close it).
    analysis = Path(__file__).resolve().parent / "analysis.md"
    if analysis.exists() and not header.startswith("Tiny"):
        lines += [analysis.read_text().rstrip(), ""]
    (out / "results.md").write_text("\n".join(lines))
    payload = {**meta, "results": [{**attrs.asdict(r), "ratio": r.ratio} for r in results]}
    (out / "results.json").write_text(json.dumps(payload, indent=2) + "\n")
