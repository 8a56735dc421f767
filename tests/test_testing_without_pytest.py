"""``import core.testing`` where pytest is missing: the project's error naming what to install."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import importlib.util, sys
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "pytest" else real(name, *a)
sys.modules["pytest"] = None  # a plain import of pytest fails as where it is not installed
try:
    import core.testing
except ModuleNotFoundError as error:
    import core
    print(type(error).__name__, isinstance(error, core.CoreError), error)
"""


def test_importing_the_kit_without_pytest_names_the_fix() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("KitRequirementError True core.testing is the conformance kit"), done
    assert "pip install pytest pytest-timeout" in done.stdout
