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
# Distributions a kind's template builds on, besides core. None today: the strategy template is written on the
# core's own core.toolkit.strategies.ParallelStrategy, as the first-party process-group strategies are.
_BUILDS_ON: Final[dict[str, tuple[str, ...]]] = {}
# Parts of a name written in capitals in a class name: 'localsgd' -> LocalSGD, 'fast-ddp' -> FastDDP.
_ACRONYMS: Final = (
    "amp", "cpu", "cuda", "dcp", "ddp", "dp", "fsdp", "gpu", "hpu", "io", "ipu", "lsf", "mpi", "mps", "nccl",
    "sgd", "tpu", "xla", "zero",
)
_IDENTIFIER: Final = re.compile(r"^[A-Z][A-Za-z0-9]*$")


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


def _word(part: str) -> str:
    """One part of a name as a class name writes it: an acronym in capitals, also at the end of the part."""
    if part in _ACRONYMS:
        return part.upper()
    for acronym in sorted(_ACRONYMS, key=len, reverse=True):
        stem = part.removesuffix(acronym)
        if stem != part and len(stem) >= 3:
            return stem.capitalize() + acronym.upper()
    return part.capitalize()


def class_name_for(kind: str, name: str) -> str:
    """The class a plugin ``name`` of ``kind`` is generated as: ``localsgd`` -> ``LocalSGDStrategy``."""
    suffix = _CLASS_SUFFIX[kind]
    stem = "".join(_word(part) for part in re.split(r"[-_]", name))
    return stem if stem.endswith(suffix) else stem + suffix


def check_class_name(class_name: str) -> str:
    if not (_IDENTIFIER.match(class_name) and class_name.isidentifier()):
        raise ConfigurationError(
            f"--class-name {class_name!r} is not a class name: use letters and digits, starting with a capital "
            f"letter (for example 'LocalSGDStrategy')."
        )
    return class_name


def template_variables(
    kind: str, name: str, class_name: str | None = None, alias: str | None = None
) -> dict[str, str]:
    """Every placeholder of the templates for the distribution ``core-NAME`` holding a plugin of ``kind``.

    :param alias: The entry point users type; ``None``: ``name`` (``core-torchao`` may provide ``fp8``).
    """
    alias = name if alias is None else alias
    from core import __version__

    package = "core_" + name.replace("-", "_")
    class_name = check_class_name(class_name) if class_name is not None else class_name_for(kind, name)
    env_prefix = name.replace("-", "_").upper()
    requirements = [f"core{compatible_range(__version__)}"]
    requirements += [f"{dist}{compatible_range(_installed_version(dist, kind))}" for dist in _BUILDS_ON.get(kind, ())]
    if kind != "extension":
        requirements.append("torch>=2.2")
    return {
        "alias": alias,
        "arguments": name if alias == name else f"{name} --alias {alias}",
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
        "usage": "import core\n\n" + _USAGE[kind].format(alias=alias, prefix=env_prefix),
    }


def _render(template: str, variables: dict[str, str]) -> str:
    text = (resources.files("core.plugins") / "templates" / f"{template}.tmpl").read_text()
    return string.Template(text).substitute(variables)


def package_root(directory: Path, dist: str) -> Path:
    """Where ``core-NAME/`` goes: inside ``directory``, or ``directory`` itself when it is named ``core-NAME``."""
    return directory if directory.name == dist else directory / dist


def generate(
    kind: str, name: str, directory: Path, class_name: str | None = None, alias: str | None = None
) -> Path:
    """Write the package ``core-NAME`` for a plugin of ``kind`` (entry point ``alias``, default NAME) under
    ``directory``; return its path.

    A ``directory`` that is itself named ``core-NAME`` is taken as the package's root (``--directory
    ./core-mine`` writes ``./core-mine/pyproject.toml``, not ``./core-mine/core-mine/``).
    """
    if kind not in KINDS:
        raise ConfigurationError(f"Unknown kind {kind!r}; expected one of {list(KINDS)}.")
    variables = template_variables(kind, check_name(name), class_name, None if alias is None else check_name(alias))
    root = package_root(directory, variables["dist"])
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


