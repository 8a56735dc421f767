"""Parsing of the ``devices`` argument, following the table in Lightning's GPU guide.

| input      | meaning                         |
|------------|---------------------------------|
| ``3``      | a count: the first 3 devices    |
| ``"3"``    | the same count, as a string     |
| ``[1, 3]`` | the devices with indices 1 and 3|
| ``"1, 3"`` | the same indices, as a string   |
| ``-1``     | every visible device            |
| ``"-1"``   | the same, as a string           |
| ``"auto"`` | the accelerator's default       |

``0``, ``[]``, duplicate indices, bools and negative numbers other than ``-1`` are errors.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from core._checks import is_whole
from core._errors import ConfigurationError

DevicesInput = int | str | Sequence[int]

_HELP = (
    "expected a positive count (2 or '2'), device indices ([0, 1] or '0, 1'), -1 or '-1' for every "
    "visible device, or 'auto'"
)


@attrs.frozen
class DeviceRequest:
    """A syntactically valid ``devices`` value. Exactly one of the fields describes it."""

    count: int | None = None
    indices: tuple[int, ...] | None = None
    all_visible: bool = False
    auto: bool = False

    def __str__(self) -> str:
        if self.auto:
            return "'auto'"
        if self.all_visible:
            return "-1 (all visible devices)"
        if self.indices is not None:
            return f"indices {list(self.indices)}"
        return f"{self.count} device(s)"


def _error(devices: object, problem: str) -> ConfigurationError:
    return ConfigurationError(f"Invalid devices={devices!r}: {problem}; {_HELP}.")


def _from_int(devices: object, value: int) -> DeviceRequest:
    if value == -1:
        return DeviceRequest(all_visible=True)
    if value == 0:
        raise _error(devices, "zero devices would run nothing")
    if value < 0:
        raise _error(devices, "negative numbers other than -1 have no meaning")
    return DeviceRequest(count=value)


def _from_indices(devices: object, values: Sequence[object]) -> DeviceRequest:
    if len(values) == 0:
        raise _error(devices, "an empty list selects no device")
    indices: list[int] = []
    for value in values:
        if not is_whole(value):
            raise _error(devices, f"the index {value!r} is not an int")
        if value < 0:
            raise _error(devices, f"the index {value} is negative")
        indices.append(value)
    if len(set(indices)) != len(indices):
        duplicates = sorted({index for index in indices if indices.count(index) > 1})
        raise _error(devices, f"the indices {duplicates} appear more than once")
    return DeviceRequest(indices=tuple(sorted(indices)))


def _parse_int_token(devices: object, token: str) -> int:
    try:
        return int(token.strip())
    except ValueError:
        raise _error(devices, f"{token.strip()!r} is not a whole number") from None


def parse_devices(devices: object) -> DeviceRequest:
    """Check the syntax of ``devices`` and return what it asks for.

    Raises :class:`core.ConfigurationError`, never another exception, for any input it rejects.
    """
    if isinstance(devices, bool):
        raise _error(devices, "a bool is not a number of devices")
    if isinstance(devices, int):
        return _from_int(devices, devices)
    if isinstance(devices, str):
        text = devices.strip()
        if text.lower() == "auto":
            return DeviceRequest(auto=True)
        if "," in text:
            tokens = [token for token in text.split(",") if token.strip()]
            return _from_indices(devices, [_parse_int_token(devices, token) for token in tokens])
        if not text:
            raise _error(devices, "the string is empty")
        return _from_int(devices, _parse_int_token(devices, text))
    if isinstance(devices, (list, tuple)):
        return _from_indices(devices, devices)
    raise _error(devices, f"a {type(devices).__name__} is not accepted")
