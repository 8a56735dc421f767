"""The ``Trainer``: fit / validate / test / predict loops for a :class:`core.Module`, on top of ``Lite``.

``TrainerConfig`` is the type of ``trainer.config`` (the validated flags) and ``RunState`` the type of
``trainer.run_state`` (what a run's loops, checkpointing and the Module's ``self.log`` share).
"""

from __future__ import annotations

from core.trainer._config import TrainerConfig
from core.trainer._state import RunState
from core.trainer._trainer import Trainer

__all__ = ["RunState", "Trainer", "TrainerConfig"]
