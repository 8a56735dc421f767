"""The extension kit: wrappers only, and a run with the extension still computes correctly."""

from __future__ import annotations

from typing import Any, ClassVar

from core.plugins._contract import implemented_hooks
from core.testing._base import timeout
from core.testing._distributed import TEST_TIMEOUT, DistributedRunConformance
from core.testing._jobs import JobResult

_PLAIN_ALLOWED = frozenset({"core_attach"})


class ExtensionConformance(DistributedRunConformance):
    """Inherit this in a class named ``Test...`` and set ``alias`` (or ``plugin_factory``).

    Checks that every hook the extension implements (but ``core_attach``) is a ``wrapper=True`` wrapper, so
    that it runs around the active plugin instead of replacing it; and that a job on ``strategy`` with
    ``devices`` processes and the extension in ``plugins=[...]`` still gets every collective right, trains
    (the loss goes down), round-trips a checkpoint and ends cleanly. Set ``strategy = "ddp"`` and
    ``devices = 2`` for an extension of data-parallel strategies.
    """

    kind: ClassVar[str] = "extension"
    strategy: ClassVar[str] = "single_device"
    """The strategy alias the job runs the extension with."""
    cases: ClassVar[tuple[str, ...]] = ("collectives", "training", "checkpoint")

    def world_size(self) -> int:
        return self.devices if self.devices is not None else 1

    def job_settings(self) -> dict[str, Any]:
        return {
            "accelerator": self.accelerator,
            "strategy": self.strategy,
            "devices": self.world_size(),
            "plugins": [self.reference()],
        }

    def test_every_hook_is_a_wrapper(self, plugin: object) -> None:
        from core._markers import PROJECT_NAME

        plain = []
        for hook in implemented_hooks(plugin):
            if hook in _PLAIN_ALLOWED:
                continue
            method = getattr(plugin, hook, None)
            options = getattr(method, f"{PROJECT_NAME}_impl", None) or {}
            if not options.get("wrapper"):
                plain.append(hook)
        assert not plain, (
            f"{plugin!r} implements {plain} as plain hooks: on a firstresult hook that replaces the active "
            f"plugin's answer. Declare them with @hookimpl(wrapper=True) and yield to run around it."
        )

    @timeout(TEST_TIMEOUT)
    def test_training_makes_progress(self, job: JobResult) -> None:
        for rank, result in self.results(job, "training").items():
            assert result["finite"], f"global rank {rank}: a training loss was not finite"
            assert result["after"] < result["before"], (
                f"global rank {rank}: the loss went from {result['before']:.4f} to {result['after']:.4f} over "
                f"the run; with the extension the model no longer learns"
            )
