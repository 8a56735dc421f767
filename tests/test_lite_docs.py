"""docs/lite.md stays true: both loops of the conversion guide run, and every public Lite name is documented."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import core

DOC = (Path(__file__).resolve().parents[1] / "docs" / "lite.md").read_text()


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in ("CORE_GLOBAL_SEED", "CORE_SEED_WORKERS"):
        monkeypatch.delenv(variable, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def code_after(heading: str) -> dict[str, Any]:
    """Execute the first python block after ``heading`` as a module that is not __main__."""
    source = DOC.split(heading, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {"__name__": "lite_docs_example"}
    exec(compile(source, f"docs/lite.md ({heading})", "exec"), namespace)
    return namespace


def accuracy(output: str) -> float:
    (found,) = re.findall(r"^test accuracy: (\d\.\d{4})$", output, flags=re.MULTILINE)
    return float(found)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_both_loops_of_the_conversion_guide_train(capsys: pytest.CaptureFixture[str]) -> None:
    code_after("### Before: the raw loop")["train"](epochs=5)
    raw = accuracy(capsys.readouterr().out)

    core.Lite(accelerator="cpu", devices=1).launch(code_after("### After: the same loop with Lite")["train"], 5)
    converted = accuracy(capsys.readouterr().out)

    assert raw >= 0.93 and converted >= 0.93


def public_names() -> list[str]:
    return sorted(name for name in dir(core.Lite) if not name.startswith("_"))


@pytest.mark.parametrize("name", public_names())
def test_every_public_name_of_lite_is_documented(name: str) -> None:
    assert f"### `{name}(" in DOC or f"| `{name}` " in DOC, f"docs/lite.md does not document Lite.{name}"
