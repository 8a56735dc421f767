"""Hostlist expansion, against hand-written cases, an independent model, and SLURM's own scontrol."""

from __future__ import annotations

import itertools

import pytest
from core_slurm import expand_hostlist, first_host
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slurm_cluster import SlurmCluster

from core import ConfigurationError


@pytest.mark.parametrize(
    ("expression", "hosts"),
    [
        ("localhost", ["localhost"]),
        ("node[001-004,010],gpu-a[1-2]", ["node001", "node002", "node003", "node004", "node010", "gpu-a1", "gpu-a2"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("x[1-010]", [f"x{i}" for i in range(1, 11)]),  # the lower bound sets the width, as in SLURM
        ("rack[1-2]-node[3-4]", ["rack1-node3", "rack1-node4", "rack2-node3", "rack2-node4"]),
        ("a[1-2],a[1-2]", ["a1", "a2", "a1", "a2"]),
        ("host0 host1,host3", ["host0", "host1", "host3"]),
        ("c[5]", ["c5"]),
        ("c[5-5]", ["c5"]),
        ("a[1-2]b", ["a1b", "a2b"]),
        (" spaced ,  list ", ["spaced", "list"]),
    ],
)
def test_expands_like_slurm(expression: str, hosts: list[str]) -> None:
    assert expand_hostlist(expression) == hosts
    assert first_host(expression) == hosts[0]


@pytest.mark.parametrize(
    ("expression", "complaint"),
    [
        ("n[1-3", "'[' without ']'"),
        ("n1-3]", "']' without '['"),
        ("n[[1-3]]", "brackets cannot nest"),
        ("n[3-1]", "runs backwards"),
        ("n[a-b]", "not a number or a range"),
        ("n[]", "not a number or a range"),
    ],
)
def test_malformed_hostlists_name_the_problem(expression: str, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match="Cannot read the SLURM hostlist") as raised:
        expand_hostlist(expression)
    assert complaint in str(raised.value) and expression in str(raised.value)


def test_first_host_of_a_huge_range_is_immediate() -> None:
    assert first_host("node[0000001-9999999],other") == "node0000001"


def test_an_empty_hostlist_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="names no host"):
        first_host(" , ")


# -- property: render a random structure, expand it, compare with the structure's own product ------------------

Span = tuple[int, int, int]  # low, high, width


@st.composite
def spans(draw: st.DrawFn) -> list[Span]:
    result = []
    for _ in range(draw(st.integers(1, 3))):
        low = draw(st.integers(0, 150))
        width = draw(st.integers(len(str(low)), 4))
        high = low + draw(st.integers(0, 12))
        result.append((low, high, width))
    return result


def render(spans_: list[Span], with_range: list[bool]) -> str:
    parts = []
    for (low, high, width), as_range in zip(spans_, with_range, strict=True):
        parts.append(f"{low:0{width}d}-{high:0{width}d}" if as_range and high > low else f"{low:0{width}d}")
    return "[" + ",".join(parts) + "]"


def numbers(spans_: list[Span], with_range: list[bool]) -> list[str]:
    out: list[str] = []
    for (low, high, width), as_range in zip(spans_, with_range, strict=True):
        top = high if as_range and high > low else low
        out.extend(f"{n:0{width}d}" for n in range(low, top + 1))
    return out


prefixes = st.from_regex(r"[a-z][a-z-]{0,6}", fullmatch=True)


@st.composite
def items(draw: st.DrawFn) -> tuple[str, list[str]]:
    """One hostlist item and its hosts: a plain name, ``prefix[...]`` or ``prefix[...]-sub[...]``."""
    shape = draw(st.sampled_from(["plain", "one", "two"]))
    if shape == "plain":
        name = draw(prefixes) + str(draw(st.integers(0, 999)))
        return name, [name]
    groups = []
    for index in range(1 if shape == "one" else 2):
        prefix = draw(prefixes) if index == 0 else "-" + draw(prefixes)
        spans_ = draw(spans())
        as_range = [draw(st.booleans()) for _ in spans_]
        groups.append((prefix, render(spans_, as_range), numbers(spans_, as_range)))
    text = "".join(prefix + bracket for prefix, bracket, _ in groups)
    hosts = [
        "".join(prefix + number for (prefix, _, _), number in zip(groups, combo, strict=True))
        for combo in itertools.product(*(nums for _, _, nums in groups))
    ]
    return text, hosts


hostlists = st.lists(items(), min_size=1, max_size=4)


@given(hostlists, st.sampled_from([",", " "]))
def test_expansion_matches_the_model(parts: list[tuple[str, list[str]]], separator: str) -> None:
    expression = separator.join(text for text, _ in parts)
    expected = [host for _, hosts in parts for host in hosts]
    assert expand_hostlist(expression) == expected
    assert first_host(expression) == expected[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=hostlists)
def test_expansion_matches_scontrol_show_hostnames(
    slurm_cluster: SlurmCluster, parts: list[tuple[str, list[str]]]
) -> None:
    expression = ",".join(text for text, _ in parts)
    result = slurm_cluster.run(["scontrol", "show", "hostnames", expression], timeout=10)
    assert expand_hostlist(expression) == result.stdout.split()
