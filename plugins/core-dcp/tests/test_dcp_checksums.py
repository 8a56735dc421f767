"""A DCP checkpoint carries a checksum of each of its files (and of each entry's bytes); every single-bit flip in any
of its files is a CheckpointError naming the file and the entry, and a damaged .metadata is one clean error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from core_dcp import DistributedCheckpointIO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import core
from core.toolkit.checkpoint import verify_directory


def state() -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    return {"model": model.state_dict(), "step": 4, "name": "run"}


@pytest.fixture
def written(tmp_path: Path) -> Path:
    directory = tmp_path / "good"
    DistributedCheckpointIO().checkpoint_io_save(checkpoint=state(), path=str(directory), storage_options=None)
    return directory


def load(directory: Path, **options: Any) -> dict[str, Any]:
    return DistributedCheckpointIO(**options).checkpoint_io_load(path=str(directory), map_location=None,
                                                                 weights_only=True)


def flip(path: Path, position: int, bit: int) -> None:
    content = path.read_bytes()
    path.write_bytes(content[:position] + bytes([content[position] ^ (1 << bit)]) + content[position + 1:])


def test_the_checksum_file_lists_every_file_and_the_entries_of_the_data(written: Path) -> None:
    body, digest, end = (written / ".checksums").read_text().split("\n")
    listed = json.loads(body)
    assert end == "" and len(digest) == 16 and listed["algorithm"] == "xxh3_64"
    assert set(listed["files"]) == {path.name for path in written.iterdir()} - {".checksums"}
    entries = [item[0] for entry in listed["files"].values() for item in entry.get("items", [])]
    assert {"model.weight", "model.bias"} <= set(entries)
    assert load(written)["step"] == 4


def test_every_byte_of_the_metadata_and_the_checksum_file_is_covered(written: Path) -> None:
    """Exhaustive over the bytes of the two small files (one bit of each, its position cycling through the eight):
    each flip fails the check that runs before any read."""
    missed = []
    for name in (".metadata", ".checksums"):
        size = (written / name).stat().st_size
        for position in range(size):
            bit = position % 8
            flip(written / name, position, bit)
            try:
                verify_directory(written, str(written))
            except core.CheckpointError as error:
                assert str(written) in str(error)
            else:
                missed.append((name, position, bit))
            flip(written / name, position, bit)  # back as it was
    assert missed == []
    assert verify_directory(written, str(written)) is True


def test_a_flip_anywhere_in_a_data_file_names_the_file(written: Path, tmp_path: Path) -> None:
    import shutil

    data_file = next(path.name for path in written.iterdir() if path.suffix == ".distcp")
    size = (written / data_file).stat().st_size
    attempts = iter(range(10**6))

    @settings(max_examples=120, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(position=st.integers(0, size - 1), bit=st.integers(0, 7))
    def check(position: int, bit: int) -> None:
        copy = tmp_path / f"data-{next(attempts)}"
        shutil.copytree(written, copy)
        flip(copy / data_file, position, bit)
        with pytest.raises(core.CheckpointError, match=rf"its file '{data_file}' does not match the xxh3_64 checksum"):
            load(copy)
        shutil.rmtree(copy)

    check()
    assert load(written)["step"] == 4


def test_a_flip_in_a_tensor_names_the_entry(written: Path) -> None:
    listed = json.loads((written / ".checksums").read_text().split("\n")[0])
    data_file, entry = next((name, entry) for name, entry in listed["files"].items() if "items" in entry)
    offset, length = next((item[1], item[2]) for item in entry["items"] if item[0] == "model.weight")
    flip(written / data_file, offset + length // 2, 3)
    with pytest.raises(core.CheckpointError) as raised:
        load(written)
    assert "the changed bytes are in the entry 'model.weight'" in str(raised.value)
    assert "Nothing was loaded" in str(raised.value)
    try:  # checking can be turned off: the damaged bytes then reach DCP's reader (or a value) unnoticed here
        load(written, checksums=False)
    except core.CheckpointError as error:
        assert "checksum" not in str(error)


def test_a_truncated_metadata_is_one_clean_error_with_or_without_weights_only(
    written: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (written / ".checksums").unlink()  # no checksums (an older checkpoint, or checksums=False): the reader sees it
    metadata = written / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:40])
    for weights_only in (True, False):
        with pytest.raises(core.CheckpointError) as raised:
            DistributedCheckpointIO().checkpoint_io_load(path=str(written), map_location=None,
                                                         weights_only=weights_only)
        message = str(raised.value)
        assert f"The distributed checkpoint {str(written)!r} has a corrupt or truncated .metadata" in message
        assert "weights_only=False" not in message and "Refused" not in message
    assert "Traceback" not in capfd.readouterr().err


def test_a_missing_listed_file_is_named_and_checksums_must_be_a_bool(written: Path) -> None:
    data_file = next(path for path in written.iterdir() if path.suffix == ".distcp")
    data_file.unlink()
    with pytest.raises(core.CheckpointError, match=rf"is incomplete: its file '{data_file.name}', listed in "
                                                   r"\.checksums when it was written, is missing"):
        load(written)
    refused = r"DistributedCheckpointIO\(checksums=1\): expected True or False"
    with pytest.raises(core.ConfigurationError, match=refused):
        DistributedCheckpointIO(checksums=1)  # type: ignore[arg-type]
