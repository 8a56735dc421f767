"""Every checkpoint file the ``torch`` and ``async`` checkpoint_io write carries a checksum, and every single-bit
flip anywhere in the file is a CheckpointError that names the file (and the tensor, when the bit is in one)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import core
from core.builtin.async_checkpoint_io import AsyncCheckpointIO
from core.builtin.checkpoint_io import TorchCheckpointIO
from core.toolkit._checksums import TRAILER_SIZE, ChecksumWriter, verify_file
from core.toolkit.checkpoint import atomic_torch_save, safe_torch_load


def state() -> dict[str, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 7, "name": "run"}


def flipped(content: bytes, position: int, bit: int) -> bytes:
    return content[:position] + bytes([content[position] ^ (1 << bit)]) + content[position + 1:]


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("sealed") / "c.pt"
    atomic_torch_save(state(), path)
    return path.read_bytes()


def test_a_sealed_file_is_still_a_plain_torch_file_with_the_checksum_as_its_zip_comment(sealed: bytes) -> None:
    assert torch.load(io.BytesIO(sealed), weights_only=True)["step"] == 7
    comment = zipfile.ZipFile(io.BytesIO(sealed)).comment
    assert comment.startswith(b"core-checksum xxh3_64 ") and len(comment) == TRAILER_SIZE
    assert verify_file(io.BytesIO(sealed), "c.pt") is True


def test_every_single_bit_flip_anywhere_in_the_file_is_detected(sealed: bytes) -> None:
    """Exhaustive: each of the file's bits, flipped alone (about 40 000 files), fails verification."""
    missed = []
    for position in range(len(sealed)):
        for bit in range(8):
            try:
                verify_file(io.BytesIO(flipped(sealed, position, bit)), "c.pt")
            except core.CheckpointError:
                continue
            missed.append((position, bit))
    assert missed == [], f"{len(missed)} of {8 * len(sealed)} flips loaded without an error, e.g. {missed[:5]}"


@pytest.mark.parametrize("plugin", [TorchCheckpointIO, AsyncCheckpointIO])
def test_a_flip_through_the_checkpoint_io_is_refused_and_loses_nothing(plugin: type[TorchCheckpointIO],
                                                                       tmp_path: Path) -> None:
    checkpoint_io = plugin()
    good = tmp_path / "good.pt"
    checkpoint_io.checkpoint_io_save(checkpoint=state(), path=str(good), storage_options=None)
    checkpoint_io.checkpoint_io_teardown() if hasattr(checkpoint_io, "checkpoint_io_teardown") else None
    content = good.read_bytes()
    attempts = iter(range(10**6))

    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(position=st.integers(0, len(content) - 1), bit=st.integers(0, 7))
    def check(position: int, bit: int) -> None:
        damaged = tmp_path / f"damaged-{next(attempts)}.pt"
        damaged.write_bytes(flipped(content, position, bit))
        with pytest.raises(core.CheckpointError, match=str(damaged)):
            checkpoint_io.checkpoint_io_load(path=str(damaged), map_location="cpu", weights_only=True)
        damaged.unlink()

    check()
    assert good.read_bytes() == content
    assert checkpoint_io.checkpoint_io_load(path=str(good), map_location="cpu", weights_only=True)["step"] == 7


def _data_offset(content: bytes, record_suffix: str) -> int:
    archive = zipfile.ZipFile(io.BytesIO(content))
    info = next(info for info in archive.infolist() if info.filename.endswith(record_suffix))
    name_length = int.from_bytes(content[info.header_offset + 26: info.header_offset + 28], "little")
    extra_length = int.from_bytes(content[info.header_offset + 28: info.header_offset + 30], "little")
    return info.header_offset + 30 + name_length + extra_length


