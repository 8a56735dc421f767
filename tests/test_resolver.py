"""The resolver turns aliases and objects into one active set, and rejects what cannot work."""

from __future__ import annotations

import sys

import pytest
from conftest import Installer, plugin_source
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import core
from core import hookimpl
from core.builtin.strategies import SingleDeviceStrategy
from core.registry._discovery import Catalog, discover


def only_from(*distributions: str) -> Catalog:
    """The installed catalog restricted to some distributions, so results do not depend on what else is here."""
    wanted = {"core", *distributions}
    return Catalog(tuple(info for info in discover().entries if info.distribution in wanted))


def _strategy(installed: Installer, dist: str, module: str, alias: str) -> None:
    installed(dist, {"strategy": {alias: f"{module}:factory"}}, {module: plugin_source("strategy", alias)})


def test_defaults() -> None:
    config = core.resolve(catalog=only_from()).config
    assert (config.accelerator, config.strategy, config.precision, config.environment, config.checkpoint_io) == (
        "cpu",
        "single_device",
        "32-true",
        "local",
        "torch",
    )
    assert config.device_ids == (0,) and config.num_nodes == 1 and config.world_size == 1


@pytest.mark.parametrize(("given_precision", "canonical"), [(32, "32-true"), ("32", "32-true"), (64, "64-true")])
def test_legacy_precision_spellings(given_precision: object, canonical: str) -> None:
    assert core.resolve(precision=given_precision).config.precision == canonical


def test_unknown_alias_names_kind_value_suggestion_and_installed() -> None:
    with pytest.raises(core.UnknownPluginError) as excinfo:
        core.resolve(strategy="single_devce", catalog=only_from())
    message = str(excinfo.value)
    assert "Unknown strategy 'single_devce'" in message
    assert "Did you mean 'single_device'?" in message
    assert "Installed strategy aliases: single_device." in message


def test_unknown_first_party_alias_says_what_to_install() -> None:
    with pytest.raises(core.UnknownPluginError) as excinfo:
        core.resolve(strategy="ddp_spawn", catalog=only_from())
    assert "'ddp_spawn' is provided by core-ddp: pip install core-ddp" in str(excinfo.value)
    with pytest.raises(core.UnknownPluginError) as excinfo:
        core.resolve(precision="16-mixed", catalog=only_from())
    assert "pip install core-amp" in str(excinfo.value)


def test_typo_of_a_first_party_alias_suggests_it_and_its_distribution() -> None:
    with pytest.raises(core.UnknownPluginError) as excinfo:
        core.resolve(strategy="ddp_spwan", catalog=only_from())
    assert "'ddp_spawn' (pip install core-ddp)" in str(excinfo.value)


def test_auto_strategy_with_several_devices_needs_ddp() -> None:
    with pytest.raises(core.UnknownPluginError) as excinfo:
        core.resolve(devices=2, catalog=only_from())
    message = str(excinfo.value)
    assert "strategy='auto' picks 'ddp' for devices=2 x num_nodes=1" in message
    assert "pip install core-ddp" in message


def test_auto_strategy_rules(installed: Installer, monkeypatch: pytest.MonkeyPatch) -> None:
    _strategy(installed, "core-fake-ddp", "fake_ddp", "ddp")
    _strategy(installed, "core-fake-notebook", "fake_notebook", "ddp_notebook")
    catalog = only_from("core-fake-ddp", "core-fake-notebook")
    assert core.resolve(devices=1, catalog=catalog).config.strategy == "single_device"
    assert core.resolve(devices=2, catalog=catalog).config.strategy == "ddp"
    assert core.resolve(devices=1, num_nodes=2, catalog=catalog).config.world_size == 2
    assert "fake_notebook" not in sys.modules  # only what is selected is imported
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    assert core.resolve(devices=2, catalog=catalog).config.strategy == "ddp_notebook"


def test_single_device_refuses_several_processes() -> None:
    with pytest.raises(core.ConfigurationError) as excinfo:
        core.resolve(strategy="single_device", devices=3)
    message = str(excinfo.value)
    assert "'single_device' runs at most 1 process" in message and "asks for 3" in message


@pytest.mark.parametrize("devices", [[0, 1], -1])
def test_cpu_takes_a_count(devices: object) -> None:
    with pytest.raises(core.ConfigurationError, match="cpu accelerator takes a number of processes"):
        core.resolve(accelerator="cpu", devices=devices)


@pytest.mark.parametrize("num_nodes", [0, -1, True, "2", 1.0])
def test_bad_num_nodes(num_nodes: object) -> None:
    with pytest.raises(core.ConfigurationError, match=f"num_nodes={num_nodes!r}"):
        core.resolve(num_nodes=num_nodes)


