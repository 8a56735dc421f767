"""The accelerator kit: availability, device parsing, the device itself, and a run on it."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from core._traits import traits_of
from core.registry._devices import parse_devices
from core.testing._base import Conformance
from core.testing._lite import train_briefly


class AcceleratorConformance(Conformance):
    """Inherit this in a class named ``Test...`` and set ``alias`` (or ``plugin_factory``).

    Checks the contract's promises: ``accelerator_is_available`` answers a bool without failing (tests that
    need a device skip, saying so, where it answers ``False``); ``devices="auto"`` and ``devices=1`` parse
    to sorted, distinct indices; the device returned for local rank 0 computes; the process-group backend
    is a name; and a one-process ``Lite`` run trains on the device.
    """

    kind: ClassVar[str] = "accelerator"

    def available_plugin(self) -> object:
        plugin = self.make_plugin()
        if not self.call(plugin, self.kind, "accelerator_is_available"):
            traits = traits_of(plugin, self.kind)
            pytest.skip(f"{traits.name!r} is not available here: {traits.reason_unavailable() or 'no device'}")
        return plugin

    def parse(self, plugin: object, devices: object) -> list[int]:
        result = self.call(plugin, self.kind, "accelerator_parse_devices", devices=parse_devices(devices))
        assert isinstance(result, list) and all(isinstance(index, int) for index in result), (
            f"accelerator_parse_devices(devices={devices!r}) returned {result!r}; expected a list of ints"
        )
        return result

    def test_is_available_answers_a_bool(self, plugin: object) -> None:
        answer = self.call(plugin, self.kind, "accelerator_is_available")
        assert isinstance(answer, bool), f"accelerator_is_available returned {answer!r}, expected True or False"

    def test_device_count_is_a_count(self, plugin: object) -> None:
        if not self.implements(plugin, "accelerator_device_count"):
            pytest.skip("accelerator_device_count is optional and not implemented")
        count = self.call(plugin, self.kind, "accelerator_device_count")
        assert isinstance(count, int) and count >= 0, f"accelerator_device_count returned {count!r}"

    def test_parses_auto_and_one(self) -> None:
        plugin = self.available_plugin()
        for devices in ("auto", 1):
            indices = self.parse(plugin, devices)
            assert indices, f"devices={devices!r} parsed to no device"
            assert indices == sorted(set(indices)), f"devices={devices!r} parsed to {indices}: not sorted and distinct"
        assert len(self.parse(plugin, 1)) == 1, "devices=1 must give exactly one device"

    def test_setup_device_returns_a_working_device(self) -> None:
        plugin = self.available_plugin()
        indices = self.parse(plugin, 1)
        device = self.call(plugin, self.kind, "accelerator_setup_device", local_rank=0, device_ids=indices)
        assert isinstance(device, torch.device), f"accelerator_setup_device returned {device!r}, not a torch.device"
        assert float((torch.ones(3, device=device) * 2).sum()) == 6.0
        self.call(plugin, self.kind, "accelerator_teardown")

    def test_process_group_backend_is_a_name(self, plugin: object) -> None:
        if not self.implements(plugin, "accelerator_process_group_backend"):
            pytest.skip("accelerator_process_group_backend is optional and not implemented")
        backend = self.call(plugin, self.kind, "accelerator_process_group_backend")
        assert isinstance(backend, str) and backend, f"accelerator_process_group_backend returned {backend!r}"

    def test_trains_in_a_lite_run(self) -> None:
        losses = train_briefly(accelerator=self.available_plugin())
        assert losses[-1] < losses[0], f"the loss did not go down on this accelerator: {losses}"
