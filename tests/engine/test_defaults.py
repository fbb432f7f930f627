"""vLLM's effective defaults: a flag set to what the engine uses anyway is no override.

The committed H200 study `h200-guided-check` (vLLM 0.26, 8 trials, no baselines) has a
winner that sets nine flags; six of them are the values vLLM used anyway on that machine,
and each of the three sources of defaults removes at least one.
"""

from __future__ import annotations

import shutil

import optuna
import pytest
import yaml

from autotune.engine import defaults
from autotune.engine.defaults import Effective, Machine
from autotune.engine.log import StartupFigures, parse_startup
from autotune.results.export import formats
from autotune.results.summary import Summary
from autotune.tuning import ranking
from tests.paths import ROOT

LOGS = ROOT / "tests" / "data" / "logs"
GUIDED = ROOT / "studies" / "h200-guided-check.db"


@pytest.mark.parametrize(("machine", "seqs", "tokens"), [
    (Machine("cuda", "NVIDIA H200", 143771.0), 1024, 8192),
    (Machine("cuda", "NVIDIA A100-SXM4-80GB", 81920.0), 256, 2048),  # vLLM spares the A100
    (Machine("cuda", "NVIDIA B200", 183359.0), 1024, 16384),
    (Machine("cuda", "NVIDIA GeForce RTX 4090 D", 24564.0), 256, 2048),
    (Machine("cpu"), 128, 2048),
    (Machine("cpu", world_size=2), 256, 4096),
])
def test_platform_rules_follow_the_card(machine, seqs, tokens):
    rules = defaults.platform_rules(machine)
    assert (rules["max-num-seqs"], rules["max-num-batched-tokens"]) == (seqs, tokens)


def test_start_up_log_says_what_the_engine_decided():
    two = parse_startup((LOGS / "h200-startup-trial2.log").read_text())
    assert two.max_num_batched_tokens == 8192
    one = parse_startup((LOGS / "h200-startup-trial1.log").read_text())
    assert one.prefix_caching is True
    cpu = parse_startup((LOGS / "cpu-startup-ok.log").read_text())
    assert cpu.prefix_caching is True


def test_a_fact_counts_only_from_an_engine_that_was_not_given_the_flag():
    seen = StartupFigures(async_scheduling=False, block_size=16, max_num_batched_tokens=2048)
    # ngram speculation turned async scheduling off: not what the default is
    facts = defaults.startup_facts({"speculative-config": {"method": "ngram"}}, seen)
    assert "async-scheduling" not in facts and facts["block-size"] == 16
    assert "max-num-batched-tokens" not in defaults.startup_facts(
        {"max-num-batched-tokens": 2048}, seen)
    assert defaults.startup_facts({}, seen)["async-scheduling"] is False


def test_values_are_compared_as_vllm_reads_them():
    eff = Effective.of({"gpu-memory-utilization": 0.9, "enforce-eager": False},
                       {"max-num-seqs": 256}, {"async-scheduling": True})
    assert eff.is_default("gpu-memory-utilization", 0.90)
    assert eff.is_default("max-num-seqs", 256.0) and eff.is_default("max-num-seqs", "256")
    assert eff.is_default("async-scheduling", "true")
    assert not eff.is_default("enforce-eager", 0)  # a number is no boolean
    assert not eff.is_default("block-size", 16)  # nothing known: an override
    assert eff.overrides({"max-num-seqs": 512, "async-scheduling": True}) == {"max-num-seqs": 512}


@pytest.fixture(scope="module")
def guided(tmp_path_factory):
    path = tmp_path_factory.mktemp("guided") / GUIDED.name
    shutil.copy(GUIDED, path)
    path.chmod(0o644)
    return optuna.load_study(study_name="h200-guided-check", storage=f"sqlite:///{path}")


def test_each_source_removes_a_flag_the_winner_set_to_the_default(guided):
    eff = ranking.effective_defaults(guided)
    best = ranking.feasible_best(guided)
    assert best is not None and best.number == 6 and len(best.flags) == 9
    assert eff.overrides(best.flags) == {"max-num-batched-tokens": 4096,
                                         "gpu-memory-utilization": 0.95,
                                         "api-server-count": 4}
    left = eff.left_out(best.flags)
    assert {eff.sources[k] for k in left} == {defaults.PARSER, defaults.PLATFORM,
                                              defaults.STARTUP}
    assert eff.sources["kv-cache-dtype"] == defaults.PARSER
    assert eff.sources["max-num-seqs"] == defaults.PLATFORM  # 1024 on a 141 GB card
    assert eff.sources["async-scheduling"] == defaults.STARTUP  # "Asynchronous ... enabled"
    assert eff.sources["block-size"] == defaults.STARTUP
    # without the platform's rule and the start-up facts, four more would count
    parser_only = Effective.of(guided.user_attrs["engine_defaults"])
    assert len(parser_only.overrides(best.flags)) == 7


def test_show_and_export_count_and_write_only_real_overrides(guided):
    data = Summary.of(guided)
    row = next(r for r in data.ranking if r.number == 6)
    assert row.overrides == 3
    assert data.best_changes == {"max-num-batched-tokens": 4096,
                                    "gpu-memory-utilization": 0.95, "api-server-count": 4}
    best = ranking.feasible_best(guided)
    text = formats.render(guided, best, "vllm-yaml", "/models/q")
    body = yaml.safe_load(text)
    assert body == {"max-num-batched-tokens": 4096, "gpu-memory-utilization": 0.95,
                    "api-server-count": 4}
    note = next(line for line in text.splitlines() if "left out as vLLM's defaults" in line)
    for word in ("max-num-seqs 1024 (platform)", "kv-cache-dtype auto (parser)",
                 "async-scheduling True (start-up)", "block-size 16 (start-up)"):
        assert word in note
    cli = formats.render(guided, best, "cli", "/models/q")
    assert "--max-num-seqs" not in cli and "--api-server-count 4" in cli
