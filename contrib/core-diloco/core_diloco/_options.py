"""``DiLoCoOptions``: how often the groups meet, and what they do when they do (a checked record)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from core import ConfigurationError
from core.toolkit import is_whole

if TYPE_CHECKING:
    import torch

OuterOptimizerFactory = Callable[[Sequence["torch.Tensor"]], "torch.optim.Optimizer"]

OUTER_OPTIMIZERS: Final = ("nesterov", "sgd")
"""Outer optimizers by name: ``nesterov`` (the paper's: SGD with Nesterov momentum) and ``sgd`` (heavy-ball or none)."""

COMPRESSIONS: Final = ("none", "bf16", "int8")
"""How a pseudo-gradient travels between groups: float32, bfloat16, or int8 with one float32 scale per tensor."""


def _whole(minimum: int) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not is_whole(value, minimum):
            raise ConfigurationError(
                f"DiLoCoExtension({attribute.name}={value!r}) must be a whole number >= {minimum}."
            )

    return check


def _one_of(choices: tuple[str, ...]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, str) and value in choices:
            return
        if attribute.name == "outer_optimizer" and callable(value):
            return
        also = " or a callable taking the parameters and returning a torch.optim.Optimizer" if (
            attribute.name == "outer_optimizer") else ""
        raise ConfigurationError(
            f"DiLoCoExtension({attribute.name}={value!r}) is not one of {', '.join(map(repr, choices))}{also}."
        )

    return check


def _non_negative(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigurationError(f"DiLoCoExtension({attribute.name}={value!r}) must be a number >= 0.")


@attrs.frozen
class DiLoCoOptions:
    """What the outer loop does; read when an optimizer is set up (``attrs.evolve`` makes a changed copy).

    :param sync_every: ``H``: inner optimizer steps between two synchronisations of a fragment (of the whole
        model when ``fragments`` is 1). The paper trains language models with ``H = 500``.
    :param outer_optimizer: ``"nesterov"`` (default, the paper's), ``"sgd"`` (momentum ``outer_momentum``, no
        Nesterov), or a callable ``params -> torch.optim.Optimizer`` over the copy of the parameters kept at the
        last synchronisation.
    :param outer_lr: The outer learning rate (0.7 in the paper).
    :param outer_momentum: The outer momentum (0.9 in the paper).
    :param fragments: Streaming DiLoCo: split the parameters into this many fragments of about equal size and
        synchronise one of them every ``sync_every / fragments`` steps, each still every ``sync_every`` steps.
    :param compression: ``"none"`` (float32), ``"bf16"`` or ``"int8"``: the pseudo-gradient's type on the wire.
    :param overlap: Send a fragment's pseudo-gradient without waiting for it, and apply the outer step on the
        next optimizer step, so the forward and backward passes in between overlap the communication. Default:
        on with ``fragments > 1`` (streaming), off otherwise.
    """

    sync_every: int = attrs.field(default=500, validator=_whole(1))
    outer_optimizer: str | OuterOptimizerFactory = attrs.field(
        default="nesterov", validator=_one_of(OUTER_OPTIMIZERS)
    )
    outer_lr: float = attrs.field(default=0.7, validator=_non_negative)
    outer_momentum: float = attrs.field(default=0.9, validator=_non_negative)
    fragments: int = attrs.field(default=1, validator=_whole(1))
    compression: str = attrs.field(default="none", validator=_one_of(COMPRESSIONS))
    overlap: bool | None = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        if self.fragments > self.sync_every:
            raise ConfigurationError(
                f"DiLoCoExtension(fragments={self.fragments}, sync_every={self.sync_every}): each fragment is "
                f"synchronised every sync_every steps, one fragment at a time, so fragments can be at most "
                f"sync_every; pass fragments <= {self.sync_every} or a larger sync_every."
            )
        if self.overlap not in (None, True, False):
            raise ConfigurationError(f"DiLoCoExtension(overlap={self.overlap!r}) must be True, False or None.")

    @property
    def overlaps(self) -> bool:
        """Whether a synchronisation is sent without waiting (``overlap``, or streaming by default)."""
        return self.fragments > 1 if self.overlap is None else self.overlap

    def due(self, inner_steps: int) -> int | None:
        """The fragment to synchronise after ``inner_steps`` inner steps, or ``None``.

        Fragment ``f`` goes at the steps ``t`` with ``t % H == ((f + 1) * H // fragments) % H``: evenly staggered,
        the last fragment on the multiples of ``H`` (with one fragment, plain DiLoCo: every ``H`` steps).
        """
        phase = inner_steps % self.sync_every
        for fragment in range(self.fragments):
            if (fragment + 1) * self.sync_every // self.fragments % self.sync_every == phase:
                return fragment
        return None
