"""``python compiled_train.py OUT STRATEGY``: a tiny MLP trained 6 steps under Lite, eager then compiled.

STRATEGY is an alias, ``fsdp_blocks`` (fsdp with each Dense layer its own unit), or ``model_parallel_1x2`` /
``model_parallel_2x1`` (data x tensor parallel: the first layer
column-wise and the last row-wise over the tensor dimension, ``fully_shard`` over the data dimension).
Both runs share one launch (one set of processes, so one start-up): first the eager model, then a fresh one passed
through ``torch.compile`` with a backend of the user's (inductor, recording the graphs it compiles) before
``lite.setup``. For each, global rank 0 writes OUT/{eager,compiled}/result.pt: the
full trained weights, the keys ``model.state_dict()`` (what ``lite.save`` writes) has, and
the weights read back from the checkpoint into a plain, uncompiled model.
"""

import sys
from pathlib import Path
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, TensorDataset

from core import Lite


class Dense(torch.nn.Linear):
    """A Linear whose forward is the user's: torch runs its own layers' forward eagerly when one is compiled alone in
    place (``nn.Linear().compile()`` captures no graph), as fsdp_blocks compiles its blocks."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return super().forward(input)


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(Dense(8, 32), torch.nn.Tanh(), Dense(32, 1))


GRAPHS: list[int] = []
"""The size of each graph the user's compile backend was given (see :func:`recording_inductor`)."""


def recording_inductor(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
    """The user's own compile backend: inductor, which records each graph it compiles. Lite must compile the set-up
    module with it (and the user's other settings), not with torch's default backend."""
    from torch._inductor.compile_fx import compile_fx

    GRAPHS.append(len(graph.graph.nodes))
    return compile_fx(graph, example_inputs)


def copies(lite: Lite) -> int:
    """How many ranks see different data: the data-parallel size under model_parallel, else the world size."""
    mesh = lite.device_mesh
    return mesh["data_parallel"].size() if mesh is not None else lite.world_size


def full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def parallelize(module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if mesh["tensor_parallel"].size() > 1:
        parallelize_module(module, mesh["tensor_parallel"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    if mesh["data_parallel"].size() > 1:
        fully_shard(module, mesh=mesh["data_parallel"])
    return module


def strategy_of(name: str) -> Any:
    if name == "fsdp_blocks":  # each Dense its own FSDP unit: the strategy compiles them one by one
        from core_fsdp import FSDPStrategy

        return FSDPStrategy(auto_wrap_policy={Dense})
    if not name.startswith("model_parallel_"):
        return name
    from core_model_parallel import ModelParallelStrategy

    data, tensor = (int(size) for size in name.removeprefix("model_parallel_").split("x"))
    return ModelParallelStrategy(data_parallel_size=data, tensor_parallel_size=tensor, parallelize_fn=parallelize)


def main(lite: Lite, out: Path) -> None:
    for mode in ("eager", "compiled"):
        train(lite, out / mode, compiled=mode == "compiled")


def train(lite: Lite, out: Path, compiled: bool) -> None:
    # torch.compile is typed as returning a plain Callable; at run time it is the OptimizedModule Lite takes.
    model = cast(torch.nn.Module, torch.compile(net(), backend=recording_inductor)) if compiled else net()
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(96, 8, generator=generator)
    loader = lite.setup_dataloaders(DataLoader(TensorDataset(inputs, inputs.sum(1, keepdim=True).sin()),
                                               batch_size=16 // copies(lite)))
    for features, targets in loader:
        optimizer.zero_grad()
        lite.backward(torch.nn.functional.mse_loss(model(features), targets), model=model)  # several engines: name it
        optimizer.step()
    weights = {name: full(value).detach().cpu() for name, value in model.state_dict().items()}
    lite.save(out / "checkpoint", {"model": model})
    plain = net()
    restored = lite.setup(plain)
    lite.load(out / "checkpoint", {"model": restored})
    reloaded = {name: full(value).detach().cpu() for name, value in restored.state_dict().items()}
    # Submodules compiled in place (torch.nn.Module.compile), as a strategy's strategy_compile does per block.
    blocks = [name for name, sub in model.module.named_modules() if getattr(sub, "_compiled_call_impl", None)]
    if lite.is_global_zero:
        torch.save({"weights": weights, "keys": list(model.state_dict()), "reloaded": reloaded,
                    "compiled_blocks": blocks, "graphs": list(GRAPHS)}, out / "result.pt")


if __name__ == "__main__":
    out, strategy = Path(sys.argv[1]), sys.argv[2]
    devices = 1 if strategy == "single_device" else 2
    Lite(accelerator="cpu", strategy=strategy_of(strategy), devices=devices).launch(main, out)
