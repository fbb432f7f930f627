"""Scenario files: the shipped example, the models' rules, one-line errors naming file and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from autotune import config
from autotune.config import (
    ModelSpec,
    Objective,
    Param,
    Scenario,
    latency_key,
    load,
    parse_duration,
)
from autotune.errors import ConfigError
from tests.paths import ROOT

CPU_SMOKE = ROOT / "search_spaces" / "cpu-smoke.yaml"


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load_error(tmp_path: Path, text: str) -> str:
    """The one-line message of the ConfigError that loading `text` raises."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


# --- the shipped scenario and the name ---------------------------------------------------


def test_shipped_cpu_smoke_loads():
    scenario = load(CPU_SMOKE)
    assert scenario.name == "cpu-smoke"
    assert scenario.model.tiny == "tiny" and scenario.model.path is None
    assert scenario.engine.flags == {"enforce-eager": True}
    assert scenario.engine.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert set(scenario.space) == {"max-num-seqs", "block-size", "enable-prefix-caching"}
    assert scenario.space["max-num-seqs"].choices == [1, 4, 16]
    assert scenario.objective.weights == {"throughput": 1.0, "latency": 0.5, "memory": 0.1}
    assert scenario.objective.slos == {"e2el_p95_ms": 2500}
    assert scenario.workload.mode == "capacity"
    assert scenario.budget.trials == 5
    assert parse_duration(scenario.budget.trial_timeout) == 300
    assert scenario.sampler.name == "tpe"


def test_name_defaults_to_file_stem(tmp_path):
    path = write(tmp_path, "model: {tiny: tiny}\n", name="my-study.yaml")
    assert load(path).name == "my-study"


def test_explicit_name_wins_over_file_stem(tmp_path):
    path = write(tmp_path, "name: given\nmodel: {tiny: tiny}\n", name="other.yaml")
    assert load(path).name == "given"


def test_space_keys_take_the_canonical_flag_spelling(tmp_path):
    path = write(tmp_path, """\
        model: {tiny: tiny}
        space:
          max_num_seqs: {choices: [1, 2]}
          --block-size: {choices: [16]}
        """)
    assert set(load(path).space) == {"max-num-seqs", "block-size"}


def test_fixed_and_baseline_flags_are_normalised_when_the_scenario_loads(tmp_path):
    path = write(tmp_path, """\
        model: {tiny: tiny}
        engine: {flags: {max_num_seqs: 8, --enforce-eager: true, max-model-len: null}}
        baselines: [{name: b, flags: {gpu_memory_utilization: 0.9}}]
        """)
    scenario = load(path)
    assert scenario.engine.flags == {"max-num-seqs": 8, "enforce-eager": True}
    assert scenario.baselines[0].flags == {"gpu-memory-utilization": 0.9}


# --- Param -------------------------------------------------------------------------------


def test_param_choices():
    assert Param(choices=["auto", "fp8"]).choices == ["auto", "fp8"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"choices": [1, 2], "low": 1, "high": 2}, "either `choices` or `low`/`high`"),
        ({"choices": []}, "`choices` is empty"),
        ({"low": 1}, "both `low` and `high`"),
        ({}, "both `low` and `high`"),
        ({"low": 8, "high": 2}, "empty range: low 8 > high 2"),
        ({"low": 0, "high": 1, "log": True}, "log range needs low > 0"),
        ({"low": -1, "high": 1, "log": True}, "log range needs low > 0"),
        ({"low": 1, "high": 64, "log": True, "step": 2}, "either `log` or has a `step`"),
        ({"low": 1, "high": 4, "step": 0}, "`step` must be > 0"),
        ({"low": 1, "high": 4, "step": -1}, "`step` must be > 0"),
    ],
)
def test_param_shape_rules(kwargs, message):
    with pytest.raises(ValidationError, match=message):
        Param(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "inferred"),
    [
        ({"low": 1, "high": 256}, "int"),
        ({"low": 1.0, "high": 8.0, "step": 2.0}, "int"),
        ({"low": 1, "high": 256, "log": True}, "int"),
        ({"low": 0.5, "high": 0.95}, "float"),
        ({"low": 1, "high": 8, "step": 0.5}, "float"),
        ({"low": 1, "high": 8, "type": "float"}, "float"),
    ],
)
def test_param_type_inference(kwargs, inferred):
    assert Param(**kwargs).type == inferred


def test_low_equal_high_is_a_single_point_not_an_error():
    assert Param(low=4, high=4).type == "int"


# --- ModelSpec ---------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{}, {"tiny": "tiny", "path": "/models/x"}])
def test_model_needs_exactly_one_of_tiny_or_path(kwargs):
    with pytest.raises(ValidationError, match="exactly one of `tiny` or `path`"):
        ModelSpec(**kwargs)


