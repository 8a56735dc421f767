"""Seeding every random number generator a training run draws from, including DataLoader workers.

The seed is also exported as ``CORE_GLOBAL_SEED`` (and the worker choice as ``CORE_SEED_WORKERS``) so
that processes started from this one (``ddp_spawn``) and samplers built later agree on it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import warnings
from typing import Final

import torch

from core._checks import is_whole
from core._errors import ConfigurationError, CoreWarning

SEED_VARIABLE: Final = "CORE_GLOBAL_SEED"
WORKERS_VARIABLE: Final = "CORE_SEED_WORKERS"
MAX_SEED: Final = 2**32 - 1  # numpy's limit; torch and random accept it too

log = logging.getLogger("core")


def _check_seed(seed: object, source: str) -> int:
    if not is_whole(seed, 0) or seed > MAX_SEED:
        raise ConfigurationError(f"Invalid seed {source}={seed!r}: expected a whole number in 0..{MAX_SEED}.")
    return seed


def _seed_numpy(seed: int) -> None:
    try:
        import numpy
    except ImportError:  # numpy is optional; nothing to seed without it
        return
    numpy.random.seed(seed % (MAX_SEED + 1))


def _seed_generators(seed: int) -> None:
    random.seed(seed)
    _seed_numpy(seed)
    torch.manual_seed(seed)  # every device's generator too


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed ``random``, ``numpy`` and ``torch`` (every device) in this process and return the seed.

    :param seed: A whole number in ``0..2**32 - 1``. ``None`` takes ``CORE_GLOBAL_SEED`` from the
        environment, or 0 with a warning.
    :param workers: Also seed each DataLoader worker that ``Lite.setup_dataloaders`` prepares, from the
        seed, the worker's id and the process's global rank (so workers and ranks differ, runs repeat).
    :param verbose: Log the seed on the ``core`` logger.
    """
    if seed is None:
        from_environment = os.environ.get(SEED_VARIABLE, "")
        if from_environment.strip():
            try:
                seed = int(from_environment)
            except ValueError:
                raise ConfigurationError(
                    f"The environment variable {SEED_VARIABLE}={from_environment!r} is not a whole number."
                ) from None
            seed = _check_seed(seed, SEED_VARIABLE)
        else:
            seed = 0
            warnings.warn(f"seed_everything() got no seed and {SEED_VARIABLE} is unset; seeding with 0.", CoreWarning,
                          stacklevel=2)
    seed = _check_seed(seed, "seed")
    os.environ[SEED_VARIABLE] = str(seed)
    os.environ[WORKERS_VARIABLE] = "1" if workers else "0"
    _seed_generators(seed)
    if verbose:
        log.info("Seed set to %d", seed)
    return seed


def reset_seed() -> None:
    """Seed this process again from ``CORE_GLOBAL_SEED``, if a parent process set it (a spawned rank)."""
    raw = os.environ.get(SEED_VARIABLE, "").strip()
    if raw:
        seed_everything(int(raw), workers=seeds_workers(), verbose=False)


def global_seed() -> int:
    """The seed given to :func:`seed_everything` in this process or its parent, 0 when none was."""
    raw = os.environ.get(SEED_VARIABLE, "").strip()
    return int(raw) if raw.isdigit() else 0


def seeds_workers() -> bool:
    """Whether :func:`seed_everything` was asked to seed DataLoader workers."""
    return os.environ.get(WORKERS_VARIABLE) == "1"


def _derive_seeds(*numbers: int, count: int) -> list[int]:
    """``count`` independent 64-bit seeds from ``numbers``: a hash, so nearby inputs give unrelated seeds."""
    digest = hashlib.blake2b(repr(numbers).encode(), digest_size=8 * count).digest()
    return [int.from_bytes(digest[8 * i : 8 * i + 8], "little") for i in range(count)]


def worker_init_function(worker_id: int, rank: int = 0) -> None:
    """Seed one DataLoader worker from the loader's base seed, the worker id and the global rank.

    Without it, every rank's worker ``i`` starts from the same seed, so ranks would draw the same random
    augmentations. Used as ``worker_init_fn`` by ``Lite.setup_dataloaders`` after
    ``seed_everything(..., workers=True)``.
    """
    # PyTorch seeds worker i with base_seed + i; recover the base seed to mix all three inputs.
    base_seed = torch.initial_seed() - worker_id
    torch_seed, random_seed, numpy_seed = _derive_seeds(base_seed, worker_id, rank, count=3)
    torch.manual_seed(torch_seed)
    random.seed(random_seed)
    _seed_numpy(numpy_seed)
