"""core._checks.is_whole: the count check every flag of core uses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core._checks import is_whole


@given(st.integers(), st.integers(min_value=-5, max_value=5))
def test_an_int_is_whole_exactly_when_it_reaches_the_minimum(value: int, minimum: int) -> None:
    assert is_whole(value) and is_whole(value, minimum) is (value >= minimum)


@given(st.one_of(st.booleans(), st.floats(), st.text(), st.none(), st.decimals(allow_nan=False)))
def test_bools_floats_and_anything_else_are_not(value: object) -> None:
    assert not is_whole(value) and not is_whole(value, 0)
