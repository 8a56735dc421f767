"""The digits example (examples/digits.py) trained with PowerSGD: its own loop and accuracy bar, plus the extension.

    python digits_powersgd.py --strategy ddp --devices 2 [--rank 1 --warmup 10 --fp16] [digits.py flags]

examples/digits.py takes no ``plugins``, so this script imports its data, model and loop and builds the
``Lite`` itself with ``plugins=[PowerSGDExtension(...)]``. It exits with status 1 below ``--min-accuracy``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from core_powersgd import PowerSGDExtension

import core

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "digits.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("digits_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    extension_parser = argparse.ArgumentParser(add_help=False)
    extension_parser.add_argument("--rank", type=int, default=1)
    extension_parser.add_argument("--warmup", type=int, default=10)
    extension_parser.add_argument("--fp16", action="store_true")
    options, rest = extension_parser.parse_known_args()
    digits = load_example()
    args = digits.parse_args(rest)
    extension = PowerSGDExtension(rank=options.rank, warmup=options.warmup, fp16=options.fp16)
    lite = core.Lite(
        accelerator=args.accelerator, strategy=args.strategy, devices=args.devices, num_nodes=args.num_nodes,
        precision=args.precision, plugins=[extension],
    )
    accuracy = lite.launch(digits.train, args)
    if accuracy is not None and accuracy < args.min_accuracy:
        print(f"test accuracy {accuracy:.4f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
