"""``Tuner``: Lightning's learning-rate finder and batch-size scaler for :class:`core.Trainer`.

``Tuner(trainer).lr_find(model, ...)`` trains for ``num_training`` steps while the learning rate grows from
``min_lr`` to ``max_lr``, records the smoothed loss of each step, restores the weights, and suggests the learning
rate where the loss fell fastest (written to ``model.lr`` / ``model.learning_rate`` / ``model.hparams`` when
``update_attr``). ``Tuner(trainer).scale_batch_size(model, ...)`` runs a few steps with growing batch sizes until
one runs out of memory (or covers the whole dataset), restores the weights and keeps the largest that worked in
``model.batch_size`` (or ``hparams`` / the DataModule). Both run their trials as separate ``fit`` runs of a
Trainer with the same accelerator, strategy, devices and precision, with loggers, checkpoints and validation off.
"""

from __future__ import annotations

from core.tuner._tuner import LRFinder, Tuner

__all__ = ["LRFinder", "Tuner"]
