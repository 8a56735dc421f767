"""``python -m core.checkpoint``: converting checkpoints between the installed checkpoint_io formats.

``python -m core.checkpoint convert SOURCE TARGET`` reads ``SOURCE`` with the checkpoint_io that wrote it (found
from what is on disk, or named with ``--from``) and writes ``TARGET`` with another (``--to``): a ``distributed``
(core-dcp) directory becomes Hugging Face weights with the ``safetensors`` checkpoint_io (core-safetensors), and
back. The formats are plugins, loaded through their entry points like any other; this module imports none of them
until a conversion names it. See docs/checkpointing.md.
"""

from __future__ import annotations

from core.checkpoint._cli import convert, detect_format, main

__all__ = ["convert", "detect_format", "main"]
