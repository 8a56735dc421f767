"""The DeepSpeed config of a run, and what is refused before any process starts: keywords, then the precision,
then the user's config on top; aliases as Lightning names them; combinations DeepSpeed cannot run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import core_deepspeed
import pytest
import torch
from core_deepspeed import DeepSpeedStrategy, ZeroSettings, build_config, check_weights_only, read_tag, save_sharded

import core

ALIASES = {
    "deepspeed": (2, False, False),
    "deepspeed_stage_1": (1, False, False),
    "deepspeed_stage_2": (2, False, False),
    "deepspeed_stage_2_offload": (2, True, False),
    "deepspeed_stage_3": (3, False, False),
    "deepspeed_stage_3_offload": (3, True, True),
}


def resolved(strategy: object, precision: str = "32-true") -> DeepSpeedStrategy:
    active = core.resolve(accelerator="cpu", strategy=strategy, devices=2, precision=precision)
    plugin = active.strategy
    assert isinstance(plugin, DeepSpeedStrategy)
    return plugin


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_each_alias_selects_the_stage_and_offload_lightning_gives_it(alias: str) -> None:
    strategy = resolved(alias)

    stage, offload_optimizer, offload_parameters = ALIASES[alias]
    assert strategy.name == alias
    assert strategy.settings == ZeroSettings(stage, offload_optimizer, offload_parameters)
    zero = strategy.config["zero_optimization"]
    assert zero["stage"] == stage
    assert ("offload_optimizer" in zero, "offload_param" in zero) == (offload_optimizer, offload_parameters)
    assert strategy.config["zero_allow_untested_optimizer"] is True  # torch optimizers, as Lite users pass them


def test_keywords_give_defaults_and_an_explicit_config_wins_key_by_key() -> None:
    config = {
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "gradient_clipping": 0.5,
        "train_micro_batch_size_per_gpu": 8,
    }
    strategy = resolved(DeepSpeedStrategy(stage=2, offload_optimizer=True, gradient_clipping=1.0, config=config))

    merged = strategy.config
    assert merged["zero_optimization"] == {
        "stage": 3,  # config= over stage=2
        "offload_optimizer": {"device": "cpu", "pin_memory": False},  # a keyword the config does not mention stays
        "stage3_param_persistence_threshold": 0,
    }
    assert merged["gradient_clipping"] == 0.5
    assert merged["train_micro_batch_size_per_gpu"] == 8
    assert config["zero_optimization"] == {"stage": 3, "stage3_param_persistence_threshold": 0}  # not modified


def test_a_json_config_file_is_read_and_a_bad_one_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 1}, "gradient_clipping": 2.0}))
    strategy = resolved(DeepSpeedStrategy(config=path))
    assert strategy.config["zero_optimization"]["stage"] == 1 and strategy.config["gradient_clipping"] == 2.0

    path.write_text("{'stage': 1}")
    with pytest.raises(core.ConfigurationError, match=r"ds_config.json'\) is not valid JSON"):
        DeepSpeedStrategy(config=path)
    with pytest.raises(core.ConfigurationError, match=r"missing.json'\) cannot be read"):
        DeepSpeedStrategy(config=tmp_path / "missing.json")
    path.write_text("[1, 2]")
    with pytest.raises(core.ConfigurationError, match=r"holds a list; expected a JSON object"):
        DeepSpeedStrategy(config=path)


@pytest.mark.parametrize(
    ("precision", "section"),
    [("32-true", {}), ("bf16-mixed", {"bf16": {"enabled": True}}), ("bf16-true", {"bf16": {"enabled": True}})],
)
def test_the_precision_becomes_deepspeeds_16_bit_section(precision: str, section: dict[str, object]) -> None:
    config = resolved("deepspeed_stage_2", precision).config
    assert {key: config[key] for key in ("fp16", "bf16") if key in config} == section


@pytest.mark.parametrize("precision", ["16-mixed", "16-true"])
def test_float16_on_the_cpu_is_refused_where_deepspeeds_cpu_accelerator_lacks_it(precision: str) -> None:
    strategy = resolved("deepspeed_stage_2", precision)  # the pair is compatible: resolution accepts it
    assert strategy.config["fp16"] == {"enabled": True}
    if torch.ops.mkldnn._is_mkldnn_fp16_supported():
        return
    with pytest.raises(core.PluginUnavailableError) as refusal:  # this CPU's limit, found when the run starts
        strategy.strategy_setup_environment()
    message = str(refusal.value)
    assert "The accelerator 'cpu' cannot run here in float16 under DeepSpeed" in message
    assert f"(strategy 'deepspeed_stage_2', precision={precision!r})" in message
    assert "AVX512-FP16" in message and "precision='bf16-mixed'" in message


def test_64_true_is_refused_by_the_declared_compatibility() -> None:
    with pytest.raises(core.ConfigurationError) as refusal:
        resolved("deepspeed_stage_3", "64-true")
    message = str(refusal.value)
    assert "strategy 'deepspeed_stage_3' (core-deepspeed) does not support the precision '64-true'" in message
    assert "DeepSpeed runs 32-true, 16-mixed, 16-true, bf16-mixed and bf16-true" in message


def test_a_config_that_contradicts_the_precision_is_refused_naming_both() -> None:
    with pytest.raises(core.ConfigurationError) as refusal:
        resolved(DeepSpeedStrategy(config={"bf16": {"enabled": True}}), "32-true")
    message = str(refusal.value)
    assert "enables ['bf16']" in message and "precision is '32-true'" in message and "float32" in message

    # Refining the precision's own section is fine.
    refined = {"bf16": {"enabled": True, "immediate_grad_update": True}}
    assert resolved(DeepSpeedStrategy(config=refined), "bf16-mixed").config["bf16"] == refined["bf16"]


def test_impossible_keyword_combinations_are_refused_with_the_fix() -> None:
    with pytest.raises(core.ConfigurationError, match=r"stage=0\) is not a ZeRO stage; expected one of \[1, 2, 3\]"):
        DeepSpeedStrategy(stage=0)
    with pytest.raises(core.ConfigurationError, match=r"offload_parameters=True\) needs stage=3.*stage=2"):
        DeepSpeedStrategy(stage=2, offload_parameters=True)
    with pytest.raises(core.ConfigurationError, match=r"gradient_clipping=-1.0\) must be a positive norm"):
        DeepSpeedStrategy(gradient_clipping=-1.0)
    with pytest.raises(core.ConfigurationError, match=r"zero_optimization.stage=4 after merging config="):
        build_config(ZeroSettings(), {"zero_optimization": {"stage": 4}}, "32-true", "deepspeed")
    with pytest.raises(core.ConfigurationError, match=r"offloads parameters .* at stage 2"):
        build_config(ZeroSettings(), {"zero_optimization": {"offload_param": {"device": "cpu"}}}, "32-true", "x")


def test_importing_the_plugin_imports_no_deepspeed() -> None:
    code = "import sys, core_deepspeed; core_deepspeed.deepspeed_stage_3(); print('deepspeed' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "False"


def test_weights_only_accepts_deepspeeds_records_and_refuses_any_other_object(tmp_path: Path) -> None:
    (tmp_path / "latest").write_text("checkpoint\n")
    (tmp_path / "checkpoint").mkdir()
    torch.save({"module": {"weight": torch.ones(2)}, "step": 3}, tmp_path / "checkpoint" / "mp_rank_00_model_states.pt")
    check_weights_only(tmp_path)  # tensors and plain containers

    torch.save({"stats": Path("/etc")}, tmp_path / "checkpoint" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with pytest.raises(core.CheckpointError) as refusal:
        check_weights_only(tmp_path)
    message = str(refusal.value)
    assert "zero_pp_rank_0_mp_rank_00_optim_states.pt' holds objects of ['pathlib" in message
    assert "Pass weights_only=False only for a checkpoint you trust" in message


def test_a_path_that_is_not_a_deepspeed_checkpoint_is_neither_read_nor_overwritten(tmp_path: Path) -> None:
    with pytest.raises(core.CheckpointError, match=r"is not a DeepSpeed checkpoint directory: it has no 'latest'"):
        read_tag(tmp_path)
    precious = tmp_path / "model.pt"
    precious.write_text("not ours")
    with pytest.raises(core.CheckpointError, match=r"exists and is not a DeepSpeed checkpoint .* left untouched"):
        save_sharded(engine=None, path=str(precious), client_state={}, is_global_zero=True, barrier=print)
    assert precious.read_text() == "not ours"


def test_the_strategy_pickles_with_its_options_and_without_the_run() -> None:
    import pickle

    strategy = resolved(DeepSpeedStrategy(stage=3, offload_optimizer=True, config={"gradient_clipping": 1.0}))
    copied = pickle.loads(pickle.dumps(strategy))
    assert (copied.name, copied.settings) == ("deepspeed_stage_3_offload", strategy.settings)
    assert copied.user_config == {"gradient_clipping": 1.0}
    with pytest.raises(core.ConfigurationError, match="has no config before it is resolved into a run"):
        _ = copied.config


def test_the_public_surface() -> None:
    assert set(core_deepspeed.__all__) >= {"DeepSpeedStrategy", "load_consolidated", *ALIASES}
