"""core.testing: the conformance kit plugin authors run in their own test suites.

One base class per kind. Subclass it in a class whose name starts with ``Test``, say which plugin to
test, and pytest collects the inherited tests::

    from core.testing import StrategyConformance


    class TestMine(StrategyConformance):
        alias = "mine"          # the installed entry point; or plugin_factory = "core_mine:MineStrategy"

Needs pytest (and, for the timeouts of the distributed tests, pytest-timeout). ``import core`` never
imports this package. Two public submodules go with the kit: :mod:`core.testing.sockets` (a watch over the
sockets of a job's processes, for tests that it stays on loopback; needs psutil) and
:mod:`core.testing.import_contracts` (the import-linter contract that keeps a plugin on the public API).
"""

import importlib.util as _importlib_util

from core._errors import CoreError as _CoreError


class KitRequirementError(_CoreError, ModuleNotFoundError):
    """``core.testing`` was imported where pytest is not installed (also a ``ModuleNotFoundError``, for tools that
    skip on it)."""


if _importlib_util.find_spec("pytest") is None:
    raise KitRequirementError(
        "core.testing is the conformance kit, which runs under pytest, and pytest is not installed in this environment "
        "(a plugin's runtime never needs it): pip install pytest pytest-timeout, or pip install 'core[test]'.",
        name="pytest",
    )

from core.testing._accelerator import AcceleratorConformance  # noqa: E402
from core.testing._base import Conformance  # noqa: E402
from core.testing._checkpoint_io import CheckpointIOConformance  # noqa: E402
from core.testing._distributed import DistributedRunConformance  # noqa: E402
from core.testing._environment import EnvironmentConformance  # noqa: E402
from core.testing._extension import ExtensionConformance  # noqa: E402
from core.testing._precision import PrecisionConformance  # noqa: E402
from core.testing._strategy import StrategyConformance  # noqa: E402

__all__ = [
    "AcceleratorConformance",
    "CheckpointIOConformance",
    "Conformance",
    "DistributedRunConformance",
    "EnvironmentConformance",
    "ExtensionConformance",
    "KitRequirementError",
    "PrecisionConformance",
    "StrategyConformance",
]
