"""Every benchmark runs once at a tiny size so that it cannot rot; no timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.distributed  # the ddp, fsdp and distributed-checkpoint benchmarks run 2 ranks
@pytest.mark.timeout(600)
def test_bench_tiny_run_writes_both_reports(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--tiny", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    payload = json.loads((tmp_path / "results.json").read_text())
    names = [row["name"] for row in payload["results"]]
    from bench.__main__ import BENCHMARKS

    assert len(names) >= len(BENCHMARKS)
    assert all(row["ours"] > 0 for row in payload["results"])
    table = (tmp_path / "results.md").read_text()
    assert "| what | ours | baseline | ratio | target | met | note |" in table
    assert all(name in table for name in names)
    rows = {row["name"].split(":")[0].split(",")[0]: row for row in payload["results"]}
    # Each of the 2 ranks wrote its own shard file; fsdp holds half of ddp's parameters, gradients, Adam state.
    assert "__1_0.distcp" in rows["`distributed` save on 2 ranks"]["note"], rows
    assert 0.49 < rows["parameters + gradients + Adam state held per rank"]["ratio"] < 0.51, rows
    # Lite against the raw loop in one job, single process and DDP: both loops ran the same number of blocks.
    in_job = [row for row in payload["results"] if "alternating blocks in one job" in row["name"]]
    assert len(in_job) == 3 and all("1 blocks of" in row["note"] for row in in_job[:2]), in_job
    # ... and the GPT under raw DDP and Lite ddp in the same two processes, 12 pairs of blocks.
    assert "1 jobs x 12 block pairs" in in_job[2]["note"] and "Lite ddp eager vs raw DDP eager" in in_job[2]["name"]
    # Parameters + optimizer state each rank holds: ddp as much as raw DDP, fsdp about half of ddp's.
    held = {row["name"].split(" vs ")[0]: row["ratio"] for row in payload["results"]
            if "state held per rank" in row["name"] and "GPT" in row["name"]}
    assert held["parameters + optimizer state held per rank, Lite ddp eager"] == 1.0, held
    assert 0.45 < held["parameters + optimizer state held per rank, Lite fsdp eager"] < 0.6, held
    # The GPT workload: Lite ddp and fsdp against raw DDP, and the tokens/s plot linked from the report.
    gpt = [row["name"] for row in payload["results"] if row["name"].startswith("tokens/s, Lite")]
    assert any(" ddp eager vs raw DDP" in name for name in gpt) and any(" fsdp eager" in name for name in gpt), gpt
    assert (tmp_path / "tokens_per_s.png").read_bytes().startswith(b"\x89PNG")
    assert "(tokens_per_s.png)" in table
    # Checkpoint throughput next to the disk's own speed, for each checkpoint_io, and async's blocking time.
    for io in ("torch", "async", "distributed"):
        assert any(name.startswith(f"`{io}` checkpoint save throughput") for name in names), names
    assert any(name.startswith("`async` save: time the call blocks") for name in names), names
