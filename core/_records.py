"""Frozen records that cross the plugin contract, validated on construction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from core._errors import ConfigurationError

KINDS: Final = ("accelerator", "strategy", "precision", "environment", "checkpoint_io", "extension")
"""Every kind of plugin, in the order the resolver settles them."""

ENTRY_POINT_GROUPS: Final = {
    "accelerator": "core.accelerators",
    "strategy": "core.strategies",
    "precision": "core.precisions",
    "environment": "core.environments",
    "checkpoint_io": "core.checkpoint_io",
    "extension": "core.extensions",
}


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ConfigurationError(f"{attribute.name} must be >= 0, got {value}.")


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ConfigurationError(f"{attribute.name} must be >= 1, got {value}.")


@attrs.frozen
class ClusterInfo:
    """Where this process sits in the run: its ranks and the rendezvous address."""

    world_size: int = attrs.field(validator=_positive)
    global_rank: int = attrs.field(validator=_non_negative)
    local_rank: int = attrs.field(validator=_non_negative)
    node_rank: int = attrs.field(validator=_non_negative)
    main_address: str = attrs.field(default="127.0.0.1")
    main_port: int = attrs.field(default=0)

    def __attrs_post_init__(self) -> None:
        if self.global_rank >= self.world_size:
            raise ConfigurationError(
                f"global_rank {self.global_rank} is outside a world of size {self.world_size} "
                f"(expected 0 <= global_rank < world_size)."
            )
        if not 0 <= self.main_port <= 65535:
            raise ConfigurationError(f"main_port must be in 0..65535, got {self.main_port}.")

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0


def _as_rules(value: Mapping[str, Iterable[str]] | None) -> Mapping[str, frozenset[str]]:
    rules = {kind: frozenset(aliases) for kind, aliases in (value or {}).items()}
    unknown = sorted(set(rules) - set(KINDS))
    if unknown:
        raise ConfigurationError(f"Supports names unknown kinds {unknown}; expected some of {list(KINDS)}.")
    return rules


@attrs.frozen
class Supports:
    """What a plugin declares it works with; the resolver checks every pair of the active set.

    ``only={"accelerator": {"cuda"}}`` accepts nothing else of that kind; ``never={"strategy": {"dp"}}``
    rejects those aliases. Kinds not named are unconstrained. ``hint`` says what to use instead and
    ends up in the error message.
    """

    only: Mapping[str, frozenset[str]] = attrs.field(factory=dict, converter=_as_rules)
    never: Mapping[str, frozenset[str]] = attrs.field(factory=dict, converter=_as_rules)
    hint: str = ""

    def allows(self, kind: str, name: str) -> bool:
        if name in self.never.get(kind, ()):
            return False
        allowed = self.only.get(kind)
        return allowed is None or name in allowed

    def describe(self) -> str:
        parts = [f"only {kind} {sorted(names)}" for kind, names in sorted(self.only.items())]
        parts += [f"never {kind} {sorted(names)}" for kind, names in sorted(self.never.items())]
        return "; ".join(parts) or "any combination"


SUPPORTS_ANYTHING: Final = Supports()


@attrs.frozen
class ResolvedConfig:
    """The outcome of resolution: one alias per kind, the extensions, and the process layout."""

    accelerator: str
    strategy: str
    precision: str
    environment: str
    checkpoint_io: str
    extensions: tuple[str, ...]
    device_ids: tuple[int, ...] = attrs.field(converter=tuple)
    num_nodes: int = attrs.field(validator=_positive)
    distributions: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def devices_per_node(self) -> int:
        return len(self.device_ids)

    @property
    def world_size(self) -> int:
        return self.devices_per_node * self.num_nodes

    def summary(self) -> str:
        rows = [
            (kind, getattr(self, kind), self.distributions.get(kind, "?"))
            for kind in ("accelerator", "strategy", "precision", "environment", "checkpoint_io")
        ]
        rows += [("extension", alias, self.distributions.get(f"extension:{alias}", "?")) for alias in self.extensions]
        lines = [f"  {kind:<14} {alias:<24} ({dist})" for kind, alias, dist in rows]
        lines.append(
            f"  {'devices':<14} {list(self.device_ids)} x {self.num_nodes} node(s) = world size {self.world_size}"
        )
        return "\n".join(lines)
