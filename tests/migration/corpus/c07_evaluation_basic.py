# Source: Lightning-AI/pytorch-lightning docs/source-pytorch/common/evaluation_basic.rst (test and validation loops)
# over the model of docs/source-pytorch/model/train_model_basic.rst, commit be98784a1a03581b7051a355ae1084fd352d7cea (tag 2.6.5).
# Changes: the import lines (torchvision -> _offline_vision, offline MNIST; lightning -> core.lightning); the page's
# "..." filled in from train_model_basic.rst (imports, Encoder/Decoder, __init__, training_step,
# configure_optimizers; LitAutoEncoder(...) -> LitAutoEncoder(Encoder(), Decoder())); the page's two Trainer()
# blocks kept in order after fit (the test block comes first on the page, but tests the trained model) (README.md).
import os
import torch
from torch import nn
import torch.nn.functional as F
import torch.utils.data as data
from _offline_vision import datasets
import _offline_vision.transforms as transforms
from torch.utils.data import DataLoader
import core.lightning as L
from core.lightning.pytorch import Trainer


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Sequential(nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 3))

    def forward(self, x):
        return self.l1(x)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 28 * 28))

    def forward(self, x):
        return self.l1(x)


class LitAutoEncoder(L.LightningModule):
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def training_step(self, batch, batch_idx):
        # training_step defines the train loop.
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        loss = F.mse_loss(x_hat, x)
        return loss

    def validation_step(self, batch, batch_idx):
        # this is the validation loop
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        val_loss = F.mse_loss(x_hat, x)
        self.log("val_loss", val_loss)

    def test_step(self, batch, batch_idx):
        # this is the test loop
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        test_loss = F.mse_loss(x_hat, x)
        self.log("test_loss", test_loss)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        return optimizer


# Load data sets
transform = transforms.ToTensor()
train_set = datasets.MNIST(root="MNIST", download=True, train=True, transform=transform)
test_set = datasets.MNIST(root="MNIST", download=True, train=False, transform=transform)

# use 20% of training data for validation
train_set_size = int(len(train_set) * 0.8)
valid_set_size = len(train_set) - train_set_size

# split the train set into two
seed = torch.Generator().manual_seed(42)
train_set, valid_set = data.random_split(train_set, [train_set_size, valid_set_size], generator=seed)

train_loader = DataLoader(train_set)
valid_loader = DataLoader(valid_set)

model = LitAutoEncoder(Encoder(), Decoder())

# train with both splits
trainer = L.Trainer()
trainer.fit(model, train_loader, valid_loader)

# initialize the Trainer
trainer = Trainer()

# test the model
trainer.test(model, dataloaders=DataLoader(test_set))
