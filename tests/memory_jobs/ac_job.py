"""``python ac_job.py OUT STRATEGY PARTS``: activation checkpointing and save-after-fit under a strategy, 2 ranks.

STRATEGY is ``ddp``, ``fsdp``, ``fsdp_full``, ``fsdp_hybrid`` (``_HYBRID_SHARD_ZERO2`` on a (2, 1) mesh),
``fsdp_hybrid4`` (``HYBRID_SHARD`` on a (2, 2) mesh of 4 ranks),
``model_parallel``, ``model_parallel_full``, ``deepspeed`` or ``deepspeed_full`` (``_full``: one gathered checkpoint
file instead of sharded ones; ZeRO-3 for deepspeed). PARTS is
``lite``, ``trainer`` or ``lite,trainer``:

1. Lite, the strategy given ``activation_checkpointing_policy={Block}``: a GPT made of ``Block`` s (checkpointed) and
   its twin made of ``ReferenceBlock`` s (not selected; same initial values) are set up side by side, take one
   backward on the same batch (bytes saved for backward counted) and one Adam step; the checkpointed one is saved,
   loaded into a fresh twin without checkpointing, both step again, and the twin's checkpoint goes back into a
   checkpointed model. Every rank writes OUT/lite-<rank>.json.
2. The Trainer with the same strategy (and policy) fits 3 steps, ``trainer.save_checkpoint`` after the fit, then
   a second Trainer resumes from it to 6 steps and a third fits 6 steps from scratch: rank 0 writes both final
   weights to OUT/trainer.pt (the resumed one must equal the uninterrupted one bitwise).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import core
from core.callbacks import Callback
from core.toolkit.strategies import saved_tensor_bytes

sys.path.insert(0, str(Path(__file__).parent))
from gpt import Block, ReferenceBlock, batch, gpt, loss_of


def whole(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach().cpu().clone()


def shard_blocks(module: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for block in [sub for sub in module.modules() if isinstance(sub, Block)]:  # the Trainer passes its StepModule
        fully_shard(block, mesh=mesh["data_parallel"])
    fully_shard(module, mesh=mesh["data_parallel"])
    return module


def strategy_of(name: str) -> Any:
    policy = {Block}
    full = name.endswith("_full")
    kind = name.removesuffix("_full")
    if kind == "ddp":
        from core_ddp import DDPStrategy

        return DDPStrategy(activation_checkpointing_policy=policy)
    if kind in ("fsdp", "fsdp_hybrid", "fsdp_hybrid4"):
        from core_fsdp import FSDPStrategy

        # fsdp_hybrid: Lightning's names, replicated across 2 x sharded within 1, parameters kept gathered from
        # forward to backward (reshard_after_forward=False) with the blocks checkpointed.
        hybrid: dict[str, Any] = (
            {"sharding_strategy": "_HYBRID_SHARD_ZERO2", "device_mesh": (2, 1)} if kind == "fsdp_hybrid" else
            {"sharding_strategy": "HYBRID_SHARD", "device_mesh": (2, 2)} if kind == "fsdp_hybrid4" else {})
        return FSDPStrategy(auto_wrap_policy={Block, ReferenceBlock}, activation_checkpointing_policy=policy,
                            state_dict_type="full" if full else "sharded", **hybrid)
    if kind == "model_parallel":
        from core_model_parallel import ModelParallelStrategy

        return ModelParallelStrategy(parallelize_fn=shard_blocks, data_parallel_size=2, tensor_parallel_size=1,
                                     save_distributed_checkpoint=not full, activation_checkpointing_policy=policy)
    from core_deepspeed import DeepSpeedStrategy

    return DeepSpeedStrategy(stage=3 if full else 2, activation_checkpointing_policy=policy)


def _set_up(lite: core.Lite, block: type[torch.nn.Module], seed: int) -> tuple[Any, Any]:
    model = gpt(seed, block)
    return lite.setup(model, torch.optim.Adam(model.parameters(), lr=1e-2))


def _step(lite: core.Lite, model: Any, optimizer: Any, seed: int) -> int:
    tokens, targets = batch(seed + lite.global_rank)
    with saved_tensor_bytes() as saved:
        loss = loss_of(model, tokens, targets)
    lite.backward(loss, model=model)
    optimizer.step()
    optimizer.zero_grad()
    return saved[0]


def _gradients(lite: core.Lite, model: Any, seed: int) -> dict[str, torch.Tensor]:
    tokens, targets = batch(seed + lite.global_rank)
    lite.backward(loss_of(model, tokens, targets), model=model)
    gradients = {name: whole(p.grad) for name, p in model.named_parameters() if p.grad is not None}
    for parameter in model.parameters():
        parameter.grad = None
    return gradients


def _weights(model: Any) -> dict[str, torch.Tensor]:
    return {name: whole(value) for name, value in model.state_dict().items()}


def _difference(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> float | None:
    if left.keys() != right.keys():
        return None
    return max(float((left[name].float() - right[name].float()).abs().max()) for name in left)


def _resume_in(lite: core.Lite, path: Path, model: Any, optimizer: Any, block: type[torch.nn.Module],
               seed: int) -> tuple[Any, Any, float | None]:
    """Save ``model``, load it into a fresh model made of ``block`` s, step both: the fresh one and the difference."""
    lite.save(path, {"model": model, "optimizer": optimizer})
    fresh, fresh_optimizer = _set_up(lite, block, seed + 10)
    lite.load(path, {"model": fresh, "optimizer": fresh_optimizer})
    _step(lite, model, optimizer, seed)
    _step(lite, fresh, fresh_optimizer, seed)
    return fresh, fresh_optimizer, _difference(_weights(model), _weights(fresh))


def lite_checks(lite: core.Lite, out: Path, name: str) -> None:
    deepspeed = name.startswith("deepspeed")
    checkpointed, checkpointed_optimizer = _set_up(lite, Block, 0)
    reference, reference_optimizer = _set_up(lite, ReferenceBlock, 0)
    first = next(iter(checkpointed.parameters()))
    report: dict[str, Any] = {
        "mesh_shape": list(first.device_mesh.shape) if hasattr(first, "device_mesh") else None,
        # The share of the first parameter this rank holds: 1/shards under fsdp, 1 where nothing is sharded.
        "held_fraction": first.to_local().numel() / first.numel() if hasattr(first, "to_local") else 1.0,
        "keys": list(checkpointed.state_dict()),
        "reference_keys": list(reference.state_dict()),
        # DeepSpeed's gradients live in its partitions, not in .grad: compared through the weights after a step.
        "gradient_difference": None if deepspeed else _difference(_gradients(lite, checkpointed, 1),
                                                                  _gradients(lite, reference, 1)),
    }
    report["saved_checkpointed"] = _step(lite, checkpointed, checkpointed_optimizer, 2)
    report["saved_reference"] = _step(lite, reference, reference_optimizer, 2)
    report["weight_difference"] = _difference(_weights(checkpointed), _weights(reference))

    # With -> without, then without -> with: a fresh model of the other kind loads the checkpoint, both take the
    # same step, and must be equal bitwise.
    fresh, fresh_optimizer, report["resumed_without_difference"] = _resume_in(
        lite, out / "with", checkpointed, checkpointed_optimizer, ReferenceBlock, 3)
    _, _, report["resumed_with_difference"] = _resume_in(lite, out / "without", fresh, fresh_optimizer, Block, 4)
    (out / f"lite-{lite.global_rank}.json").write_text(json.dumps(report))


class LanguageModel(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = gpt(0, Block)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        tokens, targets = batch
        return loss_of(self.model, tokens, targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class Final(Callback):
    """Keeps the whole trained weights at the end of the fit (gathered from the shards on every rank)."""

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.weights = {name: whole(value) for name, value in module.state_dict().items()}


def _fit(name: str, max_steps: int, ckpt_path: Path | None = None, save: Path | None = None) -> dict[str, Any]:
    tokens = torch.randint(0, 32, (12, 17), generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=2)  # 3 steps per epoch per rank
    final = Final()
    trainer = core.Trainer(accelerator="cpu", devices=2, strategy=strategy_of(name), max_steps=max_steps,
                           logger=False, enable_checkpointing=False, enable_progress_bar=False,
                           enable_model_summary=False, callbacks=[final])
    trainer.fit(LanguageModel(), data, ckpt_path=ckpt_path)
    if save is not None:
        trainer.save_checkpoint(save)
    return final.weights


def main(out: Path, name: str, parts: list[str]) -> None:
    if "lite" in parts:
        devices = 4 if name == "fsdp_hybrid4" else 2
        core.Lite(accelerator="cpu", devices=devices, strategy=strategy_of(name)).launch(lite_checks, out, name)
    if "trainer" not in parts:
        return
    checkpoint = out / "after-fit"
    _fit(name, 3, save=checkpoint)
    resumed = _fit(name, 6, ckpt_path=checkpoint)
    uninterrupted = _fit(name, 6)
    if os.environ.get("LOCAL_RANK", "0") == "0":  # the process that started the others: global rank 0
        torch.save({"resumed": resumed, "uninterrupted": uninterrupted}, out / "trainer.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(","))