def test_model_with_one_source():
    assert ModelSpec(tiny="qwen3-4b").tiny == "qwen3-4b"
    assert ModelSpec(path="Qwen/Qwen3-4B").path == "Qwen/Qwen3-4B"


def test_unknown_tiny_preset_is_rejected():
    with pytest.raises(ValidationError):
        ModelSpec(tiny="huge")


# --- Objective ---------------------------------------------------------------------------


def test_objective_defaults():
    objective = Objective()
    assert objective.mode == "weighted"
    assert objective.latency == "ttft_p95"
    assert objective.weights == {"throughput": 1.0, "latency": 1.0, "memory": 0.2}


@pytest.mark.parametrize("name", ["ttft_p95", "tpot_mean", "itl_median", "e2el_p99", "ttft_p90"])
def test_known_latency_names(name):
    assert Objective(latency=name).latency == name


@pytest.mark.parametrize("name", ["ttft_p42", "foo_p95", "ttft", "TTFT_P95", "ttft_p95_ms"])
def test_unknown_latency_names_list_the_allowed(name):
    with pytest.raises(ValidationError) as err:
        Objective(latency=name)
    text = str(err.value)
    assert f"unknown latency metric {name!r}" in text
    assert "ttft, tpot, itl, e2el" in text
    assert "mean, median, p90, p95, p99" in text


def test_slos_keys_end_in_ms():
    assert Objective(slos={"ttft_p95_ms": 500, "tpot_mean_ms": 50}).slos["ttft_p95_ms"] == 500
    with pytest.raises(ValidationError, match="must end in _ms"):
        Objective(slos={"ttft_p95": 500})


def test_slo_key_names_a_known_latency():
    with pytest.raises(ValidationError, match="unknown latency metric 'ttft_p42'"):
        Objective(slos={"ttft_p42_ms": 500})


@pytest.mark.parametrize("limit", [0, -5])
def test_slo_limit_must_be_positive(limit):
    with pytest.raises(ValidationError, match="must be > 0"):
        Objective(slos={"ttft_p95_ms": limit})


@pytest.mark.parametrize(
    "weights",
    [{}, {"throughput": 0.0}, {"throughput": 1.0, "latency": -0.5}, {"latency": 0, "memory": 0}],
)
def test_weights_need_one_positive_and_none_negative(weights):
    with pytest.raises(ValidationError, match="weights must be >= 0 with at least one > 0"):
        Objective(weights=weights)


def test_weights_accept_a_subset_and_zeros():
    assert Objective(weights={"latency": 1.0, "memory": 0.0}).weights == {
        "latency": 1.0, "memory": 0.0}


def test_weights_reject_unknown_terms():
    with pytest.raises(ValidationError, match="'throughput', 'latency' or 'memory'"):
        Objective(weights={"speed": 1.0})


# --- parse_duration and latency_key -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("8h", 28800), ("45m", 2700), ("90s", 90), ("1h30m", 5400), ("120", 120), ("1.5h", 5400),
     (" 5m ", 300), ("2m30s", 150)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["abc", "8x", "", "h", "8h junk", "1h 30m", "-5m"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("name", "key"),
    [("ttft_p95", "p95_ttft_ms"), ("tpot_mean", "mean_tpot_ms"), ("itl_median", "median_itl_ms"),
     ("e2el_p99", "p99_e2el_ms")],
)
def test_latency_key(name, key):
    assert latency_key(name) == key


def test_latency_key_rejects_unknown():
    with pytest.raises(ValueError, match="unknown latency metric 'foo_p95'"):
        latency_key("foo_p95")


# --- relations between flags --------------------------------------------------------------


def test_batched_tokens_below_seqs_everywhere_is_rejected(tmp_path):
    message = load_error(tmp_path, """\
        model: {tiny: tiny}
        space:
          max-num-seqs: {choices: [64, 128]}
          max-num-batched-tokens: {low: 16, high: 32}
        """)
    assert "max-num-batched-tokens is below max-num-seqs everywhere" in message


@pytest.mark.parametrize(
    ("seqs", "mbt"),
    [
        ("{choices: [64, 128]}", "{low: 16, high: 64}"),  # one point where they meet
        ("{low: 1, high: 256}", "{choices: [32]}"),  # overlapping ranges
        ("{choices: [8]}", "{choices: [8192]}"),
    ],
)
def test_batched_tokens_overlapping_seqs_is_accepted(tmp_path, seqs, mbt):
    path = write(tmp_path, f"""\
        model: {{tiny: tiny}}
        space:
          max-num-seqs: {seqs}
          max_num_batched_tokens: {mbt}
        """)
    assert set(load(path).space) == {"max-num-seqs", "max-num-batched-tokens"}


