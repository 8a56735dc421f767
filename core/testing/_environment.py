"""The environment kit: detection, ranks, the layout check and a clean teardown, under set variables."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import ClassVar, Final

import pytest

from core._errors import CoreError
from core._records import ClusterInfo
from core._traits import traits_of
from core.registry._discovery import discover
from core.registry._resolver import _detect_environment
from core.testing._base import Conformance

# Variables of launchers and schedulers that a test process may have inherited; removed for every test.
_RANK_VARIABLES: Final = (
    "LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE",
)
_SCHEDULER_PREFIXES: Final = (
    "SLURM_", "TORCHELASTIC_", "OMPI_", "PMI_", "PMIX_", "MV2_", "MPI_", "MPIRUN_", "LSB_", "LSF_", "JSM_", "KUBEFLOW_",
)


class EnvironmentConformance(Conformance):
    """Inherit this in a class named ``Test...`` and set ``alias`` (or ``plugin_factory``) and ``variables``.

    Every test runs with the launcher and scheduler variables of the test process removed and
    ``variables`` set: the environment a process under this cluster would see. Checks: the environment
    claims such a process (``environment_detect`` returns the plugin itself) and, unless
    ``always_detects``, no plain process; ``environment_cluster_info`` returns a :class:`core.ClusterInfo`
    (equal to ``expected_cluster`` when given); ``environment_creates_processes_externally`` answers a
    bool; ``environment_validate_settings`` accepts ``devices_per_node`` x ``num_nodes`` and refuses
    ``mismatched_layout``; teardown leaves ``os.environ`` as it found it; and, installed, auto-detection
    picks it among every installed environment.
    """

    kind: ClassVar[str] = "environment"
    variables: ClassVar[Mapping[str, str]] = {}
    """The environment variables of a process running under this cluster environment."""
    devices_per_node: ClassVar[int] = 1
    num_nodes: ClassVar[int] = 1
    expected_cluster: ClassVar[ClusterInfo | None] = None
    """What ``environment_cluster_info(devices_per_node, num_nodes)`` must return under ``variables``."""
    mismatched_layout: ClassVar[tuple[int, int] | None] = None
    """``(devices_per_node, num_nodes)`` that ``environment_validate_settings`` must refuse under ``variables``."""
    always_detects: ClassVar[bool] = False
    """True for a fallback that claims every process (the built-in ``local``)."""
    auto_detected: ClassVar[bool] = True
    """False for an environment used only when named (``environment_detect`` never claims a process)."""

    @pytest.fixture(autouse=True)
    def cluster_variables(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        for name in list(os.environ):
            if name in _RANK_VARIABLES or name.startswith(_SCHEDULER_PREFIXES):
                monkeypatch.delenv(name)
        for name, value in self.variables.items():
            monkeypatch.setenv(name, value)
        yield

    def without_variables(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in self.variables:
            monkeypatch.delenv(name, raising=False)

    def test_claims_a_process_under_its_variables(self, plugin: object) -> None:
        if not self.auto_detected:
            pytest.skip("used only when named: environment_detect never claims a process")
        claimed = self.call(plugin, self.kind, "environment_detect")
        assert claimed is plugin, (
            f"environment_detect returned {claimed!r} with {dict(self.variables)} set; expected the plugin itself"
        )

    def test_ignores_a_plain_process(self, plugin: object, monkeypatch: pytest.MonkeyPatch) -> None:
        if self.always_detects:
            pytest.skip("a fallback environment claims every process")
        self.without_variables(monkeypatch)
        claimed = self.call(plugin, self.kind, "environment_detect")
        assert claimed is None, f"environment_detect claimed a process with none of its variables: {claimed!r}"

    def test_cluster_info(self, plugin: object) -> None:
        info = self.call(
            plugin, self.kind, "environment_cluster_info",
            devices_per_node=self.devices_per_node, num_nodes=self.num_nodes,
        )
        assert isinstance(info, ClusterInfo), f"environment_cluster_info returned {info!r}, not a core.ClusterInfo"
        if self.expected_cluster is not None:
            assert info == self.expected_cluster, f"under {dict(self.variables)}: {info} != {self.expected_cluster}"
        self.call(plugin, self.kind, "environment_teardown")

    def test_creates_processes_externally_answers_a_bool(self, plugin: object) -> None:
        answer = self.call(plugin, self.kind, "environment_creates_processes_externally")
        assert isinstance(answer, bool), f"environment_creates_processes_externally returned {answer!r}"

    def test_validate_settings_accepts_the_layout(self, plugin: object) -> None:
        self.call(
            plugin, self.kind, "environment_validate_settings",
            devices_per_node=self.devices_per_node, num_nodes=self.num_nodes,
        )

    def test_validate_settings_refuses_a_mismatch(self, plugin: object) -> None:
        if self.mismatched_layout is None:
            pytest.skip("no mismatched_layout given")
        devices, nodes = self.mismatched_layout
        with pytest.raises(CoreError) as refused:
            self.call(plugin, self.kind, "environment_validate_settings", devices_per_node=devices, num_nodes=nodes)
        message = str(refused.value)
        assert str(devices) in message or str(devices * nodes) in message, (
            f"the refusal of devices_per_node={devices}, num_nodes={nodes} does not name them: {message}"
        )

    def test_teardown_restores_the_process_environment(self, plugin: object) -> None:
        before = dict(os.environ)
        self.call(
            plugin, self.kind, "environment_cluster_info",
            devices_per_node=self.devices_per_node, num_nodes=self.num_nodes,
        )
        self.call(plugin, self.kind, "environment_teardown")
        changed = {name for name in set(before) | set(os.environ) if before.get(name) != os.environ.get(name)}
        assert not changed, f"environment_teardown left these variables changed: {sorted(changed)}"

    def test_priority_is_a_number(self, plugin: object) -> None:
        priority = traits_of(plugin, self.kind).priority  # raises BrokenPluginError for a non-int priority
        assert isinstance(priority, int) and not isinstance(priority, bool), f"priority = {priority!r}"

    def test_auto_detection_picks_it(self) -> None:
        if self.alias is None or not self.auto_detected:
            pytest.skip("only for an installed environment that claims processes")
        chosen = _detect_environment(discover())
        assert chosen.alias == self.alias, (
            f"with {dict(self.variables)} set, auto-detection picked {chosen.alias!r} ({chosen.distribution}) "
            f"before {self.alias!r}: raise its priority or narrow the other's detection"
        )
