"""core's pytest plugin (the ``pytest11`` entry point ``core``): registers the markers that ``core.testing``'s
conformance kits put on their tests, so a plugin's own test suite runs the kits under ``--strict-markers``.

It imports nothing: pytest loads it in every session of an environment where core is installed.
"""

from __future__ import annotations

from typing import Any

MARKERS = ("distributed: starts several processes that talk over gloo on loopback (core.testing's conformance kits)",)


def pytest_configure(config: Any) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
