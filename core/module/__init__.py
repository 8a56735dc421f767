"""``Module`` and ``DataModule``: the model and the data of a :class:`core.Trainer` run.

A ``Module`` is a ``torch.nn.Module`` that also says how to train itself: ``training_step`` returns the loss,
``configure_optimizers`` returns the optimizers, and the ``on_*`` hooks let it act at every point of the
loops (their order is listed in ``docs/trainer-module.md``). Outside a Trainer it is a plain ``nn.Module``.

A ``DataModule`` gathers the data side: ``prepare_data`` (download once per node), ``setup(stage)`` (build the
datasets in every process) and the four ``*_dataloader`` methods.
"""

from core.module._hparams import AttributeDict
from core.module._module import DataModule, MetricSink, Module, TrainerView
from core.module._trainer_objects import StatefulList, StepModule

__all__ = ["AttributeDict", "DataModule", "MetricSink", "Module", "StatefulList", "StepModule", "TrainerView"]
