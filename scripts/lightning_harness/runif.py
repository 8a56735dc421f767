"""The harness's ``RunIf`` (Lightning's ``tests_*/helpers/runif.py`` reads Lightning's internal import flags)."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import pytest
import torch
from packaging.version import Version


def _missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


def RunIf(**kwargs: Any) -> pytest.MarkDecorator:
    """``pytest.mark.skipif`` with the reasons Lightning's ``RunIf`` gives, from what this machine has."""
    reasons: list[str] = []
    torch_version = Version(torch.__version__.split("+")[0])
    gpus = kwargs.get("min_cuda_gpus", 0)
    if gpus and torch.cuda.device_count() < gpus:
        reasons.append(f"GPUs>={gpus}")
    if kwargs.get("min_torch") and torch_version < Version(kwargs["min_torch"]):
        reasons.append(f"torch>={kwargs['min_torch']}")
    if kwargs.get("max_torch") and torch_version >= Version(kwargs["max_torch"]):
        reasons.append(f"torch<{kwargs['max_torch']}")
    if kwargs.get("min_python") and sys.version_info < tuple(int(p) for p in kwargs["min_python"].split(".")):
        reasons.append(f"python>={kwargs['min_python']}")
    if kwargs.get("bf16_cuda") and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
        reasons.append("CUDA with bf16")
    if kwargs.get("tpu"):
        reasons.append("TPU")
    if kwargs.get("mps") is True:
        reasons.append("MPS")
    if kwargs.get("standalone") and os.getenv("PL_RUN_STANDALONE_TESTS", "0") != "1":
        reasons.append("standalone mode")
    for flag, module in (("deepspeed", "deepspeed"), ("rich", "rich"), ("omegaconf", "omegaconf"),
                         ("psutil", "psutil"), ("sklearn", "sklearn"), ("onnx", "onnx"),
                         ("onnxscript", "onnxscript"), ("tensorrt", "torch_tensorrt")):
        if kwargs.get(flag) and _missing(module):
            reasons.append(module)
    marker_kwargs = {"standalone": True} if kwargs.get("standalone") else {}
    return pytest.mark.skipif(condition=bool(reasons), reason=f"Requires: [{' + '.join(reasons)}]", **marker_kwargs)


_xfail_gloo_windows = pytest.mark.skipif(False, reason="not Windows")