# --- errors: file and key path in one line ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("model: {tiny: tiny}\nbogus: 1\n", "bogus: unknown key"),
        ("model: {tiny: tiny}\nworkload: {foo: 1}\n", "workload.foo: unknown key"),
        ("model: {tiny: tiny}\nspace: {x: {lo: 1, high: 2}}\n", "space.x.lo: unknown key"),
        ("model: {tiny: tiny}\nobjective: {latncy: ttft_p95}\n", "objective.latncy: unknown key"),
        ("model: {tiny: tiny}\nbaselines: [{name: a, flagz: {}}]\n",
         "baselines.0.flagz: unknown key"),
        ("model: {tiny: tiny, revision: main}\n", "model.revision: unknown key"),
    ],
)
def test_unknown_keys_name_file_and_key_path(tmp_path, text, where):
    assert load_error(tmp_path, text).endswith(where)


def test_wrong_type_names_the_key(tmp_path):
    message = load_error(tmp_path, "model: {tiny: tiny}\nbudget: {trials: many}\n")
    assert ": budget.trials: " in message
    assert "integer" in message


def test_trials_must_be_positive(tmp_path):
    assert ": budget.trials: " in load_error(tmp_path, "model: {tiny: tiny}\nbudget: {trials: 0}\n")


def test_bad_duration_names_the_key(tmp_path):
    message = load_error(tmp_path, "model: {tiny: tiny}\nbudget: {timeout: 8x}\n")
    assert ": budget.timeout: bad duration '8x'" in message


def test_empty_range_names_the_flag(tmp_path):
    text = "model: {tiny: tiny}\nspace: {max-num-seqs: {low: 64, high: 8}}\n"
    message = load_error(tmp_path, text)
    assert message.endswith("space.max-num-seqs: empty range: low 64 > high 8")


def test_missing_model_section(tmp_path):
    assert load_error(tmp_path, "space: {}\n").endswith("model: Field required")


def test_flag_given_twice_in_engine_flags(tmp_path):
    message = load_error(tmp_path, """\
        model: {tiny: tiny}
        engine: {flags: {max_num_seqs: 1, max-num-seqs: 2}}
        """)
    assert ": engine.flags: flag --max-num-seqs given twice" in message


def test_invalid_yaml(tmp_path):
    message = load_error(tmp_path, "model: {tiny: tiny\nspace: [\n")
    assert "not valid YAML" in message


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", ""])
def test_a_scenario_must_be_a_mapping(tmp_path, text):
    assert "a scenario is a mapping of sections" in load_error(tmp_path, text)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="nope.yaml: cannot read"):
        load(path)


def test_scenario_model_is_strict_on_its_own():
    with pytest.raises(ValidationError):
        Scenario.model_validate({"model": {"tiny": "tiny"}, "sampler": {"name": "cmaes"}})


# --- capacity mode ----------------------------------------------------------------------


def test_capacity_is_the_default_mode_when_slos_are_given(tmp_path):
    base = """
    model: {tiny: tiny}
    objective: {slos: {ttft_p95_ms: 500}}
    """
    assert load(write(tmp_path, base)).workload.mode == "capacity"
    assert load(write(tmp_path, "model: {tiny: tiny}\n")).workload.mode == "fixed"
    fixed = load(write(tmp_path, base + "workload: {mode: fixed}\n"))
    assert fixed.workload.mode == "fixed"


def test_capacity_options_are_checked(tmp_path):
    message = load_error(tmp_path, """
    model: {tiny: tiny}
    workload: {mode: capacity, capacity: {tolerance: 0}}
    """)
    assert "workload.capacity.tolerance" in message
    message = load_error(tmp_path, """
    model: {tiny: tiny}
    workload: {mode: burst}
    """)
    assert "workload.mode" in message and "capacity" in message


# --- what the file names on this machine, and flags checked before any launch ---------------


