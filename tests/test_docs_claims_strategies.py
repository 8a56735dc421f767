"""Claims of docs/strategies.md, docs/parallelism.md, docs/deepspeed.md, docs/memory.md and docs/precision.md that a
user acts on and no other test pins (issue 51): each test names the page and the claim it keeps true."""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

import core
from core.run import worker_environment
from core.toolkit.strategies import Communicator


def test_core_run_exports_torchruns_variables_and_the_options() -> None:
    """strategies.md, `python -m core.run`: torchrun's variables plus CORE_* describing the options."""
    options = argparse.Namespace(main_address="10.0.0.1", num_nodes=2, node_rank=1, accelerator="cpu",
                                 strategy="ddp", devices="2", precision="bf16-mixed")
    environment = worker_environment(options, local_rank=1, nprocs=2, port=29500)

    assert set(environment) == {
        "LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "CORE_ACCELERATOR", "CORE_STRATEGY", "CORE_DEVICES", "CORE_NUM_NODES", "CORE_PRECISION",
    }
    assert (environment["RANK"], environment["WORLD_SIZE"], environment["GROUP_RANK"]) == ("3", "4", "1")
    options.precision = None
    assert "CORE_PRECISION" not in worker_environment(options, local_rank=0, nprocs=2, port=29500)


def test_ddp_strategy_passes_other_ddp_arguments_on_and_refuses_comm_hooks() -> None:
    """strategies.md, `DDPStrategy` options: other DistributedDataParallel keywords go to it; comm hooks are refused."""
    core_ddp = pytest.importorskip("core_ddp")

    strategy = core_ddp.DDPStrategy(broadcast_buffers=False, static_graph=True)
    assert strategy.ddp_kwargs == {"broadcast_buffers": False}
    assert "activation_checkpointing_policy" in inspect.signature(core_ddp.DDPStrategy).parameters
    with pytest.raises(core.ConfigurationError, match="ddp_comm_hook"):
        core_ddp.DDPStrategy(ddp_comm_hook=print)


def test_model_parallel_and_pipeline_need_no_core_ddp() -> None:
    """parallelism.md: both strategies start processes through the core's launcher; core-ddp is not a dependency."""
    for distribution in ("core-model-parallel", "core-pipeline"):
        try:
            requires = importlib.metadata.requires(distribution) or []
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{distribution} is not installed")
        runtime = [requirement for requirement in requires if "extra ==" not in requirement]
        assert not any(requirement.startswith("core-ddp") for requirement in runtime), (distribution, runtime)


def test_deepspeed_defaults_are_the_pages() -> None:
    """deepspeed.md, "Options and which wins", step 1 and 2: the defaults and the keywords, nothing else."""
    pytest.importorskip("core_deepspeed")

    active = core.resolve(accelerator="cpu", strategy="deepspeed", devices=2, precision="32-true")
    strategy: Any = active.plugins["strategy"]
    assert strategy.config == {
        "zero_allow_untested_optimizer": True,
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 2**31 - 1,
        "zero_optimization": {"stage": 2},
    }


def test_fsdp_broadcasts_the_initial_values_by_default() -> None:
    """memory.md, FSDP's options: sync_module_states defaults to True."""
    core_fsdp = pytest.importorskip("core_fsdp")

    assert inspect.signature(core_fsdp.FSDPStrategy).parameters["sync_module_states"].default is True


@pytest.mark.parametrize(("precision", "accelerators"), [("fp8", {"mps", "tpu"}), ("nf4", {"tpu"}), ("int8", {"tpu"})])
def test_structural_precisions_refuse_the_accelerators_the_page_names(precision: str, accelerators: set[str]) -> None:
    """precision.md: float8 refuses MPS and TPU; bitsandbytes refuses TPU."""
    try:
        plugin: Any = core.resolve(accelerator="cpu", precision=precision).plugins["precision"]
    except core.UnknownPluginError:
        pytest.skip(f"no plugin provides precision={precision!r} here")
    assert accelerators <= set(plugin.supports.never["accelerator"])


def test_collectives_send_half_floats_and_bools_as_float32_and_return_their_dtype() -> None:
    """strategies.md, Collectives: bf16, fp16 and bool come back in their dtype; the mean of ints or bools is
    floating point; the input is never modified (one gloo process in this one, no launcher)."""
    if dist.is_initialized():
        pytest.skip("a process group exists in this process already")
    dist.init_process_group("gloo", store=dist.HashStore(), world_size=1, rank=0)
    try:
        communicator = Communicator(0, timedelta(seconds=30))
        for dtype in (torch.bfloat16, torch.float16, torch.bool):
            tensor = torch.ones(3, dtype=dtype)
            assert communicator.reduce(tensor, None, "sum").dtype == dtype
        assert communicator.reduce(torch.ones(3, dtype=torch.bfloat16), None, "mean").dtype == torch.bfloat16
        for dtype in (torch.int64, torch.bool):
            assert communicator.reduce(torch.ones(3, dtype=dtype), None, "mean").is_floating_point()
        tensor = torch.ones(3)
        result = communicator.reduce(tensor, None, "sum")
        assert result is not tensor and result.data_ptr() != tensor.data_ptr()
    finally:
        dist.destroy_process_group()