def test_declared_incompatibility_is_rejected_with_both_plugins_and_the_hint() -> None:
    strategy = SingleDeviceStrategy()
    strategy.supports = core.Supports(  # type: ignore[attr-defined]
        never={"precision": {"64-true"}}, hint="Use 32-true with this strategy."
    )
    assert core.resolve(strategy=strategy, precision="32-true").config.strategy == "single_device"
    with pytest.raises(core.ConfigurationError) as excinfo:
        core.resolve(strategy=strategy, precision="64")
    message = str(excinfo.value)
    assert "The strategy 'single_device'" in message
    assert "does not support the precision '64-true'" in message  # canonical name of the legacy '64'
    assert "never precision ['64-true']" in message
    assert "Use 32-true with this strategy." in message


def test_only_rule_from_a_third_party_plugin(installed: Installer) -> None:
    installed(
        "core-cudaonly",
        {"strategy": {"cudaonly": "cudaonly:factory"}},
        {
            "cudaonly": plugin_source("strategy", "cudaonly").replace(
                "return Strategy()",
                "from core import Supports\n    return Strategy(supports=Supports(only={'accelerator': {'cuda'}}))",
            )
        },
    )
    with pytest.raises(core.ConfigurationError) as excinfo:
        core.resolve(strategy="cudaonly")
    message = str(excinfo.value)
    assert "(core-cudaonly) does not support the accelerator 'cpu' (core)" in message
    assert "only accelerator ['cuda']" in message


class _Env:
    kind = "environment"
    name = "fixed"

    def __init__(self, world_size: int = 1) -> None:
        self.world_size = world_size

    @hookimpl
    def environment_creates_processes_externally(self) -> bool:
        return False

    @hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> core.ClusterInfo:
        return core.ClusterInfo(world_size=self.world_size, global_rank=0, local_rank=0, node_rank=0)

    @hookimpl
    def environment_validate_settings(self, devices_per_node: int, num_nodes: int) -> None:
        if devices_per_node * num_nodes != self.world_size:
            raise core.ConfigurationError(f"scheduler gave {self.world_size}, asked {devices_per_node * num_nodes}")


def test_objects_in_plugins_and_environment_validation() -> None:
    active = core.resolve(plugins=[_Env()])
    assert active.config.environment == "fixed"
    assert active.config.distributions["environment"] == "test_resolver (object)"
    assert active.cluster.world_size == 1
    with pytest.raises(core.ConfigurationError, match="scheduler gave 1, asked 2"):
        core.resolve(plugins=[_Env()], num_nodes=2, strategy=_MultiProcess())


class _MultiProcess(SingleDeviceStrategy):
    max_processes = None


def test_two_plugins_of_one_kind_are_refused() -> None:
    with pytest.raises(core.ConfigurationError, match="two environment plugins, 'fixed' and 'local'"):
        core.resolve(plugins=[_Env(), "local"])


def test_kind_given_twice_is_refused() -> None:
    with pytest.raises(core.ConfigurationError, match="The strategy is given twice"):
        core.resolve(strategy="single_device", plugins=[SingleDeviceStrategy()])


def test_object_of_the_wrong_kind() -> None:
    with pytest.raises(core.ConfigurationError, match="is a environment plugin, but it was passed as the strategy"):
        core.resolve(strategy=_Env())
    with pytest.raises(core.ConfigurationError, match="does not declare a valid `kind`"):
        core.resolve(plugins=[object()])


def test_unknown_plugin_alias_in_plugins_list() -> None:
    with pytest.raises(core.UnknownPluginError) as excinfo:
        core.resolve(plugins=["slurm"], catalog=only_from())
    assert "Unknown plugin 'slurm'" in str(excinfo.value) and "pip install core-slurm" in str(excinfo.value)


class _Typo(SingleDeviceStrategy):
    @hookimpl
    def strategy_lanch(self) -> None:  # misspelt hook
        return None


class _Foreign(SingleDeviceStrategy):
    @hookimpl
    def precision_backward(self, tensor: object) -> None:
        return None


class _Incomplete:
    kind = "strategy"
    name = "incomplete"

    @hookimpl
    def strategy_launch(self, function: object, args: object, kwargs: object) -> None:
        return None


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [
        (_Typo(), "implements hooks that the contract does not define: ['strategy_lanch']"),
        (_Foreign(), "implements hooks of another kind: ['precision_backward']"),
        (_Incomplete(), "lacks required hooks: ['strategy_all_gather', 'strategy_barrier'"),
    ],
)
def test_plugins_that_break_the_contract_are_refused_by_name(plugin: object, expected: str) -> None:
    with pytest.raises(core.BrokenPluginError) as excinfo:
        core.resolve(strategy=plugin)
    assert expected in str(excinfo.value)
    assert type(plugin).__qualname__ in str(excinfo.value)


