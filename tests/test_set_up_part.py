"""``core.toolkit.strategies.set_up_part``: what a strategy made of a module at set-up, or an error naming the fix."""

from __future__ import annotations

import pytest
import torch

from core import ConfigurationError
from core.toolkit.strategies import set_up_part


class Wrapper(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner


def test_the_wrapper_is_found_at_the_root_or_inside() -> None:
    wrapped = Wrapper(torch.nn.Linear(2, 2))
    assert set_up_part(wrapped, Wrapper, "mine") is wrapped
    outer = torch.nn.Sequential(torch.nn.ReLU(), wrapped)
    assert set_up_part(outer, Wrapper, "mine") is wrapped


def test_a_module_the_strategy_did_not_set_up_is_refused_with_what_to_pass() -> None:
    with pytest.raises(ConfigurationError) as caught:
        set_up_part(torch.nn.Linear(2, 2), Wrapper, "mine", needed_by="no_backward_sync")
    assert str(caught.value) == (
        "no_backward_sync needs a module set up by the 'mine' strategy, but Linear is not wrapped in Wrapper and "
        "holds none; pass the module that setup() / setup_module() returned."
    )