def test_model_path_must_resolve(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    message = load_error(tmp_path, f"model: {{path: {model}}}\n")
    assert message.endswith(f"model.path: {str(model)!r} is a directory without config.json "
                            "(not a Hugging Face model)")
    (model / "config.json").write_text("{}")
    assert load(write(tmp_path, f"model: {{path: {model}}}\n")).model.path == str(model)
    message = load_error(tmp_path, "model: {path: /no/such/model}\n")
    assert ": model.path: '/no/such/model' does not exist" in message


@pytest.mark.parametrize("name", ["Qwen/Qwen3-4B-Instruct-2507", "org/name.v2", "a-b/c_d"])
def test_a_model_id_is_taken_as_is(tmp_path, name, monkeypatch):
    """An id goes to the hub check as it is (which asks the local cache or the hub:
    tests/basics/test_hub.py)."""
    asked = []
    monkeypatch.setattr(config, "hub_problem", lambda model, **kw: asked.append(model))
    assert load(write(tmp_path, f"model: {{path: {name}}}\n")).model.path == name
    assert asked == [name]


@pytest.mark.parametrize("name", ["gpt2", "./org/name", "/abs/org/name", "org/name/extra",
                                  "~/models/x"])
def test_what_is_neither_a_local_model_nor_an_id(tmp_path, name):
    assert "does not exist" in load_error(tmp_path, f"model: {{path: '{name}'}}\n")


def test_a_gguf_file_is_a_model(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert load(write(tmp_path, f"model: {{path: {tmp_path / 'm.gguf'}}}\n")).model.path
    (tmp_path / "m.bin").write_bytes(b"x")
    assert "is a file" in load_error(tmp_path, f"model: {{path: {tmp_path / 'm.bin'}}}\n")


def test_named_prompt_files_must_exist(tmp_path):
    message = load_error(tmp_path, "model: {tiny: tiny}\n"
                         "workload: {kind: jsonl, path: nowhere.jsonl}\n")
    assert message.endswith("workload.path: no such file 'nowhere.jsonl'")
    message = load_error(tmp_path, "model: {tiny: tiny}\nguardrail: {prompts: none.jsonl}\n")
    assert message.endswith("guardrail.prompts: no such file 'none.jsonl'")


def test_launcher_flags_cover_what_the_server_reserves():
    from autotune.config import LAUNCHER_FLAGS
    from autotune.engine.server import RESERVED

    assert set(RESERVED) <= set(LAUNCHER_FLAGS)


@pytest.mark.parametrize("where", [
    "engine: {flags: {port: 1}}", "engine: {flags: {--port: 1}}",
    "space: {port: {low: 8000, high: 8100}}", "baselines: [{name: a, flags: {port: 1}}]"])
def test_launcher_flags_are_refused_everywhere(tmp_path, where):
    message = load_error(tmp_path, f"model: {{tiny: tiny}}\n{where}\n")
    assert "port: --port is set by autotune itself" in message


@pytest.mark.parametrize(("text", "ok"), [
    ("engine: {flags: {gpu-memory-utilization: 1}}", True),
    ("engine: {flags: {gpu-memory-utilization: 1.01}}", False),
    ("engine: {flags: {gpu-memory-utilization: 0}}", False),
    ("engine: {flags: {gpu-memory-utilization: '0.5'}}", True),
    ("space: {gpu-memory-utilization: {low: 0.01, high: 1}}", True),
    ("space: {gpu-memory-utilization: {low: -0.1, high: 0.9}}", False),
    ("space: {gpu-memory-utilization: {choices: [0.9, 1.2]}}", False),
    ("space: {max-num-seqs: {choices: [0, 8]}}", False),
    ("engine: {flags: {max-num-batched-tokens: 4k}}", True),  # vLLM's own notation
    ("engine: {flags: {max-num-batched-tokens: 0}}", False),
])
def test_documented_ranges(tmp_path, text, ok):
    path = write(tmp_path, f"model: {{tiny: tiny}}\n{text}\n")
    if ok:
        load(path)
    else:
        assert "is out of range; allowed: " in load_error(tmp_path, f"model: {{tiny: tiny}}\n"
                                                                    f"{text}\n")


def test_a_binary_file_is_not_a_scenario(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    with pytest.raises(ConfigError, match=r"scenario.yaml: not a text file \(byte 0x89 at "
                                          r"offset 0 is not UTF-8\)"):
        load(path)


@pytest.mark.parametrize("name", ["../up", "a/b", ".hidden", ""])
def test_study_names_stay_in_the_studies_folder(tmp_path, name):
    assert ": name: study name" in load_error(tmp_path, f"name: '{name}'\nmodel: {{tiny: tiny}}\n")


def test_a_file_name_that_is_no_study_name_asks_for_one(tmp_path):
    path = write(tmp_path, "model: {tiny: tiny}\n", name="my scenario.yaml")
    with pytest.raises(ConfigError, match="name: study name 'my scenario' .* set `name:`"):
        load(path)


@pytest.mark.parametrize("key", ["timeout", "trial_timeout"])
def test_budget_durations_must_be_positive(tmp_path, key):
    message = load_error(tmp_path, f"model: {{tiny: tiny}}\nbudget: {{{key}: 0s}}\n")
    assert f"budget.{key}: duration '0s' must be longer than 0 s" in message