def test_a_strategy_keeping_a_bound_hook_of_its_run_resolves_again() -> None:
    # core-ddp keeps the precision's backward (active.bind(...), the marked function itself) in a private attribute;
    # a strategy object reused for a second run (fit, then test) must not look like it implements "_backward".
    strategy = SingleDeviceStrategy()
    first = core.resolve(accelerator="cpu", strategy=strategy, precision="32-true")
    strategy._backward = first.bind("precision_backward")  # type: ignore[attr-defined]
    assert hasattr(strategy._backward, "core_impl")  # type: ignore[attr-defined]
    assert core.resolve(accelerator="cpu", strategy=strategy, precision="32-true").hook.strategy_barrier is not None


class _RaisingAccelerator:
    kind = "accelerator"
    name = "raising"

    @hookimpl
    def accelerator_is_available(self) -> bool:
        return True

    @hookimpl
    def accelerator_parse_devices(self, devices: object) -> list[int]:
        raise ZeroDivisionError("bad driver")

    @hookimpl
    def accelerator_setup_device(self, local_rank: int, device_ids: object) -> None:
        return None


def test_exception_in_a_hook_during_resolution_is_blamed_on_the_plugin() -> None:
    with pytest.raises(core.BrokenPluginError) as excinfo:
        core.resolve(accelerator=_RaisingAccelerator())
    assert "accelerator plugin 'raising' raised in accelerator_parse_devices: ZeroDivisionError: bad driver" in str(
        excinfo.value
    )


class _Wrapper:
    kind = "extension"
    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl(wrapper=True)
    def strategy_reduce(self, tensor: object, group: object, reduce_op: str):  # type: ignore[no-untyped-def]
        self.calls += 1
        result = yield
        return result


def test_bind_skips_pluggy_for_a_single_implementation_and_keeps_wrappers() -> None:
    plain = core.resolve()
    assert plain.bind("strategy_reduce") == plain.strategy.strategy_reduce
    assert plain.bind("checkpoint_io_teardown", default=print) is print  # no implementation: the default
    extension = _Wrapper()
    wrapped = core.resolve(plugins=[extension])
    assert wrapped.config.extensions == ("counting",)
    reduce = wrapped.bind("strategy_reduce")
    assert reduce is wrapped.hook.strategy_reduce
    assert reduce(tensor=3, group=None, reduce_op="sum") == 3
    assert extension.calls == 1


def test_core_attach_gives_every_plugin_the_active_set() -> None:
    active = core.resolve()
    assert active.strategy.active is active


ALIASES = st.sampled_from(["cpu", "cuda", "gpu", "tpu", "auto", "single_device", "ddp", "32", "64", "bf16-true"])
VALUES = st.one_of(ALIASES, st.text(max_size=8), st.integers(-2, 4), st.none(), st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    accelerator=VALUES,
    strategy=VALUES,
    precision=VALUES,
    devices=st.one_of(VALUES, st.lists(st.integers(-1, 3), max_size=3)),
    num_nodes=st.one_of(st.integers(-1, 3), st.none()),
    plugins=st.lists(st.one_of(ALIASES, st.sampled_from(["local", "torch", "slurm", "nope"])), max_size=3),
)
def test_any_combination_resolves_or_raises_a_core_error(
    accelerator: object, strategy: object, precision: object, devices: object, num_nodes: object, plugins: list[str]
) -> None:
    try:
        active = core.resolve(
            accelerator=accelerator,
            strategy=strategy,
            precision=precision,
            devices=devices,
            num_nodes=num_nodes,
            plugins=plugins,
        )
    except core.CoreError as error:
        assert str(error)
        return
    assert active.config.world_size >= 1
    assert active.config.accelerator and active.config.strategy and active.config.precision


def test_accelerator_can_declare_its_auto_strategies(installed: Installer) -> None:
    from core.builtin.accelerators import CPUAccelerator

    _strategy(installed, "core-fake-xla", "fake_xla", "fake_xla")

    class XlaLike(CPUAccelerator):
        name = "xla_like"  # type: ignore[misc]
        auto_strategies = {"single": "single_device", "multi": "fake_xla"}

    catalog = only_from("core-fake-xla")
    assert core.resolve(accelerator=XlaLike(), devices=2, catalog=catalog).config.strategy == "fake_xla"
    assert core.resolve(accelerator=XlaLike(), devices=1, catalog=catalog).config.strategy == "single_device"