def test_a_flip_in_tensor_data_names_the_file_and_the_tensor(tmp_path: Path) -> None:
    path = tmp_path / "named.pt"
    atomic_torch_save({"model": {"weight": torch.arange(64.0), "bias": torch.zeros(4)}, "step": 1}, path)
    content = path.read_bytes()
    path.write_bytes(flipped(content, _data_offset(content, "data/0") + 13, 2))
    with pytest.raises(core.CheckpointError) as raised:
        safe_torch_load(path, "cpu", True)
    message = str(raised.value)
    assert f"The checkpoint {str(path)!r} is corrupt: its content does not match the xxh3_64 checksum" in message
    assert "the changed bytes are in the tensor 'model.weight' (archive/data/0)" in message
    assert "Nothing was loaded" in message


def test_a_flip_in_the_pickled_structure_or_the_digest_says_where(sealed: bytes, tmp_path: Path) -> None:
    path = tmp_path / "structure.pt"
    path.write_bytes(flipped(sealed, _data_offset(sealed, "data.pkl") + 5, 0))
    in_structure = r"the changed bytes are in the pickled structure \(archive/data\.pkl\)"
    with pytest.raises(core.CheckpointError, match=in_structure):
        safe_torch_load(path, "cpu", True)
    digit = next(index for index in range(len(sealed) - 16, len(sealed)) if chr(sealed[index]).isdigit())
    path.write_bytes(flipped(sealed, digit, 0))  # a digit of the digest, still a hexadecimal digit
    with pytest.raises(core.CheckpointError, match=r"outside the tensors and the pickled structure"):
        safe_torch_load(path, "cpu", True)
    path.write_bytes(flipped(sealed, len(sealed) - TRAILER_SIZE + 2, 1))  # the comment's prefix
    at_the_end = r"the end of the file, where its xxh3_64 checksum is kept, is damaged"
    with pytest.raises(core.CheckpointError, match=at_the_end):
        safe_torch_load(path, "cpu", True)


def test_a_file_without_a_checksum_loads_and_checksums_can_be_turned_off(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pt"
    torch.save({"step": 3}, plain)  # written by torch itself: nothing to verify, loaded as before
    assert safe_torch_load(plain, "cpu", True) == {"step": 3}
    unsealed = TorchCheckpointIO(checksums=False)
    unsealed.checkpoint_io_save(checkpoint={"step": 4}, path=str(tmp_path / "off.pt"), storage_options=None)
    assert zipfile.ZipFile(tmp_path / "off.pt").comment == b""
    sealed_path = tmp_path / "on.pt"
    TorchCheckpointIO().checkpoint_io_save(checkpoint={"w": torch.ones(8)}, path=str(sealed_path), storage_options=None)
    content = sealed_path.read_bytes()
    sealed_path.write_bytes(flipped(content, _data_offset(content, "data/0") + 1, 0))
    assert unsealed.checkpoint_io_load(path=str(sealed_path), map_location="cpu", weights_only=True)["w"][0] != 1
    with pytest.raises(core.ConfigurationError, match=r"TorchCheckpointIO\(checksums='yes'\): expected True or False"):
        TorchCheckpointIO(checksums="yes")  # type: ignore[arg-type]


def test_the_writer_refuses_to_seal_what_is_not_a_zip_archive() -> None:
    writer = ChecksumWriter(io.BytesIO())
    writer.write(b"not a zip archive at all, only some bytes")
    with pytest.raises(core.CheckpointError, match="did not end the checkpoint with a zip end record"):
        writer.seal()


def test_an_object_torch_cannot_pickle_is_a_checkpoint_error_and_the_old_file_stays(tmp_path: Path) -> None:
    path = tmp_path / "kept.pt"
    atomic_torch_save({"v": 1}, path)

    def local() -> None:
        return None

    with pytest.raises(core.CheckpointError, match=r"could not be saved to .*kept\.pt': AttributeError: Can't"):
        TorchCheckpointIO().checkpoint_io_save(checkpoint={"v": local}, path=str(path), storage_options=None)
    assert safe_torch_load(path, "cpu", True) == {"v": 1}
    assert [entry.name for entry in tmp_path.iterdir()] == ["kept.pt"]
