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

from core.testing._accelerator import AcceleratorConformance
from core.testing._base import Conformance
from core.testing._checkpoint_io import CheckpointIOConformance
from core.testing._distributed import DistributedRunConformance
from core.testing._environment import EnvironmentConformance
from core.testing._extension import ExtensionConformance
from core.testing._precision import PrecisionConformance
from core.testing._strategy import StrategyConformance

__all__ = [
    "AcceleratorConformance",
    "CheckpointIOConformance",
    "Conformance",
    "DistributedRunConformance",
    "EnvironmentConformance",
    "ExtensionConformance",
    "PrecisionConformance",
    "StrategyConformance",
]
