"""The loop position in samples (core/trainer/_samples.py), in one process: the order, the remainder's rules, what
a checkpoint records, and older checkpoints. Real resizes on 2 processes: test_fault_tolerance_resize.py."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import core
from core import CoreWarning
from core.builtin.checkpoint_io import TorchCheckpointIO
from core.callbacks import Callback
from core.fault_tolerance import FaultTolerance, ResumableCheckpoints
from core.trainer._samples import EpochOrder, EpochSamples, RemainderSampler

SAMPLES = 13
BATCH = 2


@pytest.fixture(autouse=True)
def _fresh_seed_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS", "LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(variable, raising=False)
    yield


class Ids(Dataset[int]):
    """Each item is its own index, so that what a loop trained on can be counted."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> int:
        return index


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_an_epoch_dealt_from_its_start_is_what_a_distributed_sampler_deals(shuffle: bool, drop_last: bool) -> None:
    for world in (1, 2, 3, 5):
        for rank in range(world):
            sampler: DistributedSampler[int] = DistributedSampler(
                Ids(), world, rank, shuffle=shuffle, seed=3, drop_last=drop_last
            )
            sampler.set_epoch(4)
            remainder = RemainderSampler(EpochOrder(SAMPLES, shuffle, 3, 4), 0, world, rank, drop_last)
            assert list(remainder) == list(sampler) and len(remainder) == len(sampler)


