"""``python -m core.plugins new KIND NAME``: write a complete plugin package from a template.

The package is what an outside author publishes: ``core-NAME/`` with a ``pyproject.toml`` declaring the
entry point and a ``core`` version range, the module ``core_NAME``, a README, and tests that run the
conformance kit. Its tests pass straight after ``pip install -e core-NAME``. Templates live in
``core/plugins/templates/`` and use :class:`string.Template` placeholders.
"""

from __future__ import annotations

import argparse
import re
import string
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Final

import importlib_metadata
from packaging.version import Version

from core._errors import ConfigurationError, CoreError
from core._records import ENTRY_POINT_GROUPS, KINDS
from core.hookspecs import CONTRACT_VERSION

_PROG: Final = "python -m core.plugins new"
NAME_PATTERN: Final = re.compile(r"^[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*$")

_CLASS_SUFFIX: Final = {
    "accelerator": "Accelerator",
    "strategy": "Strategy",
    "precision": "Precision",
    "environment": "Environment",
    "checkpoint_io": "CheckpointIO",
    "extension": "Extension",
}
_KIT_CLASS: Final = {kind: f"{suffix}Conformance" for kind, suffix in _CLASS_SUFFIX.items()}
_USAGE: Final = {
    "accelerator": 'lite = core.Lite(accelerator="{alias}", devices=1)',
    "strategy": 'lite = core.Lite(accelerator="cpu", strategy="{alias}", devices=2)',
    "precision": 'lite = core.Lite(precision="{alias}")',
    "environment": "# claimed automatically in processes where {prefix}_WORLD_SIZE is set, or by name:\n"
    'lite = core.Lite(plugins=["{alias}"], devices=2)',
    "checkpoint_io": 'lite = core.Lite(plugins=["{alias}"])',
    "extension": 'lite = core.Lite(strategy="ddp", devices=2, plugins=["{alias}"])',
}
# Distributions a kind's template builds on, besides core (the strategy subclasses core_ddp.DDPStrategy).
_BUILDS_ON: Final = {"strategy": ("core-ddp",)}


def compatible_range(version: str) -> str:
    """``>=X.Y,<X.(Y+1)`` while ``X`` is 0 (each minor release may break), ``>=X.Y,<(X+1)`` after."""
    parsed = Version(version)
    if parsed.major == 0:
        return f">=0.{parsed.minor},<0.{parsed.minor + 1}"
    return f">={parsed.major}.{parsed.minor},<{parsed.major + 1}"


def _installed_version(distribution: str, kind: str) -> str:
    try:
        return str(importlib_metadata.version(distribution))
    except importlib_metadata.PackageNotFoundError:
        raise ConfigurationError(
            f"The {kind} template builds on {distribution}, which is not installed here; "
            f"pip install {distribution}, then run {_PROG} {kind} ... again."
        ) from None


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise ConfigurationError(
            f"{name!r} is not a plugin name: use lower-case letters and digits, optionally joined by '-' or '_', "
            f"starting with a letter (for example 'mine' or 'fast-ddp')."
        )
    if name == "core" or name.startswith(("core-", "core_")):
        raise ConfigurationError(
            f"Name the plugin without the 'core' prefix: {name!r} would become 'core-{name}'; "
            f"use {name.removeprefix('core').lstrip('-_') or 'mine'!r}."
        )
    return name


def template_variables(kind: str, name: str) -> dict[str, str]:
    """Every placeholder of the templates for a plugin of ``kind`` with alias ``name``."""
    from core import __version__

    package = "core_" + name.replace("-", "_")
    class_name = "".join(part.capitalize() for part in re.split(r"[-_]", name)) + _CLASS_SUFFIX[kind]
    env_prefix = name.replace("-", "_").upper()
    requirements = [f"core{compatible_range(__version__)}"]
    requirements += [f"{dist}{compatible_range(_installed_version(dist, kind))}" for dist in _BUILDS_ON.get(kind, ())]
    if kind != "extension":
        requirements.append("torch>=2.2")
    return {
        "alias": name,
        "kind": kind,
        "dist": "core-" + name.replace("_", "-"),
        "package": package,
        "class_name": class_name,
        "group": ENTRY_POINT_GROUPS[kind],
        "core_range": compatible_range(__version__),
        "dependencies": "".join(f'    "{requirement}",\n' for requirement in requirements),
        "contract_version": str(CONTRACT_VERSION),
        "env_prefix": env_prefix,
        "kit_class": _KIT_CLASS[kind],
        "usage": "import core\n\n" + _USAGE[kind].format(alias=name, prefix=env_prefix),
    }


def _render(template: str, variables: dict[str, str]) -> str:
    text = (resources.files("core.plugins") / "templates" / f"{template}.tmpl").read_text()
    return string.Template(text).substitute(variables)


def generate(kind: str, name: str, directory: Path) -> Path:
    """Write the package ``core-NAME`` for a plugin of ``kind`` under ``directory``; return its path."""
    if kind not in KINDS:
        raise ConfigurationError(f"Unknown kind {kind!r}; expected one of {list(KINDS)}.")
    variables = template_variables(kind, check_name(name))
    root = directory / variables["dist"]
    if root.exists() and any(root.iterdir()):
        raise ConfigurationError(f"{root} already exists and is not empty; choose another --directory or name.")
    package = root / variables["package"]
    files = {
        root / "pyproject.toml": _render("pyproject.toml", variables),
        root / "README.md": _render("README.md", variables),
        package / "__init__.py": _render(f"{kind}.py", variables),
        package / "py.typed": "",
        root / "tests" / f"test_{variables['package']}.py": _render(f"test_{kind}.py", variables),
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _already_provided(kind: str, name: str) -> list[str]:
    from core.registry._discovery import discover

    return sorted({info.distribution for info in discover().of_kind(kind) if info.alias == name})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Write a plugin package core-NAME (pyproject with the entry point, module, README, tests "
        "running the conformance kit) from core's template for KIND.",
    )
    parser.add_argument("kind", choices=KINDS, help="the kind of plugin")
    parser.add_argument("name", help="the alias users will type, e.g. 'mine' (the package becomes core-mine)")
    parser.add_argument("--directory", "-d", default=".", help="where to create core-NAME/ (default: here)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        root = generate(args.kind, args.name, Path(args.directory))
        rivals = _already_provided(args.kind, args.name)
    except CoreError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"Created {root} with the {args.kind} plugin {args.name!r}:")
    for path in sorted(root.rglob("*")):
        if path.is_file():
            print(f"  {path.relative_to(root.parent)}")
    if rivals:
        print(
            f"note: the {args.kind} alias {args.name!r} is already provided by {', '.join(rivals)}; users will "
            f"have to pin one ({args.kind}='{root.name}:{args.name}'). Consider another name.",
            file=sys.stderr,
        )
    where = str(root) if root.is_absolute() or str(root).startswith(".") else f"./{root}"
    steps = [
        (f"pip install -e {where}", f"registers the entry point {args.name!r}"),
        (f"pytest {where}/tests", "runs core's conformance kit against it"),
        (f"python -m core.plugins show {args.name}", "what core sees"),
    ]
    width = max(len(command) for command, _ in steps)
    print("\nNext:")
    for command, comment in steps:
        print(f"  {command.ljust(width)}   # {comment}")
    return 0
