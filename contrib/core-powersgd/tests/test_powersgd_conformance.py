"""core's conformance kit for extensions, with powersgd on 2 ddp processes: collectives, training, checkpoints."""

from core.testing import ExtensionConformance


class TestPowerSGDExtension(ExtensionConformance):
    alias = "powersgd"
    strategy = "ddp"
    devices = 2