def trained_share(sampler: Any, drop_last: bool, batches: int | None = None) -> list[int]:
    """What a rank trains of its share: whole batches only with drop_last, the first ``batches`` of them if given."""
    share = list(sampler)
    if drop_last:
        share = share[: len(share) // BATCH * BATCH]
    return share if batches is None else share[: batches * BATCH]


@pytest.mark.parametrize("drop_last", [False, True])
def test_any_resize_in_the_middle_of_an_epoch_trains_each_remaining_sample_once(drop_last: bool) -> None:
    order = EpochOrder(SAMPLES, True, 3, 0)
    permutation = order.indices()
    for before in (1, 2, 3):
        samplers: list[DistributedSampler[int]] = [
            DistributedSampler(Ids(), before, rank, seed=3, drop_last=drop_last) for rank in range(before)
        ]
        for batches in range(1, len(trained_share(samplers[0], drop_last)) // BATCH):
            first = [index for sampler in samplers for index in trained_share(sampler, drop_last, batches)]
            position = EpochSamples(order, 0, before, BATCH, len(samplers[0])).position(batches)
            assert Counter(first) == Counter(permutation[: position.done]), "the position is a prefix of the order"
            for after in (1, 2, 3, 4):
                rest = [index for rank in range(after)
                        for index in trained_share(RemainderSampler(order, position.done, after, rank, drop_last),
                                                   drop_last)]
                remaining = SAMPLES - position.done
                if drop_last:  # a prefix of the order, each once; less than one global batch left out
                    kept = remaining // (after * BATCH) * after * BATCH
                    assert Counter(first + rest) == Counter(permutation[: position.done + kept])
                else:  # every sample once, and the remainder padded with its own first samples
                    padding = -remaining % after
                    extra = permutation[position.done : position.done + padding]
                    assert Counter(first + rest) == Counter(permutation) + Counter(extra)


# -- Older checkpoints: the loop position in batches only ------------------------------------------------------


def rewrite(path: Path, change: Any) -> None:
    """Load a checkpoint, let ``change`` edit it, save it back through the same checkpoint_io (checksums kept)."""
    io = TorchCheckpointIO()
    checkpoint = io.checkpoint_io_load(str(path), None, True)
    change(checkpoint)
    io.checkpoint_io_save(checkpoint, str(path), None)


def lite_epoch(directory: Path, stop_at: int = -1) -> list[int]:
    """One epoch of a Lite loop over :class:`Ids` (2 samples a batch, no shuffling), a checkpoint every 2 steps."""

    def loop(lite: core.Lite) -> list[int]:
        network = torch.nn.Linear(1, 1)
        model, optimizer = lite.setup(network, torch.optim.SGD(network.parameters(), lr=0.0))
        data = lite.setup_dataloaders(DataLoader(Ids(), batch_size=BATCH))
        state = {"model": model, "optimizer": optimizer}
        checkpoints = ResumableCheckpoints(lite, directory, every_n_steps=2, preemption_signals=())
        step = checkpoints.restore(state)
        seen: list[int] = []
        for ids in checkpoints.batches(data, checkpoints.epoch):
            seen += ids.tolist()
            step += 1
            checkpoints.maybe_save(state, step)
            if step == stop_at:
                break
        return seen

    seen: list[int] = core.Lite(accelerator="cpu", devices=1).launch(loop)
    return seen


def test_a_lite_checkpoint_records_the_samples_its_ranks_consumed(tmp_path: Path) -> None:
    assert lite_epoch(tmp_path, stop_at=4) == list(range(8))
    saved = TorchCheckpointIO().checkpoint_io_load(str(tmp_path / "step-000000004" / "checkpoint.pt"), None, True)
    assert saved["core/resume"]["samples"] == {"format": "core.samples/1", "length": SAMPLES, "shuffle": False,
                                               "seed": 0, "epoch": 0, "done": 8, "replicas": 1, "start": 0}


def test_a_resized_epoch_saved_again_goes_on_from_its_samples(tmp_path: Path) -> None:
    assert lite_epoch(tmp_path, stop_at=2) == [0, 1, 2, 3]

    def as_from_two_processes(checkpoint: dict[str, Any]) -> None:  # each of 2 ranks read 2 of the 4 samples
        checkpoint["core/resume"]["world_size"] = 2
        checkpoint["core/resume"]["samples"]["replicas"] = 2

    rewrite(tmp_path / "step-000000002" / "checkpoint.pt", as_from_two_processes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoreWarning)
        assert lite_epoch(tmp_path, stop_at=4) == [4, 5, 6, 7], "the remainder of the order, on 1 process"
        saved = TorchCheckpointIO().checkpoint_io_load(str(tmp_path / "step-000000004" / "checkpoint.pt"), None, True)
        assert saved["core/resume"]["samples"]["done"] == 8 and saved["core/resume"]["samples"]["start"] == 4
        # Dealt from sample 4, not from the epoch's start: the same world size goes on from the samples too.
        assert lite_epoch(tmp_path) == list(range(8, SAMPLES))


def test_an_older_lite_checkpoint_from_another_world_size_skips_batches_and_warns(tmp_path: Path) -> None:
    assert lite_epoch(tmp_path, stop_at=2) == [0, 1, 2, 3]

    def as_older_from_two_processes(checkpoint: dict[str, Any]) -> None:
        del checkpoint["core/resume"]["samples"]
        checkpoint["core/resume"]["world_size"] = 2

    rewrite(tmp_path / "step-000000002" / "checkpoint.pt", as_older_from_two_processes)
    with pytest.warns(CoreWarning, match="resuming a checkpoint saved on 2 process") as caught:
        resumed = lite_epoch(tmp_path)
    message = str(caught[0].message)
    assert "records the loop position in batches only" in message
    assert "skips 2 batch(es) of this world's order" in message and "trained twice or not at all" in message
    assert resumed == list(range(4, SAMPLES)), "as before: the batches the checkpoint counted are skipped"


class Recorder(core.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(1, 1)
        self.seen: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen += batch.tolist()
        return self.net(batch.float().unsqueeze(1)).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


class Crash(Callback):
    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.at_step:
            raise KeyboardInterrupt(f"crash at step {self.at_step}")


def trainer_epoch(root: Path, *callbacks: Callback, module: Recorder | None = None) -> Recorder:
    module = module or Recorder()
    trainer = core.Trainer(accelerator="cpu", max_epochs=1, default_root_dir=root, logger=False,
                           enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                           callbacks=[FaultTolerance(root / "resumable", every_n_train_steps=2), *callbacks])
    trainer.fit(module, DataLoader(Ids(), batch_size=BATCH))
    return module


def test_a_trainer_checkpoint_records_the_samples_and_an_older_one_from_another_world_size_warns(
    tmp_path: Path,
) -> None:
    with pytest.raises(KeyboardInterrupt):
        trainer_epoch(tmp_path, Crash(2))
    path = tmp_path / "resumable" / "step-000000002" / "checkpoint.pt"
    saved = TorchCheckpointIO().checkpoint_io_load(str(path), None, True)
    assert saved["sample_position"] == {"format": "core.samples/1", "length": SAMPLES, "shuffle": False,
                                        "seed": 0, "epoch": 0, "done": 4, "replicas": 1, "start": 0}

    def as_older_from_two_processes(checkpoint: dict[str, Any]) -> None:
        del checkpoint["sample_position"]
        for key in ("rng", "rng_epoch_start"):  # one row of generator states per rank that saved it
            checkpoint[key] = {name: torch.cat([rows, rows]) for name, rows in checkpoint[key].items()}

    rewrite(path, as_older_from_two_processes)
    with pytest.warns(CoreWarning, match="resuming a checkpoint saved on 2 process") as caught:
        resumed = trainer_epoch(tmp_path)
    assert "skips 2 batch(es) of this world's order" in str(caught[0].message)
    assert resumed.seen == list(range(4, SAMPLES)), "as before: the batches the checkpoint counted are skipped"


def test_a_trainer_epoch_resumed_on_the_same_world_size_counts_its_samples_from_the_epochs_start(
    tmp_path: Path,
) -> None:
    with pytest.raises(KeyboardInterrupt):
        trainer_epoch(tmp_path, Crash(2))
    resumed = Recorder()
    with pytest.raises(KeyboardInterrupt):
        trainer_epoch(tmp_path, Crash(4), module=resumed)
    assert resumed.seen == [4, 5, 6, 7]
    saved = TorchCheckpointIO().checkpoint_io_load(
        str(tmp_path / "resumable" / "step-000000004" / "checkpoint.pt"), None, True
    )
    assert (saved["loops"]["batches_done"], saved["sample_position"]["done"]) == (4, 8)