class _LauncherEnvironment:
    """An environment whose launcher started ``started`` processes on this node (like horovodrun -np N)."""

    kind = "environment"
    name = "launcher"

    def __init__(self, started: object) -> None:
        self.started = started

    @core.hookimpl
    def environment_creates_processes_externally(self) -> bool:
        return True

    @core.hookimpl
    def environment_cluster_info(self, devices_per_node: int, num_nodes: int) -> core.ClusterInfo:
        return core.ClusterInfo(world_size=devices_per_node * num_nodes, global_rank=0, local_rank=0, node_rank=0,
                                main_address="127.0.0.1", main_port=29500)

    @core.hookimpl
    def environment_processes_per_node(self) -> object:
        return self.started


def test_devices_auto_takes_the_process_count_the_launcher_started() -> None:
    active = core.resolve(accelerator="cpu", plugins=[_LauncherEnvironment(3)])
    assert active.config.device_ids == (0, 1, 2)
    assert active.config.strategy == "ddp"  # several processes: the auto strategy follows the count
    explicit = core.resolve(accelerator="cpu", devices=2, plugins=[_LauncherEnvironment(3)])
    assert explicit.config.device_ids == (0, 1)  # an explicit devices= is the user's, never overridden
    assert core.resolve(accelerator="cpu", plugins=[_LauncherEnvironment(None)]).config.device_ids == (0,)


def test_a_bad_process_count_from_an_environment_is_blamed_on_it() -> None:
    with pytest.raises(core.BrokenPluginError, match="'launcher' returned 0 from environment_processes_per_node"):
        core.resolve(accelerator="cpu", plugins=[_LauncherEnvironment(0)])


# ------------------------------------------------------------------------------------------ error texts


def test_a_conflict_names_each_pin_quoted_whole(installed: Installer) -> None:
    _strategy(installed, "core-fancy-a", "fancy_a", "fancy")
    _strategy(installed, "core-fancy-b", "fancy_b", "fancy")
    with pytest.raises(core.PluginConflictError) as excinfo:
        core.resolve(strategy="fancy", catalog=only_from("core-fancy-a", "core-fancy-b"))
    assert (
        "Pin one, for example strategy='core-fancy-a:fancy' or strategy='core-fancy-b:fancy', or block one with "
        "CORE_DISABLE_PLUGINS=<distribution>."
    ) in str(excinfo.value)


def test_did_you_mean_includes_a_conflicting_alias(installed: Installer) -> None:
    _strategy(installed, "core-fancy-a", "fancy_a", "fancy")
    _strategy(installed, "core-fancy-b", "fancy_b", "fancy")
    catalog = only_from("core-fancy-a", "core-fancy-b")
    with pytest.raises(core.UnknownPluginError) as excinfo:
        core.resolve(strategy="fancyy", catalog=catalog)
    message = str(excinfo.value)
    assert "Did you mean 'fancy'?" in message
    assert "Installed strategy aliases: fancy, single_device." in message
    with pytest.raises(core.UnknownPluginError, match="Did you mean 'fancy'"):
        core.resolve(plugins=["fancyy"], catalog=catalog)


def test_the_install_hint_of_a_first_party_alias_comes_first() -> None:
    with pytest.raises(core.UnknownPluginError) as excinfo:
        core.resolve(strategy="fsdp", catalog=only_from("core-ddp"))
    message = str(excinfo.value)
    assert message.startswith("Unknown strategy 'fsdp'. 'fsdp' is provided by core-fsdp: pip install core-fsdp. ")
    assert "Did you mean 'dp'?" in message
    assert message.index("pip install core-fsdp") < message.index("Did you mean")


def test_strict_mode_imports_every_installed_plugin_of_the_kinds_a_run_resolves(
    installed: Installer, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed(
        "core-exploding", {"strategy": {"exploding": "exploding_strategy:factory"}},
        {"exploding_strategy": "raise RuntimeError('boom at import of exploding_strategy')"},
    )
    catalog = only_from("core-exploding")
    assert core.resolve(catalog=catalog).config.strategy == "single_device"  # unused: not even imported
    assert "exploding_strategy" not in sys.modules
    monkeypatch.setenv("CORE_STRICT_PLUGINS", "1")
    with pytest.raises(core.BrokenPluginError) as excinfo:
        core.resolve(catalog=catalog)
    message = str(excinfo.value)
    assert "The strategy plugin 'exploding' from core-exploding 1.0.0 failed to import" in message
    assert "RuntimeError: boom at import of exploding_strategy" in message
    assert message.endswith(
        "(fatal because CORE_STRICT_PLUGINS=1 imports every installed strategy plugin, used or not)"
    )
