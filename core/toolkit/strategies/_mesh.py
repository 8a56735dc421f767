"""``ParallelDims``: the degrees of parallelism of a run, checked together, and its one ``DeviceMesh``.

Five dimensions, outermost first (:data:`MESH_DIMENSIONS`): independent copies of the strategy side by side
(:data:`REPLICATE`, whose synchronisation an extension such as core-diloco owns), replicas of the model that average
their gradients every step, sharded or not (:data:`DATA_PARALLEL`: ``fully_shard``'s dimension), ranks splitting
each sequence (:data:`CONTEXT_PARALLEL`), consecutive stages of the model (:data:`PIPELINE_PARALLEL`), and parts of
each layer (:data:`TENSOR_PARALLEL`). Neighbouring global ranks share the inner dimensions, so the innermost spans a
node's devices (fast links) and the outer ones span the nodes, as Lightning's ``ModelParallelStrategy`` lays them
out. As torchtitan's ``ParallelDims``: the degrees are validated together against the world size, and the mesh is
built once per run, when the strategy asks for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import attrs

from core import ConfigurationError
from core.toolkit import is_whole

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

REPLICATE: Final = "replicate"
"""The outermost dimension of a strategy's device mesh when it runs as independent copies side by side
(:meth:`ParallelStrategy.replicate_outside <core.toolkit.strategies.ParallelStrategy.replicate_outside>`): each copy
works within its own ranks, and whoever asked for the copies (an extension such as core-diloco) synchronises them.
The samplers split the data across it too."""

DATA_PARALLEL: Final = "data_parallel"
"""The name of the data-parallel dimension of a device mesh (Lightning's): the samplers split the data along it, and
a sharded strategy shards over it (``fully_shard(module, mesh=device_mesh["data_parallel"])``)."""

CONTEXT_PARALLEL: Final = "context_parallel"
"""The dimension whose ranks split each sequence between them (they see the same samples)."""

PIPELINE_PARALLEL: Final = "pipeline_parallel"
"""The dimension whose ranks hold consecutive stages of one copy of the model (core-pipeline)."""

TENSOR_PARALLEL: Final = "tensor_parallel"
"""The dimension whose ranks hold parts of each layer (``parallelize_module``; core-model-parallel)."""

MESH_DIMENSIONS: Final = (REPLICATE, DATA_PARALLEL, CONTEXT_PARALLEL, PIPELINE_PARALLEL, TENSOR_PARALLEL)
"""Every dimension :class:`ParallelDims` knows, outermost first: the order of a run's mesh."""

AUTO: Final = "auto"
Degree: TypeAlias = "int | Literal['auto']"
"""A degree of parallelism as a user gives it: a positive number of processes, or ``"auto"``."""

_BATCH_DIMENSIONS: Final = (REPLICATE, DATA_PARALLEL)


def check_degree(owner: str, option: str, value: object) -> int | Literal["auto"]:
    """``value`` if it is ``"auto"`` or a positive int, else a :class:`core.ConfigurationError` naming it.

    :param owner: The class taking the option, for the message (``"ModelParallelStrategy"``).
    :param option: The option's name (``"tensor_parallel_size"``).
    """
    if value == AUTO:
        return AUTO
    if not is_whole(value, 1):
        raise ConfigurationError(f"{owner}({option}={value!r}): expected a positive number of processes or 'auto'.")
    return value


def _positive(owner: str) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        if not is_whole(value, 1):
            raise ConfigurationError(f"{owner}({attribute.name}={value!r}): expected a positive number of processes.")

    return check


def _as_names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _known_dimensions(instance: Any, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    unknown = [name for name in value if name not in MESH_DIMENSIONS]
    if unknown:
        raise ConfigurationError(
            f"ParallelDims(always={value!r}) names {unknown}, not dimensions of a mesh; expected names out of "
            f"{list(MESH_DIMENSIONS)}."
        )


@attrs.frozen
class ParallelDims:
    """The degrees of parallelism of a run, whose product is its world size, and the run's ``DeviceMesh``.

    ``ParallelDims(world_size, data_parallel_size=..., tensor_parallel_size=..., ...)``: the world size, then each
    degree by keyword (1 when not given); the fields below say what each holds.

    :raises core.ConfigurationError: a degree is not a positive int, or the degrees do not multiply to the world
        size (the message prints every factor: each dimension of the mesh, those above 1 and those in ``always``).

    The mesh's dimensions (:attr:`names`) are those of :data:`MESH_DIMENSIONS` above 1 or in ``always``, outermost
    first; ranks are laid out row-major, so the innermost dimension joins neighbouring global ranks. :meth:`build`
    makes the ``DeviceMesh`` once (a collective); :attr:`world_mesh` reads it, and :meth:`group` gives the process
    group of one dimension or of several flattened into one. A strategy holds one per run:
    :attr:`ParallelStrategy.parallel_dims <core.toolkit.strategies.ParallelStrategy.parallel_dims>`, which other
    strategies and extensions read instead of building the same layout again.
    """

    world_size: int = attrs.field(validator=_positive("ParallelDims"))
    """The number of processes of the run."""
    replicate_size: int = attrs.field(default=1, validator=_positive("ParallelDims"), kw_only=True)
    """Independent copies of the strategy side by side (:data:`REPLICATE`)."""
    data_parallel_size: int = attrs.field(default=1, validator=_positive("ParallelDims"), kw_only=True)
    """Replicas averaging their gradients every step, sharded or not (:data:`DATA_PARALLEL`)."""
    context_parallel_size: int = attrs.field(default=1, validator=_positive("ParallelDims"), kw_only=True)
    """Ranks splitting each sequence (:data:`CONTEXT_PARALLEL`)."""
    pipeline_parallel_size: int = attrs.field(default=1, validator=_positive("ParallelDims"), kw_only=True)
    """Ranks holding consecutive stages of one copy (:data:`PIPELINE_PARALLEL`)."""
    tensor_parallel_size: int = attrs.field(default=1, validator=_positive("ParallelDims"), kw_only=True)
    """Ranks holding parts of each layer (:data:`TENSOR_PARALLEL`)."""
    always: tuple[str, ...] = attrs.field(default=(), converter=_as_names, validator=_known_dimensions, kw_only=True)
    """Dimensions the mesh has even at size 1 (a strategy's users index them: ``device_mesh["data_parallel"]``); a
    dimension above 1 is always in it."""
    owner: str = attrs.field(default="ParallelDims", eq=False, kw_only=True)
    """Who asked for these degrees, for messages (``"ModelParallelStrategy"``)."""
    layout: str = attrs.field(default="", eq=False, kw_only=True)
    """How the processes are laid out, for messages (``"devices=2 per node x num_nodes=1"``)."""
    _meshes: dict[str, Any] = attrs.field(factory=dict, init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        product = 1
        for name in MESH_DIMENSIONS:
            product *= self.size(name)
        if product != self.world_size:
            # Every factor of the product: the mesh's dimensions hold every degree above 1.
            factors = " x ".join(f"{name}_size ({self.size(name)})" for name in self.names)
            where = f" ({self.layout})" if self.layout else ""
            raise ConfigurationError(
                f"{self.owner}: {factors} = {product}, but the run has world size {self.world_size}{where}; the "
                f"degrees of parallelism must multiply to the world size."
            )

    @property
    def names(self) -> tuple[str, ...]:
        """The mesh's dimensions, outermost first: those above 1 or in ``always`` (``data_parallel`` when none is)."""
        names = tuple(name for name in MESH_DIMENSIONS if self.size(name) > 1 or name in self.always)
        return names or (DATA_PARALLEL,)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The sizes of :attr:`names`, in their order."""
        return tuple(self.size(name) for name in self.names)

    def size(self, name: str) -> int:
        """The degree of the dimension ``name`` (1 for one the run does not use)."""
        if name not in MESH_DIMENSIONS:
            raise ConfigurationError(f"{name!r} is not a dimension of a mesh; expected one of {list(MESH_DIMENSIONS)}.")
        degree: int = getattr(self, f"{name}_size")
        return degree

    def coordinates(self, global_rank: int) -> dict[str, int]:
        """Where ``global_rank`` sits along every dimension of :data:`MESH_DIMENSIONS` (0 along those of size 1).

        Arithmetic only: the same as the built mesh's ``get_local_rank(name)`` on that rank."""
        if not 0 <= global_rank < self.world_size:
            raise ConfigurationError(f"global rank {global_rank} is outside a world of size {self.world_size}.")
        found: dict[str, int] = {}
        rest = global_rank
        for name in reversed(MESH_DIMENSIONS):
            rest, found[name] = divmod(rest, self.size(name))
        return {name: found[name] for name in MESH_DIMENSIONS}

    def sampler_split(self, global_rank: int) -> tuple[int, int]:
        """``(num_replicas, rank)`` of ``global_rank`` for a distributed sampler: the data is split across
        :data:`REPLICATE` and :data:`DATA_PARALLEL`; the ranks of one replica (context, pipeline and tensor
        parallel) see the same samples."""
        where = self.coordinates(global_rank)
        replicas, rank = 1, 0
        for name in _BATCH_DIMENSIONS:
            replicas, rank = replicas * self.size(name), rank * self.size(name) + where[name]
        return replicas, rank

    def replicated(self, copies: int) -> ParallelDims:
        """These degrees as one of ``copies`` copies side by side: :data:`REPLICATE` outermost, kept in the mesh
        even at 1 (whoever asked for copies reads its group)."""
        if self.replicate_size != 1 or REPLICATE in self.always:
            raise ConfigurationError(
                f"ParallelDims({self}) holds copies side by side already: {REPLICATE}_size={self.replicate_size}."
            )
        return attrs.evolve(self, world_size=self.world_size * copies, replicate_size=copies,
                            always=(REPLICATE, *self.names))  # one copy's mesh as it was, inside

    # -- the mesh ---------------------------------------------------------------------------------------

    def build(self, device_type: str) -> DeviceMesh:
        """The ``DeviceMesh`` of these degrees over every rank, made on the first call (a collective: every rank
        calls it, the strategy at its set-up); later calls return the same mesh."""
        mesh = self._meshes.get("world")
        if mesh is not None:
            if mesh.device_type != device_type:
                raise ConfigurationError(
                    f"The device mesh {self} was built for {mesh.device_type!r}, not {device_type!r}: one mesh per run."
                )
            return mesh
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device_type, self.sizes, mesh_dim_names=self.names)
        self._meshes["world"] = mesh
        return mesh

    @property
    def built(self) -> bool:
        """Whether :meth:`build` made the mesh."""
        return "world" in self._meshes

    @property
    def world_mesh(self) -> DeviceMesh:
        """The mesh :meth:`build` made, dimensions :attr:`names` (a :class:`core.ConfigurationError` before)."""
        mesh = self._meshes.get("world")
        if mesh is None:
            raise ConfigurationError(
                f"The device mesh {self} is built when the run's process group exists (the strategy's "
                f"strategy_setup_environment); read it inside the launched function or a hook called after it."
            )
        return mesh

    def mesh(self, *names: str) -> DeviceMesh:
        """The sub-mesh of the dimensions ``names`` through this rank (none named: every dimension of the mesh).
        Several dimensions are flattened into one, named by joining theirs with ``"+"`` in the mesh's order
        (``"data_parallel+tensor_parallel"``): made once, a collective the first time."""
        world = self.world_mesh
        missing = [name for name in names if name not in self.names]
        if missing:
            raise ConfigurationError(
                f"The device mesh {self} has no dimension {missing} (its dimensions: {list(self.names)})."
            )
        chosen = [name for name in self.names if not names or name in names]
        if len(chosen) == 1:
            return world[chosen[0]]
        flat = "+".join(chosen)
        if flat not in self._meshes:
            self._meshes[flat] = world[tuple(chosen)]._flatten(flat)
        return self._meshes[flat]

    def group(self, *names: str) -> ProcessGroup:
        """The process group of this rank along the dimensions ``names`` (flattened, for several; all of them when
        none is named)."""
        return self.mesh(*names).get_group()

    def forget(self) -> None:
        """Drop the process groups the mesh resolved (:func:`forget_mesh_groups`), once the world group is gone."""
        for mesh in self._meshes.values():
            forget_mesh_groups(mesh)

    def __str__(self) -> str:
        return " x ".join(f"{name}={size}" for name, size in zip(self.names, self.sizes, strict=True))


def forget_mesh_groups(mesh: DeviceMesh) -> None:
    """Drop the process groups a device mesh resolved, once the world group is destroyed.

    Recent torch keeps them in the mesh; a mesh still referenced somewhere (a ``DTensor`` the user holds) would
    then keep the destroyed groups alive until interpreter shutdown, where gloo's threads can abort the process.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        return
    registry = getattr(mesh, "_pg_registry", None)
    if isinstance(registry, dict):
        registry.clear()


def fit_degrees(
    owner: str,
    outer: tuple[str, Degree],
    inner: tuple[str, Degree],
    devices_per_node: int,
    num_nodes: int,
) -> ParallelDims:
    """Two degrees given as a strategy's options, either or both ``"auto"``, fitted to a run's processes.

    Both ``"auto"``: the inner dimension spans a node's devices and the outer one the nodes; one ``"auto"``: what the
    other leaves of the world size. Either way an error prints every factor and the sizes that fit.

    :param owner: The strategy class, for messages (``"ModelParallelStrategy"``).
    :param outer: The outer dimension's name and degree (``(DATA_PARALLEL, "auto")``); its option is
        ``f"{name}_size"``.
    :param inner: The inner dimension's name and degree (``(TENSOR_PARALLEL, 2)``).
    :returns: Degrees with both dimensions in the mesh, even at size 1.
    """
    (outer_name, outer_size), (inner_name, inner_size) = outer, inner
    world_size = devices_per_node * num_nodes
    layout = f"devices={devices_per_node} per node x num_nodes={num_nodes}"
    choices = _choices(outer_name, inner_name, world_size)
    if outer_size == AUTO and inner_size == AUTO:
        outer_size, inner_size = num_nodes, devices_per_node
    elif outer_size == AUTO or inner_size == AUTO:
        given_name, given = (outer_name, outer_size) if inner_size == AUTO else (inner_name, inner_size)
        if not isinstance(given, int) or world_size % given:
            raise ConfigurationError(
                f"{owner}({given_name}_size={given}) does not divide the world size {world_size} ({layout}), so the "
                f"other size cannot be derived. {choices}"
            )
        outer_size, inner_size = (given, world_size // given) if inner_size == AUTO else (world_size // given, given)
    sizes: Mapping[str, Any] = {f"{outer_name}_size": outer_size, f"{inner_name}_size": inner_size}
    try:
        return ParallelDims(world_size, **sizes, always=(outer_name, inner_name), owner=owner, layout=layout)
    except ConfigurationError as error:
        raise ConfigurationError(f"{error} {choices}") from None


def _choices(outer: str, inner: str, world_size: int) -> str:
    options = "; ".join(
        f"{outer}_size={size}, {inner}_size={world_size // size}"
        for size in range(1, world_size + 1)
        if world_size % size == 0
    )
    return f"For {world_size} process(es) use one of: {options} (or give one of them and leave the other 'auto')."
