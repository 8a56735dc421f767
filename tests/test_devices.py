"""``devices`` parsing follows the table in Lightning's GPU guide; everything else is a CoreError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import core
from core.registry._devices import DeviceRequest, parse_devices


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        (3, DeviceRequest(count=3)),
        ("3", DeviceRequest(count=3)),
        (" 3 ", DeviceRequest(count=3)),
        ([1, 3], DeviceRequest(indices=(1, 3))),
        ((3, 1), DeviceRequest(indices=(1, 3))),
        ("1, 3", DeviceRequest(indices=(1, 3))),
        ("1,", DeviceRequest(indices=(1,))),
        ([0], DeviceRequest(indices=(0,))),
        (-1, DeviceRequest(all_visible=True)),
        ("-1", DeviceRequest(all_visible=True)),
        ("auto", DeviceRequest(auto=True)),
        ("AUTO", DeviceRequest(auto=True)),
    ],
)
def test_accepted_inputs(devices: object, expected: DeviceRequest) -> None:
    assert parse_devices(devices) == expected


@pytest.mark.parametrize(
    ("devices", "reason"),
    [
        (0, "zero devices"),
        ("0", "zero devices"),
        ([], "empty list"),
        ([1, 1], "appear more than once"),
        ("2, 2", "appear more than once"),
        (True, "bool"),
        (False, "bool"),
        ([True], "not an int"),
        (-2, "negative"),
        ("-3", "negative"),
        ([0, -1], "negative"),
        ("", "empty"),
        ("two", "not a whole number"),
        (1.5, "float"),
        (None, "NoneType"),
        ({0: 1}, "dict"),
    ],
)
def test_rejected_inputs_name_the_value_and_the_choices(devices: object, reason: str) -> None:
    with pytest.raises(core.ConfigurationError) as excinfo:
        parse_devices(devices)
    message = str(excinfo.value)
    assert f"devices={devices!r}" in message
    assert reason in message
    assert "'auto'" in message  # the list of accepted forms


def _describes_valid_request(request: DeviceRequest) -> bool:
    if request.auto or request.all_visible:
        return request.count is None and request.indices is None
    if request.count is not None:
        return request.count > 0 and request.indices is None
    assert request.indices is not None
    return list(request.indices) == sorted(set(request.indices)) and all(i >= 0 for i in request.indices)


anything = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=5) | st.tuples(children, children),
    max_leaves=8,
)
device_strings = st.lists(st.integers(-3, 40).map(str) | st.sampled_from([" ", "", "x", "-1", "auto"]), max_size=5).map(
    ", ".join
)


@given(st.one_of(anything, device_strings, st.lists(st.integers(-2, 64), max_size=8)))
def test_every_input_is_a_valid_request_or_a_core_error(devices: object) -> None:
    try:
        request = parse_devices(devices)
    except core.CoreError:
        return
    assert _describes_valid_request(request)


@given(st.lists(st.integers(0, 512), min_size=1, max_size=16, unique=True))
def test_index_lists_and_their_string_form_agree(indices: list[int]) -> None:
    as_list = parse_devices(indices)
    as_text = parse_devices(", ".join(map(str, indices)) + ("," if len(indices) == 1 else ""))
    assert as_list == as_text == DeviceRequest(indices=tuple(sorted(indices)))


@given(st.integers(1, 10**6))
def test_counts_as_int_and_string_agree(count: int) -> None:
    assert parse_devices(count) == parse_devices(str(count)) == DeviceRequest(count=count)
