"""core's conformance kit for extensions, with diloco on 2 ddp processes (2 groups of 1): every hook is a wrapper,
the collectives, training and a checkpoint round trip (each group gets its own state back)."""

from core.testing import ExtensionConformance


class TestDiLoCoExtension(ExtensionConformance):
    alias = "diloco"
    strategy = "ddp"
    devices = 2
