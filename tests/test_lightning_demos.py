"""core.lightning.pytorch.demos behaves as Lightning 2.6's demos: names, shapes, lengths, and training that learns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import core
from core.lightning.pytorch import demos
from core.lightning.pytorch.demos.boring_classes import (
    BoringDataModule,
    BoringModel,
    DemoModel,
    ManualOptimBoringModel,
    Net,
    RandomDataset,
    RandomDictDataset,
    RandomIterableDataset,
    RandomIterableDatasetWithLen,
)
from core.lightning.pytorch.demos.lstm import LightningLSTM, SequenceSampler
from core.lightning.pytorch.demos.mnist_datamodule import MNIST, MNISTDataModule
from core.lightning.pytorch.demos.transformer import LightningTransformer, Transformer, WikiText2


class Losses(core.Callback):
    """Every training step's loss, as training_step returned it."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.losses.append(float(loss.detach()))


def _trainer(tmp_path: Path, **flags: Any) -> core.Trainer:
    return core.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **flags)


def test_the_package_exports_lightnings_demo_names() -> None:
    assert sorted(demos.__all__) == sorted([
        "LightningLSTM", "SequenceSampler", "SimpleLSTM", "LightningTransformer", "Transformer", "WikiText2",
        "BoringModel", "BoringDataModule", "DemoModel",
    ])
    assert all(hasattr(demos, name) for name in demos.__all__)


def test_random_data_sets_have_lightnings_shapes_and_lengths() -> None:
    assert len(RandomDataset(32, 64)) == 64 and RandomDataset(32, 64)[3].shape == (32,)
    item = RandomDictDataset(5, 7)[0]
    assert set(item) == {"a", "b"} and torch.equal(item["b"], item["a"] + 2)
    assert len(list(RandomIterableDataset(4, 9))) == 9 and not hasattr(RandomIterableDataset(4, 9), "__len__")
    assert len(RandomIterableDatasetWithLen(4, 9)) == 9


def test_boring_model_and_data_module_match_lightnings() -> None:
    model = BoringModel()
    assert model(torch.randn(4, 32)).shape == (4, 2)
    [optimizer], [scheduler] = model.configure_optimizers()
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["lr"] == 0.1
    assert isinstance(scheduler, torch.optim.lr_scheduler.StepLR) and scheduler.step_size == 1
    assert set(model.training_step(torch.randn(2, 32), 0)) == {"loss"}
    assert set(model.validation_step(torch.randn(2, 32), 0)) == {"x"}
    assert len(model.train_dataloader()) == 64 and model.train_dataloader().batch_size == 1
    data = BoringDataModule()
    for stage, attribute in (("fit", "random_train"), ("validate", "random_val"), ("test", "random_test"),
                             ("predict", "random_predict")):
        data.setup(stage)
        assert len(getattr(data, attribute)) == 64
    assert len(data.random_full) == 256


def test_boring_model_fits_one_epoch_of_its_data_module(tmp_path: Path) -> None:
    # No loss check: with batch size 1 and lr 0.1 Lightning's BoringModel overshoots (it is for bug reports).
    torch.manual_seed(0)
    losses = Losses()
    model = BoringModel()
    before = model.layer.weight.detach().clone()
    trainer = _trainer(tmp_path, max_epochs=1, limit_val_batches=2, callbacks=[losses])
    trainer.fit(model, datamodule=BoringDataModule())
    assert len(losses.losses) == 64 and trainer.global_step == 64
    assert not torch.equal(before, model.layer.weight)


def test_manual_optimization_and_demo_model_train(tmp_path: Path) -> None:
    torch.manual_seed(0)
    manual = ManualOptimBoringModel()
    before = [p.detach().clone() for p in manual.parameters()]
    _trainer(tmp_path, max_steps=5, limit_val_batches=0).fit(manual)
    assert any(not torch.equal(a, b) for a, b in zip(before, manual.parameters(), strict=True))

    demo = DemoModel(out_dim=3, learning_rate=0.05)
    assert demo(torch.randn(2, 32)).shape == (2, 3)
    losses = Losses()
    loader = torch.utils.data.DataLoader(RandomDataset(32, 64), batch_size=8)
    _trainer(tmp_path, max_steps=16, callbacks=[losses]).fit(demo, train_dataloaders=loader)
    assert losses.losses[-1] < losses.losses[0]


