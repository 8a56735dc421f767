"""The GPU image's recorded packages (scripts/gpu_image.json) against core's and the plugins' requirements.

The GPU check's first real run failed on the machine: its image has pluggy 1.6.0, core requires >= 1.7, and nothing
carried a newer one; the dry run could not see it. Now it checks every requirement of the distributions the check
installs against the record plus the wheels ``make gpu-wheels`` carries, so such a mismatch fails here, in CI.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check_image", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_requirement_is_met_by_the_image_or_a_carried_wheel(gpu_check: ModuleType) -> None:
    image = json.loads(gpu_check.IMAGE.read_text())
    requirements = gpu_check.distribution_requirements()
    assert ("core", "pluggy>=1.7") in requirements
    problems, _ = gpu_check.requirements_against_image(image, gpu_check.carried_pins(), requirements)
    assert problems == []
    outcome = gpu_check.Outcome("install")
    assert gpu_check.check_image(outcome)
    assert outcome.detail[0].startswith("requirements against gpu_image.json (partial record): 0 unmet")


def test_the_check_would_have_caught_pluggy(gpu_check: ModuleType) -> None:
    image = json.loads(gpu_check.IMAGE.read_text())
    pins = {name: version for name, version in gpu_check.carried_pins().items() if name != "pluggy"}
    problems, _ = gpu_check.requirements_against_image(image, pins, gpu_check.distribution_requirements())
    assert problems == ["pluggy>=1.7 (needed by core): 1.6.0 in the image; carry a matching wheel (GPU_WHEEL_PINS)"]


def test_absent_and_unrecorded_packages(gpu_check: ModuleType) -> None:
    image = {"packages": {"attrs": None, "torch": "2.11.0+cu130"}}
    problems, unverified = gpu_check.requirements_against_image(
        image, {}, [("core", "attrs>=23.1"), ("core", "torch>=2.2"), ("core-x", "jsonargparse>=4")])
    assert unverified == ["attrs>=23.1 (needed by core): in the image, version not recorded"]
    assert problems == ["jsonargparse>=4 (needed by core-x): not in the image and not carried; add it to "
                        "GPU_WHEEL_PINS"]
    problems, _ = gpu_check.requirements_against_image(image, {}, [("core-fsdp", "torch>=2.12")])
    assert problems == ["torch>=2.12 (needed by core-fsdp): 2.11.0+cu130 in the image; carry a matching wheel "
                        "(GPU_WHEEL_PINS)"]


def test_the_makefile_carries_pluggy(gpu_check: ModuleType) -> None:
    assert gpu_check.carried_pins()["pluggy"] == "1.7.0"
