"""The version of the ``core`` distribution (``core.__version__``), in a module of its own so that the registry can
read it without importing the package's public surface (which names the whole runtime for type checkers)."""

__version__ = "0.1.0"
