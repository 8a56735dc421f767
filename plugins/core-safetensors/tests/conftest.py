"""Fixtures of the core-safetensors tests: ``job`` runs a script of tests/scripts (see safetensors_jobs.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
from safetensors_jobs import run_script


@pytest.fixture(scope="session")
def job() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs a script of tests/scripts as a job; see :func:`safetensors_jobs.run_script`."""
    return run_script