def test_wikitext2_is_offline_synthetic_with_lightnings_item_layout(tmp_path: Path) -> None:
    dataset = WikiText2(data_dir=tmp_path, block_size=35)
    assert not (tmp_path / "wikitext-2.txt").exists()  # nothing downloaded or written
    assert len(dataset) == len(dataset.data) // 35 - 1 and len(dataset) > 1000
    inputs, target = dataset[3]
    assert inputs.shape == target.shape == (35,) and inputs.dtype == torch.int64
    assert torch.equal(inputs[1:], target[:-1])
    assert 400 < dataset.vocab_size <= 501 and "<eos>" in dataset.dictionary.word2idx
    again = WikiText2(data_dir=tmp_path)
    assert torch.equal(again.data, dataset.data)  # the same corpus every time


def test_wikitext2_reads_the_real_file_when_it_is_there(tmp_path: Path) -> None:
    (tmp_path / "wikitext-2.txt").write_text("the cat sat\non the mat\n")
    dataset = WikiText2(data_dir=tmp_path, block_size=2)
    assert dataset.dictionary.idx2word == ["the", "cat", "sat", "<eos>", "on", "mat"]
    assert dataset.data.tolist() == [0, 1, 2, 3, 4, 0, 5, 3]
    assert len(dataset) == 3


def test_transformer_returns_log_probabilities_of_lightnings_shape() -> None:
    model = Transformer(vocab_size=50, ninp=16, nhead=2, nhid=32, nlayers=1)
    inputs = torch.randint(50, (3, 7))
    output = model(inputs, inputs)
    assert output.shape == (3 * 7, 50)
    assert torch.allclose(output.exp().sum(-1), torch.ones(21), atol=1e-5)
    mask = model.generate_square_subsequent_mask(3)
    assert mask[0, 1] == float("-inf") and mask[1, 0] == 0


def test_lightning_transformer_learns_the_offline_corpus(tmp_path: Path) -> None:
    torch.manual_seed(0)
    dataset = WikiText2(data_dir=tmp_path)
    model = LightningTransformer(vocab_size=dataset.vocab_size)
    losses = Losses()
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True)
    _trainer(tmp_path, max_steps=15, callbacks=[losses]).fit(model, train_dataloaders=loader)
    first, last = sum(losses.losses[:5]) / 5, sum(losses.losses[-5:]) / 5
    assert last < first - 0.1, losses.losses  # seeded: about 6.2 -> 5.9


def test_sequence_sampler_continues_rows_from_batch_to_batch() -> None:
    sampler = SequenceSampler(list(range(10)), batch_size=3)
    batches = list(sampler)
    assert len(sampler) == len(batches) == 3
    assert batches == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]


def test_lightning_lstm_carries_its_state_across_steps(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LightningLSTM(vocab_size=WikiText2(data_dir=tmp_path).vocab_size)
    loader = model.train_dataloader()
    inputs, target = next(iter(loader))
    assert inputs.shape == target.shape == (20, 35)
    losses = Losses()
    _trainer(tmp_path, max_steps=2, gradient_clip_val=0.25, callbacks=[losses]).fit(model)
    assert len(losses.losses) == 2 and all(torch.isfinite(torch.tensor(losses.losses)))
    assert model.hidden is None  # reset by on_train_epoch_end when the run ended


def test_mnist_is_synthetic_offline_with_mnists_sizes(tmp_path: Path) -> None:
    train, test = MNIST(str(tmp_path), train=True), MNIST(str(tmp_path), train=False)
    assert len(train) == 60_000 and len(test) == 10_000  # type: ignore[arg-type]
    image, label = train[5]
    assert image.shape == (1, 28, 28) and isinstance(label, int) and 0 <= label < 10
    assert torch.equal(train[5][0], image) and not torch.equal(test[5][0], image)
    assert not any(tmp_path.iterdir())  # nothing downloaded
    with pytest.raises(IndexError):
        train[60_000]
    # Learnable: each image is nearest to its own class's mean image.
    samples = [train[i] for i in range(300)]
    means = torch.stack([torch.stack([x for x, y in samples if y == c]).mean(0) for c in range(10)])
    hits = sum(int(((means - x) ** 2).flatten(1).sum(1).argmin()) == y for x, y in samples)
    assert hits / len(samples) > 0.9
    assert Net()(torch.stack([x for x, _ in samples[:4]])).shape == (4, 10)


def test_mnist_data_module_splits_as_lightnings(tmp_path: Path) -> None:
    data = MNISTDataModule(data_dir=str(tmp_path), num_workers=0, batch_size=8)
    data.prepare_data()
    data.setup("fit")
    assert (len(data.dataset_train), len(data.dataset_val)) == (55_000, 5_000)
    images, labels = next(iter(data.train_dataloader()))
    assert images.shape == (8, 1, 28, 28) and labels.shape == (8,)
    assert data.num_classes == 10 and len(data.test_dataloader()) == 10_000 // 8