def check_unclaimed(kind: str, name: str, alias: str | None = None) -> None:
    """Refuse an alias (``alias``, default ``name``) or a distribution name (``core-NAME``) that an installed or a
    first-party distribution already has.

    A generated ``core-ddp`` would import as ``core_ddp`` and shadow (or, installed, replace) the first-party
    one; a second ``ddp`` strategy would make every ``strategy="ddp"`` a conflict.
    """
    from core.registry._discovery import discover, first_party

    dist = "core-" + name.replace("_", "-")
    wanted = name if alias is None else alias
    catalog = discover()
    holders = sorted(
        {info.distribution for info in catalog.of_kind(kind) if info.alias == wanted}
        | {provider for (known_kind, known), provider in first_party().items() if (known_kind, known) == (kind, wanted)}
    )
    installed = {info.distribution for info in catalog.entries}
    known = installed | set(first_party().values())
    normalized = {_normalize(other) for other in known}
    taken_dist = next((other for other in sorted(known) if _normalize(other) == _normalize(dist)), None)
    if taken_dist is None and _is_installed(dist):
        taken_dist = f"the installed distribution {dist}"
    if not holders and taken_dist is None:
        return
    aliases = {info.alias for info in catalog.of_kind(kind)} | {
        known for (known_kind, known) in first_party() if known_kind == kind
    }
    suggestion = next(
        (
            candidate for candidate in (f"{name}{suffix}" for suffix in ("-mine", "-custom", "-2", "-3"))
            if candidate not in aliases and _normalize("core-" + candidate.replace("_", "-")) not in normalized
        ),
        "another-name",
    )
    package = "core_" + name.replace("-", "_")
    if holders:
        where = "installed here" if set(holders) <= installed else "first-party, pip install " + holders[0]
        problem = (
            f"the {kind} alias {wanted!r} is already provided by {', '.join(holders)} ({where}); a second one "
            f"would make every {kind}={wanted!r} a conflict"
        )
    else:
        problem = f"the distribution name {dist!r} is already taken by {taken_dist}"
    if taken_dist is not None:
        problem += f", and a package {package} would shadow its module"
    raise ConfigurationError(f"Cannot create {dist}: {problem}. Choose another name, e.g. {_PROG} {kind} {suggestion}.")


def _is_installed(distribution: str) -> bool:
    try:
        importlib_metadata.version(distribution)
    except importlib_metadata.PackageNotFoundError:
        return False
    return True


def _normalize(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Write a plugin package core-NAME (pyproject with the entry point, module, README, tests "
        "running the conformance kit) from core's template for KIND.",
    )
    parser.add_argument("kind", choices=KINDS, help="the kind of plugin")
    parser.add_argument(
        "name", help="the plugin's name, e.g. 'mine': the package becomes core-mine, and the alias too unless --alias"
    )
    parser.add_argument(
        "--alias", default=None,
        help="the alias users will type when it differs from NAME (core-torchao provides 'fp8'); default: NAME",
    )
    parser.add_argument(
        "--directory", "-d", default=".",
        help="where to create core-NAME/ (default: here); a directory named core-NAME is used as the package root",
    )
    parser.add_argument(
        "--class-name", default=None,
        help="the plugin's class (default: derived from NAME, e.g. 'localsgd' -> LocalSGDStrategy)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        check_name(args.name)
        alias = args.name if args.alias is None else check_name(args.alias)
        check_unclaimed(args.kind, args.name, alias)
        root = generate(args.kind, args.name, Path(args.directory), args.class_name, alias)
    except CoreError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    class_name = args.class_name or class_name_for(args.kind, args.name)
    print(f"Created {root} with the {args.kind} plugin {alias!r} (class {class_name}):")
    for path in sorted(root.rglob("*")):
        if path.is_file():
            print(f"  {path.relative_to(root.parent)}")
    where = str(root) if root.is_absolute() or str(root).startswith(".") else f"./{root}"
    steps = [
        (f"pip install -e {where}", f"registers the entry point {alias!r}"),
        (f"pytest {where}/tests", "runs core's conformance kit against it"),
        (f"python -m core.plugins show {alias}", "what core sees"),
    ]
    width = max(len(command) for command, _ in steps)
    print("\nNext:")
    for command, comment in steps:
        print(f"  {command.ljust(width)}   # {comment}")
    return 0
