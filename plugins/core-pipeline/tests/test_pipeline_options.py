"""How a model is cut, and the pipeline's declared incompatibilities, checked before (or without) a second process."""

from __future__ import annotations

import json
from pathlib import Path

import nd_transformer as nd
import pytest
import torch
from core_pipeline import PipelineStrategy, prune, split_at, view
from nd_jobs import Job
from torch import nn

import core


def test_split_points_cut_inside_containers_and_keep_whole_submodules_elsewhere() -> None:
    split = split_at(nd.model(), ["layers.2"])
    assert split.stages == (("embed", "layers.0", "layers.1"), ("layers.2", "layers.3", "norm", "head"))
    assert split_at(nd.model(), ["norm"]).stages == (("embed", "layers"), ("norm", "head"))
    assert split_at(nd.model(), []).stages == (("embed", "layers", "norm", "head"),)


def test_a_stage_view_shares_the_parameters_and_keeps_the_whole_models_names() -> None:
    model = nd.model()
    first = view(model, ["embed", "layers.0", "layers.1"])
    assert sorted({key.split(".")[0] for key in first.state_dict()}) == ["embed", "layers"]
    assert first.embed is model.embed and first.norm is None and first.head is None
    assert list(first.layers) == ["0", "1"] and list(model.layers) == ["0", "1", "2", "3"]  # the model is untouched
    tokens = torch.zeros(2, nd.SEQUENCE, dtype=torch.long)
    assert first(tokens).shape == (2, nd.SEQUENCE, nd.DIM)  # the forward skips what the stage does not hold
    prune(model, [*first.parameters(), *first.buffers()])
    assert list(model.state_dict()) == list(first.state_dict())


@pytest.mark.parametrize(
    ("points", "message"),
    [
        (["layers.9"], r"\['layers.9'\] name no submodule of TinyTransformer"),
        (["layers.3", "layers.1"], r"not in the model's order: 'layers.1' comes before 'layers.3'"),
        (["embed"], r"leave stage\(s\) \[0\] without any submodule"),
        (["layers.1", "layers.1"], "names a submodule twice"),
    ],
)
def test_bad_split_points_say_what_is_wrong(points: list[str], message: str) -> None:
    with pytest.raises(core.ConfigurationError, match=message):
        split_at(nd.model(), points)


def test_a_split_through_a_module_with_tensors_of_its_own_is_refused() -> None:
    model = nd.model()
    model.position = nn.Parameter(torch.zeros(nd.SEQUENCE, nd.DIM))
    with pytest.raises(core.ConfigurationError, match=r"cuts through 'TinyTransformer', which holds tensors of its"):
        split_at(model, ["layers.2"])


def test_weights_tied_across_stages_are_refused() -> None:
    model = nd.model()
    model.head.weight = model.embed.weight  # type: ignore[union-attr]
    with pytest.raises(core.ConfigurationError, match=r"'head.weight' is shared by stages 0 and 1 \(tied weights\)"):
        split_at(model, ["layers.2"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"split_points": ["layers.2"], "schedule": "ZeroBubble"}, r"is not a schedule; expected one of \['GPipe'"),
        ({"split_points": ["layers.2"], "stage_fn": view}, "takes one way to cut the model, not both"),
        ({"stage_fn": view}, r"needs num_stages= \(a positive int\)"),
        ({"split_points": "layers.2"}, "expected a list of submodule names"),
        ({"split_points": ["layers.1", "layers.2"], "schedule": "Interleaved1F1B"},
         r"3 stage\(s\) cannot be dealt evenly"),
        ({"split_points": ["layers.2"], "schedule": "1F1B", "stages_per_rank": 2}, "runs one stage per rank"),
        ({"split_points": ["layers.2"], "n_microbatches": 0}, r"n_microbatches=0\): expected a positive int"),
    ],
)
def test_contradictory_options_are_refused_when_the_strategy_is_made(options: dict[str, object], message: str) -> None:
    with pytest.raises(core.ConfigurationError, match=message):
        PipelineStrategy(**options)  # type: ignore[arg-type]


def test_the_bare_alias_resolves_and_its_launch_asks_for_a_split_before_starting_processes() -> None:
    info = core.discover().lookup("strategy", "pipeline")
    assert info.distribution == "core-pipeline" and info.requires_core
    lite = core.Lite(accelerator="cpu", strategy="pipeline", devices=2)
    with pytest.raises(core.ConfigurationError, match=r"PipelineStrategy\(split_points=\[...\], loss_fn=...\)"):
        lite.launch(lambda lite: None)


def test_a_pipeline_that_does_not_fit_the_world_size_fails_before_any_process_starts() -> None:
    three = PipelineStrategy(split_points=["layers.1", "layers.2"], loss_fn=nd.loss_fn)
    with pytest.raises(core.ConfigurationError) as raised:
        core.Lite(accelerator="cpu", strategy=three, devices=2)
    assert "3 stage(s) / 1 per rank (1F1B) = pipeline_parallel_size 3, which does not divide the world size 2" in str(
        raised.value
    )
    with pytest.raises(core.ConfigurationError, match=r"data_parallel_size \(2\) x pipeline_parallel_size \(2\) = 4"):
        core.Lite(accelerator="cpu", strategy=PipelineStrategy(split_points=["layers.2"], data_parallel_size=2),
                  devices=2)
    with pytest.raises(core.ConfigurationError, match=r"does not support the precision '16-mixed'.*bf16-mixed"):
        core.Lite(accelerator="cpu", strategy=PipelineStrategy(split_points=["layers.2"]), devices=2,
                  precision="16-mixed")


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_a_training_step_outside_the_schedule_is_refused(tmp_path: Path, job: Job) -> None:
    # In their own process: a run of the ddp family exports the rank variables into the process that launches it.
    job("pp_mistakes.py", str(tmp_path))
    found = json.loads((tmp_path / "mistakes.json").read_text())
    expected = {
        "odd batch": "A batch of 3 samples cannot be cut into n_microbatches=2 equal micro-batches",
        "no target": "a training step is model(inputs, target=targets)",
        "own loss": "backward(loss) takes that returned loss, unchanged",
        "no loss_fn": "needs PipelineStrategy(loss_fn=...)",
        "accumulate": "accumulate_grad_batches > 1 scales the loss, so it is not supported",
    }
    for mistake, fragment in expected.items():
        assert found[mistake] is not None, f"{mistake!r} was not refused"
        kind, message = found[mistake]
        assert kind == "ConfigurationError" and fragment in message, (mistake, message)
