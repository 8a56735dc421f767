"""``python -m bench``: every benchmark, written to bench/results.md and bench/results.json.

``--tiny`` runs each benchmark once at a tiny size, so that ``make test`` keeps them from rotting; its
figures mean nothing and it writes to ``--out`` (a temporary directory in the tests).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from bench._harness import Result, write_report
from bench.plot import plot_tokens

# name -> (module, full-size argument, tiny argument)
BENCHMARKS = {
    "overhead": ("bench.overhead", 400, 5),
    "step_calls": ("bench.step_calls", 50, 5),
    "startup": ("bench.startup", 5, 1),
    "first_step": ("bench.first_step", 5, 1),
    "hooks": ("bench.hooks", 20000, 100),
    "checkpoints": ("bench.checkpoints", 200, 8),
    "distributed_save": ("bench.distributed_save", 200, 8),
    "memory": ("bench.memory", 24, 1),
    "activations": ("bench.activations", 6, 2),
    "gpt": ("bench.gpt", 20, 3),
    "disk": ("bench.disk", 1024, 8),
    "safetensors_io": ("bench.safetensors_io", 512, 8),
    "diloco": ("bench.diloco", 20, 5),
    "float8": ("bench.float8", 8, 2),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--tiny", action="store_true", help="one quick pass of each benchmark (for tests)")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), help="run only these")
    parser.add_argument(
        "--append", action="store_true", help="keep the rows already in --out/results.json and add these"
    )
    parser.add_argument(
        "--report-only", action="store_true",
        help="run nothing: write results.md and the plot again from --out/results.json (with --append) and the peers",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="where to write results")
    args = parser.parse_args(argv)
    results: list[Result] = []
    previous = args.out / "results.json"
    if args.append and previous.exists():
        results += [Result.from_dict(row) for row in json.loads(previous.read_text())["results"]]
    for name in [] if args.report_only else (args.only or BENCHMARKS):
        module_name, full, tiny = BENCHMARKS[name]
        print(f"[bench] {name} ...", flush=True)
        module = importlib.import_module(module_name)
        for result in module.run(tiny if args.tiny else full):
            ratio = f"{result.ratio:.3f}x" if result.ratio is not None else "-"
            print(f"  {result.name}: ours {result.ours:.6g} {result.unit}, ratio {ratio}, met={result.met}", flush=True)
            results.append(result)
    peers_file = Path(__file__).resolve().parent / "results-peers.json"
    if not args.tiny and (args.append or not args.only) and peers_file.exists():
        peers = json.loads(peers_file.read_text())
        print(f"[bench] adding peers from {peers_file.name} ({peers['date']}, {peers['versions']})")
        results += [Result.from_dict(row) for row in peers["results"]]
    # A row measured again (--append) replaces the earlier one of the same name.
    results = list({result.name: result for result in results}.values())
    header = "Tiny smoke run: figures are meaningless." if args.tiny else (
        "Each row alternates baseline and candidate (A B A B ...) and reports medians. See bench/README.md."
    )
    write_report(results, args.out, header)
    plot = plot_tokens(results, args.out)
    if plot is not None:
        with (args.out / "results.md").open("a") as report:
            report.write(f"\n![tokens/s per framework and strategy]({plot.name})\n")
    print(f"[bench] wrote {args.out / 'results.md'} and results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
