"""Plugin traits are declared once (core.TRAITS / core.PluginTraits), read in one place, and checked."""

from __future__ import annotations

import re
import warnings

import pytest
from conftest import Installer

import core
from core import hookimpl, hookspecs


class _Strategy:
    """The smallest strategy the contract accepts; subclasses add (or misspell) traits."""

    kind = "strategy"

    @hookimpl
    def strategy_launch(self, function, args, kwargs):  # type: ignore[no-untyped-def]
        return function(*args, **kwargs)

    @hookimpl
    def strategy_setup_module(self, module):  # type: ignore[no-untyped-def]
        return module

    @hookimpl
    def strategy_reduce(self, tensor, group, reduce_op):  # type: ignore[no-untyped-def]
        return tensor


class _Environment:
    kind = "environment"


def test_a_misspelt_trait_is_refused_naming_the_plugin_the_attribute_and_the_valid_names() -> None:
    class Misspelt(_Strategy):
        name = "misspelt"
        max_proceses = 1  # meant max_processes

    with pytest.raises(core.BrokenPluginError) as excinfo:
        core.resolve(strategy=Misspelt())
    message = str(excinfo.value)
    assert "test_traits.test_a_misspelt_trait_is_refused" in message  # the plugin's class
    assert "'max_proceses', which is not a trait: did you mean 'max_processes'?" in message
    assert "Valid trait names for a strategy: ['contract_version', 'default_checkpoint_io', 'kind'," in message


def test_priorty_on_an_environment_is_caught_instead_of_defaulting_to_zero() -> None:
    class Env(_Environment):
        priorty = 5

    with pytest.raises(core.BrokenPluginError, match=r"'priorty', which is not a trait: did you mean 'priority'\?"):
        core.traits_of(Env())


@pytest.mark.parametrize(
    ("attribute", "value", "expected"),
    [
        ("max_processes", 0, "expected None or an int >= 1"),
        ("max_processes", "2", "expected None or an int >= 1"),
        ("process_per_device", 1, "expected a bool"),
        ("default_checkpoint_io", None, "expected a str (a checkpoint_io alias)"),
        ("supports", {"strategy": ["dp"]}, "expected a core.Supports record"),
        ("contract_version", True, "expected an int >= 1"),
        ("name", "", "expected a non-empty str"),
    ],
)
def test_a_trait_of_the_wrong_type_is_refused_with_the_value_and_what_was_expected(
    attribute: str, value: object, expected: str
) -> None:
    plugin = type("Typed", (_Strategy,), {attribute: value})()
    with pytest.raises(core.BrokenPluginError) as excinfo:
        core.resolve(strategy=plugin)
    assert f"declares {attribute} = {value!r}; {expected}" in str(excinfo.value)


def test_a_trait_of_another_kind_is_refused() -> None:
    class Env(_Environment):
        max_processes = 4

    with pytest.raises(core.BrokenPluginError, match="'max_processes', a trait of \\['strategy'\\] plugins"):
        core.traits_of(Env())


def test_auto_strategies_keys_are_checked() -> None:
    plugin = type("Accel", (), {"kind": "accelerator", "auto_strategies": {"several": "ddp"}})()
    expected = re.escape("auto_strategies = {'several': 'ddp'}; expected a mapping")
    with pytest.raises(core.BrokenPluginError, match=expected):
        core.traits_of(plugin)


def test_declared_traits_are_read_and_the_rest_default() -> None:
    class Declared(_Strategy):
        name = "declared"
        max_processes = 3
        process_per_device = False

    traits = core.traits_of(Declared())
    assert traits == core.PluginTraits(kind="strategy", name="declared", max_processes=3, process_per_device=False)
    assert traits.default_checkpoint_io == "torch"
    assert traits.supports == core.Supports()
    assert core.traits_of(_Strategy(), alias="given").name == "given"


def test_unavailable_reason_may_be_a_method() -> None:
    class Missing(_Strategy):
        def unavailable_reason(self) -> str:
            return "the engine is not installed: pip install engine"

    assert core.traits_of(Missing()).reason_unavailable() == "the engine is not installed: pip install engine"


def test_plugin_attributes_that_are_not_near_a_trait_name_are_left_alone() -> None:
    class Options(_Strategy):
        timeout = 30.0
        start_method = "popen"
        process_group_backend = "gloo"

        def __init__(self) -> None:
            self.find_unused_parameters = False

    assert core.traits_of(Options()).kind == "strategy"


def test_a_misspelt_trait_in_an_installed_distribution_is_reported_against_it(installed: Installer) -> None:
    installed(
        "core-typo",
        {"environment": {"typo": "typo_plugin:TypoEnvironment"}},
        {
            "typo_plugin": """
                from core import hookimpl

                class TypoEnvironment:
                    kind = "environment"
                    priorty = 500

                    @hookimpl
                    def environment_detect(self):
                        return self
            """
        },
    )
    with pytest.warns(core.CoreWarning, match="'priorty', which is not a trait: did you mean 'priority'"):
        active = core.resolve()
    assert active.config.environment == "local"  # the broken candidate is skipped, nothing else breaks


def test_every_first_party_plugin_declares_valid_traits() -> None:
    catalog = core.discover()
    checked = 0
    for info in catalog.entries:
        if info.selectable:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", core.CoreDeprecationWarning)  # the legacy '16'/'bf16' aliases
                plugin = core.registry._discovery.load(info)
            assert core.traits_of(plugin, info.kind, info.alias).kind == info.kind
            checked += 1
    assert checked >= 40


def test_hookspecs_documents_exactly_the_traits_and_runtime_attributes() -> None:
    documented = re.findall(r"^- ``(\w+)``: ", hookspecs.__doc__ or "", flags=re.MULTILINE)
    from core._traits import RUNTIME_ATTRIBUTES

    assert documented == [*core.TRAITS, *RUNTIME_ATTRIBUTES]
    assert [field.name for field in core.PluginTraits.__attrs_attrs__] == list(core.TRAITS)

