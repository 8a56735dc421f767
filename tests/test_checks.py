"""Whole-number checks, public as core.toolkit.is_whole / check_whole / read_whole: every flag of core uses them,
and every first-party plugin refuses a bad count or a bad launcher variable through them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import core
import core.toolkit
from core.toolkit import check_whole, is_whole, read_whole


@given(st.integers(), st.integers(min_value=-5, max_value=5))
def test_an_int_is_whole_exactly_when_it_reaches_the_minimum(value: int, minimum: int) -> None:
    assert is_whole(value) and is_whole(value, minimum) is (value >= minimum)


@given(st.one_of(st.booleans(), st.floats(), st.text(), st.none(), st.decimals(allow_nan=False)))
def test_bools_floats_and_anything_else_are_not(value: object) -> None:
    assert not is_whole(value) and not is_whole(value, 0)


# ------------------------------------------------------------------------------------------ check_whole


@given(st.integers(min_value=-3, max_value=3), st.integers())
def test_check_whole_returns_a_number_that_reaches_the_minimum_and_names_any_other(minimum: int, value: int) -> None:
    if value >= minimum:
        assert check_whole("Owner", "size", value, minimum) == value
    else:
        with pytest.raises(core.ConfigurationError) as refused:
            check_whole("Owner", "size", value, minimum)
        assert str(refused.value) == f"Owner(size={value!r}): expected a whole number >= {minimum}."


@pytest.mark.parametrize("value", [True, False, 2.0, "2", None, [2]])
def test_check_whole_refuses_what_is_not_an_int_naming_it_as_the_user_wrote_it(value: object) -> None:
    with pytest.raises(core.ConfigurationError) as refused:
        check_whole("MyStrategy", "buckets", value, 0)
    message = str(refused.value)
    assert message.startswith(f"MyStrategy(buckets={value!r}): expected a whole number >= 0"), message
    # True is 1 to Python: the message says why it is refused anyway.
    assert ("True and False are not numbers here" in message) is isinstance(value, bool), message


# ------------------------------------------------------------------------------------------- read_whole


@given(st.integers(min_value=0, max_value=10**30), st.sampled_from(["", " ", "\t", "  \n"]),
       st.sampled_from(["", " ", "\n"]))
def test_read_whole_reads_the_digits_a_launcher_writes_with_spaces_around(number: int, before: str, after: str) -> None:
    assert read_whole("RANK", f"{before}{number}{after}") == number
    assert read_whole("RANK", f"{number:03d}") == number  # leading zeros: still the number


# Every text that is not digits (with spaces around): an empty or blank one, signs, fractions, exponents,
# underscores (int() takes "1_000"), other scripts' digits (int() takes "٣"), words.
NOT_DIGITS = st.one_of(
    st.text().filter(lambda text: re.fullmatch(r"\s*[0-9]+\s*", text) is None),
    st.sampled_from(["", " ", "-1", "+3", "1.0", "1e3", "1_000", "٣", "0x10", "four", "2 3"]),
)


@given(NOT_DIGITS)
def test_read_whole_refuses_any_other_text_naming_the_variable_its_text_its_source_and_the_fix(raw: str) -> None:
    with pytest.raises(core.ConfigurationError) as refused:
        read_whole("SLURM_PROCID", raw, source="SLURM", hint="SLURM sets it to one: run under srun.")
    assert str(refused.value) == (
        f"The SLURM variable SLURM_PROCID={raw!r} is not a whole number; SLURM sets it to one: run under srun."
    )


@given(st.integers(min_value=1, max_value=5), st.integers(min_value=0, max_value=10))
def test_read_whole_refuses_a_number_below_the_minimum_saying_which(minimum: int, number: int) -> None:
    if number >= minimum:
        assert read_whole("WORLD_SIZE", str(number), minimum=minimum) == number
        return
    with pytest.raises(core.ConfigurationError) as refused:
        read_whole("WORLD_SIZE", str(number), minimum=minimum)
    assert str(refused.value) == (
        f"The environment variable WORLD_SIZE='{number}' is not a whole number >= {minimum}."
    )


# -------------------------------------------------------------------------- the toolkit exports them


def test_every_name_the_toolkit_exports_resolves_and_the_whole_number_checks_are_among_them() -> None:
    assert {"is_whole", "check_whole", "read_whole"} <= set(core.toolkit.__all__)
    for name in core.toolkit.__all__:
        assert getattr(core.toolkit, name) is not None, name
    assert set(core.toolkit.__all__) <= set(dir(core.toolkit))


def test_the_checks_come_without_torch() -> None:
    """Environment plugins read their variables through read_whole: the import must stay as light as ``core``."""
    code = "import sys; from core.toolkit import check_whole, is_whole, read_whole; print('torch' in sys.modules)"
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONWARNINGS": "error"})
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "False"
