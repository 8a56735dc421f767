"""Activation checkpointing (``core.toolkit.strategies.checkpoint_activations``) in one process, and the policy forms.

On the small GPT of ``memory_jobs/gpt.py`` (most activations inside its blocks): the bytes autograd saves for
backward fall by at least 60 % with every ``Block`` checkpointed and by about half with every second one; gradients
equal the run without it (fp32, 1e-6); state-dict keys are unchanged, so checkpoints cross both ways. The same under
Lite's ``single_device`` strategy, and compiled. Process-group strategies: ``test_activation_checkpointing_jobs.py``.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import cast

import pytest
import torch
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy

import core
from core.toolkit.strategies import (
    EveryNth,
    SingleDeviceStrategy,
    check_activation_checkpointing_policy,
    checkpoint_activations,
    checkpointed_modules,
    is_checkpointed,
    saved_tensor_bytes,
)

sys.path.insert(0, str(Path(__file__).parent / "memory_jobs"))
from gpt import Block, ReferenceBlock, batch, gpt, loss_of


def _saved_and_gradients(model: torch.nn.Module) -> tuple[int, dict[str, torch.Tensor]]:
    tokens, targets = batch(1)
    with saved_tensor_bytes() as saved:
        loss = loss_of(model, tokens, targets)
    loss.backward()
    return saved[0], {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _assert_same_gradients(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> None:
    assert left.keys() == right.keys()
    for name in left:
        torch.testing.assert_close(left[name], right[name], rtol=0, atol=1e-6, msg=name)


def test_every_block_saves_at_least_sixty_percent_and_every_second_about_half_with_equal_gradients() -> None:
    plain_bytes, plain_gradients = _saved_and_gradients(gpt())

    every = gpt()
    assert len(checkpoint_activations(every, {Block})) == 4
    every_bytes, every_gradients = _saved_and_gradients(every)

    second = gpt()
    chosen = checkpoint_activations(second, EveryNth({Block}, 2))
    assert chosen == [second.layers[1], second.layers[3]]  # torchtitan's count: the 2nd and the 4th block
    second_bytes, second_gradients = _saved_and_gradients(second)

    assert every_bytes <= 0.4 * plain_bytes, (every_bytes, plain_bytes)
    assert 0.4 <= second_bytes / plain_bytes <= 0.6, (second_bytes, plain_bytes)
    _assert_same_gradients(every_gradients, plain_gradients)
    _assert_same_gradients(second_gradients, plain_gradients)


def test_keys_stay_and_checkpoints_cross_both_ways() -> None:
    checkpointed, plain = gpt(0), gpt(1)
    checkpoint_activations(checkpointed, {Block})
    keys = list(gpt().state_dict())
    assert list(checkpointed.state_dict()) == keys
    assert not any("_checkpoint_wrapped_module" in key for key in keys)
    plain.load_state_dict(checkpointed.state_dict())  # with -> without
    for name, value in checkpointed.state_dict().items():
        assert torch.equal(plain.state_dict()[name], value)
    again = gpt(2)
    checkpoint_activations(again, {Block})
    again.load_state_dict(plain.state_dict())  # without -> with
    _assert_same_gradients(_saved_and_gradients(again)[1], _saved_and_gradients(plain)[1])


def test_policy_forms_select_the_same_blocks() -> None:
    model = gpt()
    blocks = list(model.layers)
    assert checkpointed_modules(model, {Block}) == blocks
    assert checkpointed_modules(model, Block) == blocks
    assert checkpointed_modules(model, [Block, ReferenceBlock]) == blocks
    assert checkpointed_modules(model, lambda module: isinstance(module, Block)) == blocks
    # Lightning's FSDP1-style policy (module, recurse, nonwrapped_numel): blocks are the outermost with >= 10k.
    size_policy = functools.partial(size_based_auto_wrap_policy, min_num_params=10_000)
    assert checkpointed_modules(model, size_policy) == [model]  # the root itself has more: outermost wins
    assert checkpointed_modules(model.layers, size_policy) == blocks  # torch's policy never picks a ModuleList
    assert checkpointed_modules(model, EveryNth(lambda module: isinstance(module, Block), 3)) == [blocks[2]]
    assert checkpointed_modules(model, {ReferenceBlock}) == []
    assert checkpointed_modules(model, None) == []


def test_applying_twice_changes_nothing() -> None:
    from torch.distributed._composable import checkpoint

    model = gpt()
    checkpoint(model.layers[0])  # torch's composable checkpoint, applied by the user: left as it is
    checkpoint_activations(model, {Block})
    forwards = [block.__dict__.get("forward") for block in model.layers]
    checkpoint_activations(model, {Block})  # a second application would recompute twice; the helper skips
    assert [block.__dict__.get("forward") for block in model.layers] == forwards
    assert forwards[0] is None and all(forward is not None for forward in forwards[1:])
    assert all(is_checkpointed(block) for block in model.layers)
    assert not is_checkpointed(model)


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        (3, "is not a policy"),
        ("Block", "is not a policy"),
        ({int}, "got [<class 'int'>]"),
        (set(), "got no classes"),
        (True, "is not a policy"),
    ],
)
def test_a_malformed_policy_is_refused_when_the_strategy_is_made(policy: object, says: str) -> None:
    refused = r"SingleDeviceStrategy\(activation_checkpointing_policy="
    with pytest.raises(core.ConfigurationError, match=refused) as error:
        SingleDeviceStrategy(activation_checkpointing_policy=policy)  # type: ignore[arg-type]
    assert says in str(error.value)
    with pytest.raises(core.ConfigurationError, match="EveryNth\\(n=0\\)"):
        EveryNth({Block}, 0)
    assert check_activation_checkpointing_policy("X", None) is None


def _lite_run(policy: object, compile: bool) -> tuple[int, dict[str, torch.Tensor], list[str]]:
    strategy = SingleDeviceStrategy(activation_checkpointing_policy=policy)  # type: ignore[arg-type]
    lite = core.Lite(accelerator="cpu", devices=1, strategy=strategy)
    model = gpt()
    set_up = lite.setup_module(cast(torch.nn.Module, torch.compile(model)) if compile else model)
    tokens, targets = batch(1)
    with saved_tensor_bytes() as saved:
        loss = loss_of(set_up, tokens, targets)
    lite.backward(loss)
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return saved[0], gradients, list(set_up.state_dict())


def test_single_device_strategy_option_under_lite_eager_and_compiled() -> None:
    plain_bytes, plain_gradients, plain_keys = _lite_run(None, compile=False)
    ac_bytes, ac_gradients, ac_keys = _lite_run({Block}, compile=False)
    assert ac_bytes <= 0.4 * plain_bytes
    assert ac_keys == plain_keys
    _assert_same_gradients(ac_gradients, plain_gradients)
    _, compiled_gradients, compiled_keys = _lite_run({Block}, compile=True)
    assert compiled_keys == plain_keys  # no _orig_mod., no _checkpoint_wrapped_module.
    for name, value in plain_gradients.items():  # inductor fuses differently: float32 rounding, not bitwise
        torch.testing.assert_close(compiled_gradients[name], value, rtol=0, atol=1e-5, msg=name)
