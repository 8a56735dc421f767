"""Imported at the start of every Python process of a test run: tests/conftest.py puts this directory first on the
``PYTHONPATH`` that the processes the tests start inherit (ranks, launchers, jobs, daemons written in Python).

The suite is CPU-bound on the 2-core CI machine, and most of its CPU goes to starting processes that import torch.
With CPython's default thresholds (700, 10, 10) the cyclic garbage collector runs hundreds of times while torch
and torch._dynamo import, most passes over a heap that only grows: about 0.4 s of the 3 s of CPU a small
training process costs here (a process building a Lite and an optimizer: 3.1 -> 2.7 s CPU, best of 6).
Collecting after 10,000 net allocations instead of 700 keeps collecting (cyclic garbage is still freed, a few
milliseconds of allocations later) and changes nothing else; a user's process keeps CPython's defaults.
"""

import gc

gc.set_threshold(10_000, 10, 10)
