"""Synthetic plugin distributions: many real ``*.dist-info`` entries on a temporary path entry."""

from __future__ import annotations

import os
from pathlib import Path

MODULE = '''
from core import hookimpl


class Extension:
    kind = "extension"
    name = "{alias}"

    @hookimpl(wrapper=True)
    def strategy_barrier(self, name):
        return (yield)


def factory():
    return Extension()
'''


def install_synthetic(site: Path, count: int) -> list[str]:
    """Write ``count`` distributions ``core-synthetic-N`` each with one extension ``synthetic_N``."""
    site.mkdir(parents=True, exist_ok=True)
    aliases = []
    for index in range(count):
        alias = f"synthetic_{index}"
        (site / f"core_synthetic_{index}.py").write_text(MODULE.replace("{alias}", alias))
        info = site / f"core_synthetic_{index}-1.0.0.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: core-synthetic-{index}\nVersion: 1.0.0\nRequires-Dist: core>=0.1,<0.2\n"
        )
        (info / "entry_points.txt").write_text(f"[core.extensions]\n{alias} = core_synthetic_{index}:factory\n")
        aliases.append(alias)
    return aliases


def env_with(site: Path) -> dict[str, str]:
    existing = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), existing]))}
