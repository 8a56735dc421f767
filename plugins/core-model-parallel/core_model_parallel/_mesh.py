"""The degrees of parallelism of a run: checked against its world size, then built into a named ``DeviceMesh``.

Two dimensions, outermost first: ``data_parallel`` across replicas, and an inner one whose ranks hold parts of one
model (``tensor_parallel`` here, ``pipeline_parallel`` in core-pipeline). Neighbouring global ranks share the
inner dimension, so with ``"auto"`` it spans the devices of a node (fast links) and data parallelism spans the
nodes, as Lightning's ``ModelParallelStrategy`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, TypeAlias

import attrs

from core import ConfigurationError
from core.toolkit import is_whole

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

AUTO: Final = "auto"
Size: TypeAlias = "int | Literal['auto']"
"""A degree of parallelism: a positive number of processes, or ``"auto"``."""

DATA_PARALLEL: Final = "data_parallel"


def check_size(owner: str, option: str, value: object) -> int | Literal["auto"]:
    """``value`` if it is ``"auto"`` or a positive int, else a :class:`core.ConfigurationError` naming it."""
    if value == AUTO:
        return AUTO
    if not is_whole(value, 1):
        raise ConfigurationError(f"{owner}({option}={value!r}): expected a positive number of processes or 'auto'.")
    return value


def _factorisations(world_size: int) -> list[tuple[int, int]]:
    return [(outer, world_size // outer) for outer in range(1, world_size + 1) if world_size % outer == 0]


@attrs.frozen
class MeshShape:
    """Named mesh dimensions, outermost first, whose sizes multiply to the world size."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]

    def __attrs_post_init__(self) -> None:
        if len(self.names) != len(self.sizes) or any(size < 1 for size in self.sizes):
            raise ConfigurationError(f"MeshShape(names={self.names}, sizes={self.sizes}): one positive size per name.")

    @property
    def world_size(self) -> int:
        product = 1
        for size in self.sizes:
            product *= size
        return product

    def size(self, name: str) -> int:
        return self.sizes[self.names.index(name)]

    def build(self, device_type: str) -> DeviceMesh:
        """The ``DeviceMesh`` of this shape over every rank (collective: call on every rank)."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(device_type, self.sizes, mesh_dim_names=self.names)

    def __str__(self) -> str:
        return " x ".join(f"{name}={size}" for name, size in zip(self.names, self.sizes, strict=True))


def mesh_shape(
    owner: str,
    inner: str,
    data_parallel_size: int | Literal["auto"],
    inner_size: int | Literal["auto"],
    devices_per_node: int,
    num_nodes: int,
) -> MeshShape:
    """The ``(data_parallel, inner)`` shape of a run, or an error printing every factor and the sizes that fit.

    :param owner: The strategy class, for messages (``"ModelParallelStrategy"``).
    :param inner: The inner dimension's name (``"tensor_parallel"``); its option is ``f"{inner}_size"``.
    :param data_parallel_size: ``"auto"``: the number of nodes, or what the inner size leaves.
    :param inner_size: ``"auto"``: the devices of a node, or what the data-parallel size leaves.
    """
    world_size = devices_per_node * num_nodes
    layout = f"devices={devices_per_node} per node x num_nodes={num_nodes}"
    outer, inner_value = data_parallel_size, inner_size
    if outer == AUTO and inner_value == AUTO:
        outer, inner_value = num_nodes, devices_per_node
    elif outer == AUTO or inner_value == AUTO:
        given_name, given = (DATA_PARALLEL, outer) if inner_value == AUTO else (inner, inner_value)
        assert isinstance(given, int)
        if world_size % given:
            raise ConfigurationError(
                f"{owner}({given_name}_size={given}) does not divide the world size {world_size} ({layout}), so the "
                f"other size cannot be derived. {_choices(inner, world_size)}"
            )
        outer, inner_value = (given, world_size // given) if inner_value == AUTO else (world_size // given, given)
    assert isinstance(outer, int) and isinstance(inner_value, int)
    if outer * inner_value != world_size:
        raise ConfigurationError(
            f"{owner}: {DATA_PARALLEL}_size ({outer}) x {inner}_size ({inner_value}) = {outer * inner_value}, but the "
            f"run has world size {world_size} ({layout}); the degrees of parallelism must multiply to the world "
            f"size. {_choices(inner, world_size)}"
        )
    return MeshShape((DATA_PARALLEL, inner), (outer, inner_value))


def built_mesh(mesh: DeviceMesh | None, alias: str, where: str) -> DeviceMesh:
    """A strategy's ``device_mesh``: ``mesh`` once the run's processes built it, else an error saying ``where``
    (e.g. "inside the launched function (lite.device_mesh)") the user can read it."""
    if mesh is None:
        raise ConfigurationError(
            f"The device mesh of {alias!r} exists once the run's processes are set up: read it {where}."
        )
    return mesh


def _choices(inner: str, world_size: int) -> str:
    options = "; ".join(
        f"{DATA_PARALLEL}_size={outer}, {inner}_size={rest}" for outer, rest in _factorisations(world_size)
    )
    return f"For {world_size} process(es) use one of: {options} (or give one of them and leave the other 'auto')."

