"""The ``convert`` command: load with one checkpoint_io, save with another, nothing else in between."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Final

import pluggy

from core import hookspecs
from core._errors import ConfigurationError, CoreError
from core.registry._discovery import discover, load

# What is on disk -> the checkpoint_io alias that reads it, asked in this order. A directory is recognised by a file
# its format always writes; a single file by its suffix, else it is a torch file.
DIRECTORY_SIGNATURES: Final = (
    (".metadata", "distributed"),
    ("model.safetensors.index.json", "safetensors"),
    ("model.safetensors", "safetensors"),
)
DEFAULT_TARGETS: Final = {"safetensors": "distributed"}
"""The format a conversion writes when ``--to`` is not given: ``safetensors`` for anything else."""


def detect_format(path: str) -> str:
    """The checkpoint_io alias that reads the checkpoint at ``path``.

    :raises core.ConfigurationError: nothing there, or a directory of no format this table knows (name it with
        ``--from``).
    """
    if os.path.isfile(path):
        return "safetensors" if path.endswith(".safetensors") else "torch"
    if not os.path.isdir(path):
        raise ConfigurationError(f"No checkpoint at {path!r}: the path does not exist.")
    for marker, alias in DIRECTORY_SIGNATURES:
        if os.path.exists(os.path.join(path, marker)):
            return alias
    raise ConfigurationError(
        f"{path!r} is a directory of no known checkpoint format (none of {[m for m, _ in DIRECTORY_SIGNATURES]} is "
        f"in it); name its checkpoint_io with --from ALIAS."
    )


def _checkpoint_io(alias: str, options: dict[str, Any]) -> pluggy.HookRelay:
    """The hooks of the installed checkpoint_io ``alias`` built with ``options`` (an unknown alias names the
    installed ones and the distribution to install)."""
    plugin = load(discover().lookup("checkpoint_io", alias), options)
    manager = pluggy.PluginManager("core")
    manager.add_hookspecs(hookspecs)
    manager.register(plugin, name=alias)
    return manager.hook


def convert(source: str, target: str, source_format: str | None = None, target_format: str | None = None,
            target_options: dict[str, Any] | None = None, weights_only: bool = True) -> tuple[str, str]:
    """Read ``source`` with one checkpoint_io and write ``target`` with another; returns both aliases.

    The whole checkpoint passes through this process's memory (on the CPU).
    """
    source_format = source_format or detect_format(source)
    target_format = target_format or DEFAULT_TARGETS.get(source_format, "safetensors")
    if os.path.abspath(source) == os.path.abspath(target):
        raise ConfigurationError(f"convert {source!r} {target!r}: the target must differ from the source.")
    reader = _checkpoint_io(source_format, {})
    writer = _checkpoint_io(target_format, target_options or {})
    checkpoint = reader.checkpoint_io_load(path=source, map_location="cpu", weights_only=weights_only)
    writer.checkpoint_io_save(checkpoint=checkpoint, path=target, storage_options=None)
    return source_format, target_format


def _option(text: str) -> tuple[str, Any]:
    name, equals, value = text.partition("=")
    if not equals or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE (for example max_shard_size=5GB)")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core.checkpoint", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser(
        "convert", help="rewrite a checkpoint in another checkpoint_io's format",
        description="Read SOURCE with the checkpoint_io that wrote it and write TARGET with another: a "
                    "'distributed' directory becomes 'safetensors' (Hugging Face weights plus the rest), and back.",
    )
    command.add_argument("source")
    command.add_argument("target")
    command.add_argument("--from", dest="source_format", help="the checkpoint_io alias that reads SOURCE "
                         "(default: recognised from the files)")
    command.add_argument("--to", dest="target_format", help="the checkpoint_io alias that writes TARGET (default: "
                         "'distributed' from 'safetensors', else 'safetensors')")
    command.add_argument("--option", dest="options", action="append", type=_option, default=[], metavar="NAME=VALUE",
                         help="an option of the target's checkpoint_io, e.g. max_shard_size=5GB (repeatable)")
    command.add_argument("--unsafe-load", action="store_true", help="load SOURCE with weights_only=False (only for "
                         "checkpoints you trust: it may run code from the files)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    try:
        source_format, target_format = convert(
            arguments.source, arguments.target, arguments.source_format, arguments.target_format,
            dict(arguments.options), weights_only=not arguments.unsafe_load,
        )
    except CoreError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{arguments.source} ({source_format}) -> {arguments.target} ({target_format})")
    return 0
