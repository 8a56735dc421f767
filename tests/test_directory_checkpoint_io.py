"""``core.toolkit.checkpoint.DirectoryCheckpointIO`` and ``install_directory``: the base of the directory formats.

core-dcp's ``distributed`` and core-safetensors' ``safetensors`` derive from it; their own suites run it in real
multi-process saves. Here: what the base itself promises, in one process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from core import ConfigurationError
from core.toolkit.checkpoint import DirectoryCheckpointIO, install_directory


class Plain(DirectoryCheckpointIO):
    name: ClassVar[str] = "plain"
    url_hint: ClassVar[str] = "Write it to a mounted path."

    def checkpoint_io_save(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None) -> None:
        target = self.local_target(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = self.partial_directory(target, collective=False)
        partial.mkdir()
        for name, value in checkpoint.items():
            (partial / name).write_text(str(value))
        install_directory(partial, target)


def test_a_checksums_option_that_is_not_a_bool_names_the_subclass() -> None:
    with pytest.raises(ConfigurationError, match=r"Plain\(checksums='yes'\): expected True or False"):
        Plain(checksums="yes")  # type: ignore[arg-type]


def test_a_url_is_refused_with_the_alias_and_the_subclass_hint() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Plain().local_target("s3://bucket/checkpoint")
    message = str(caught.value)
    assert "The 'plain' checkpoint_io writes to a local or shared filesystem path" in message
    assert "'s3://bucket/checkpoint'" in message and message.endswith("Write it to a mounted path.")


def test_install_directory_replaces_the_old_checkpoint_whole_and_leaves_no_partial(tmp_path: Path) -> None:
    io = Plain()
    target = tmp_path / "checkpoints" / "last"
    io.checkpoint_io_save({"a": 1, "b": 2}, str(target), None)
    io.checkpoint_io_save({"c": 3}, str(target), None)
    assert sorted(path.name for path in target.iterdir()) == ["c"]  # nothing of the first checkpoint is mixed in
    assert sorted(path.name for path in target.parent.iterdir()) == ["last"]  # no .partial, no retired .old
    io.checkpoint_io_remove(str(target))
    assert not target.exists()


def test_partial_directories_are_unique_alone_and_agreed_collectively(tmp_path: Path) -> None:
    target = tmp_path / "step-3"
    alone = {DirectoryCheckpointIO.partial_directory(target, collective=False) for _ in range(3)}
    assert len(alone) == 3 and all(path.parent == tmp_path and path.name.startswith(".step-3.") for path in alone)
    assert DirectoryCheckpointIO.partial_directory(target, collective=True) == tmp_path / ".step-3.partial"


def test_the_first_party_directory_formats_derive_from_it() -> None:
    core_dcp = pytest.importorskip("core_dcp")
    core_safetensors = pytest.importorskip("core_safetensors")
    for cls in (core_dcp.DistributedCheckpointIO, core_safetensors.SafetensorsCheckpointIO):
        assert issubclass(cls, DirectoryCheckpointIO) and cls.writes_shards
