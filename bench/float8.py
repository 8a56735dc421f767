"""Float8 (core-torchao, emulated on this CPU) against bf16-mixed: the cost of the conversion and of a training step.

On a CPU torchao emulates float8 (``Float8LinearConfig(emulate=True)``): the rounding of float8 without its speed, so
these rows are reported, not claimed; the float8 speed-up is measured by bench/gpu_gpt.py's float8 section on a GPU.
In one process, alternating: ``Lite.setup`` of bench/gpu_gpt.py's GPT (every eligible layer converted) with
``fp8`` and with ``bf16-mixed``, then ``steps`` training steps of each; the medians are compared.
"""

from __future__ import annotations

import statistics
import time
import warnings
from typing import Any

import torch

from bench._harness import Result
from bench.gpu_gpt import GPT, Shape, loss_of

SHAPE = Shape(layers=2, dim=256, heads=4, context=64, vocab=1024, batch=8)
TINY_SHAPE = Shape(layers=1, dim=64, heads=4, context=16, vocab=256, batch=2)
_TARGET = "reported (emulated float8 is for correctness, not speed)"


def _precision(name: str) -> Any:
    if name == "bf16-mixed":
        return name
    from core_torchao import Float8Precision  # type: ignore[import-not-found,unused-ignore]

    from core.toolkit.precisions import LinearFilter

    return Float8Precision("fp8", layer_filter=LinearFilter(min_weight_elements=0))


def _measure(lite: Any, shape: Shape, steps: int) -> tuple[float, float]:
    torch.manual_seed(0)
    model = GPT(shape)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    started = time.perf_counter()
    module, optimizer = lite.setup(model, optimizer)
    setup = time.perf_counter() - started
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.context + 1), generator=torch.Generator().manual_seed(0))
    times = []
    for _ in range(steps + 1):  # the first step warms up
        started = time.perf_counter()
        optimizer.zero_grad()
        loss = loss_of(module(tokens[:, :-1]), tokens[:, 1:])
        lite.backward(loss)
        optimizer.step()
        times.append(time.perf_counter() - started)
    return setup, statistics.median(times[1:])


def run(steps: int) -> list[Result]:
    try:
        import core_torchao  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        print("  float8: skipped, core-torchao is not installed", flush=True)
        return []
    import core

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torchao.float8  # type: ignore[import-not-found,unused-ignore]  # noqa: F401  (not timed in setup)
    shape = TINY_SHAPE if steps < 5 else SHAPE
    samples: dict[str, list[tuple[float, float]]] = {"fp8": [], "bf16-mixed": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", core.CoreWarning)  # "runs float8 emulated": this is the CPU row
        for _ in range(3 if steps >= 5 else 1):
            for name in samples:
                lite = core.Lite(accelerator="cpu", devices=1, precision=_precision(name))
                samples[name].append(lite.launch(_measure, shape, steps))
    setup = {name: statistics.median(s for s, _ in values) for name, values in samples.items()}
    step = {name: statistics.median(t for _, t in values) for name, values in samples.items()}
    model = f"GPT {shape.layers}x{shape.dim}, batch {shape.batch}x{shape.context}"
    return [
        Result("float8 emulated (CPU): Lite.setup, fp8 vs bf16-mixed", setup["fp8"], setup["bf16-mixed"], "s",
               _TARGET, None, f"{model}; the conversion of every eligible Linear"),
        Result("float8 emulated (CPU): training step, fp8 vs bf16-mixed", step["fp8"], step["bf16-mixed"], "s",
               _TARGET, None, f"{model}; median of {steps} steps, eager"),
    ]
