"""An overnight run as a user leaves it, on the real CPU engine: the study, then which of the
winner's flags carry its gain (`budget.explain`), then the last phase's re-check
(`budget.validate`), all inside `autotune tune`; `export` and a second `explain` after it.

The scenario fixes a 2-MB KV cache (3,904 tokens) for every trial. vLLM's defaults then cannot
start (the model's 8,192-token max-model-len does not fit), and the winner sets max-model-len
1024, which is what lets it run at all, and max-logprobs 30, which changes nothing about
speed. So one flag matters without any measurement noise (taken away, the engine cannot
start), and the other must be found tied: the capacity search is loosened until a
configuration's capacity is the rate it sustains at its own burst's pace (`max_expand: 1`, a
60-s SLO), so the same engine measured twice ties. On two shared cores the same
configuration measured up to 40 % apart from one run to the next under a tight SLO (the
client, the API server and the engine core share one core), and a tie there was a coin toss.

Over a minute: four engine starts (the winner, its control, the run without max-logprobs,
and the one without max-model-len, refused); it is the one test of the whole overnight
path, and every later assertion reads its study.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import optuna
import pytest
import yaml

from autotune.tuning import ablation, ranking
from autotune.tuning.records.snapshot import records
from tests.conftest import run_tune

# `alone`: whether max-logprobs ties with the winner is a comparison of capacities, which
# another worker's engine on the same two cores turns into noise (the control, the winner
# measured again beside the runs, absorbs what remains of it).
pytestmark = [pytest.mark.engine, pytest.mark.alone,
              pytest.mark.usefixtures("no_leftover_engine")]

SCENARIO = """
name: explain-test
model: {tiny: tiny}
engine:
  flags: {enforce-eager: true, kv-cache-memory-bytes: 2000000}
  env: {VLLM_CPU_KVCACHE_SPACE: "1"}
  startup_timeout_s: 600
workload:
  kind: random
  num_requests: 16
  input_len: 32
  output_len: 32
  capacity: {max_expand: 1, repeats: 1, max_steps: 3, min_step_s: 3, max_step_s: 5,
             backlog_limit: 0.99}
objective: {mode: weighted, latency: e2el_p95, slos: {e2el_p95_ms: 60000}}
guardrail: {enabled: false}
baselines:
  - {name: winner, flags: {max-model-len: 1024, max-logprobs: 30}}
relief: {enabled: false}
budget:
  trials: 2
  explain: true
  validate: {client: vllm, repeats: 1, step_seconds: 3}
"""


@pytest.fixture(scope="module")
def overnight(tmp_path_factory):
    root = tmp_path_factory.mktemp("studies")
    path = root / "explain-test.yaml"
    path.write_text(SCENARIO)
    proc = run_tune(path, root)
    study = optuna.load_study(study_name="explain-test",
                              storage=f"sqlite:///{root}/explain-test.db")
    return root, proc, study


def test_the_flag_that_carries_the_gain_is_all_that_stays(overnight):
    _, proc, study = overnight
    trials = records(study)
    defaults, winner = trials[0], trials[1]
    assert defaults.is_defaults and defaults.reason == "kv_too_small"
    assert winner.baseline == "winner" and winner.feasible and winner.capacity.low > 0
    found = ablation.stored(study, winner.number)
    assert found is not None and found.complete and found.control is not None
    assert trials[found.control].flags == winner.flags  # the control: the winner again
    parts = {p.flag: p for p in found.parts}
    assert set(parts) == {"max-model-len", "max-logprobs"}
    length, logprobs = parts["max-model-len"], parts["max-logprobs"]
    assert not length.tied and length.failed.startswith("kv_too_small")
    without = trials[length.trial]
    assert "max-model-len" not in without.flags and without.reason == "kv_too_small"
    assert without.flags["kv-cache-memory-bytes"] == 2000000  # the fixed value stays
    assert logprobs.tied and logprobs.default == 20
    assert found.minimal_flags == {"max-model-len": 1024}
    minimal = trials[found.minimal]
    assert "max-logprobs" not in minimal.flags and minimal.flags["max-model-len"] == 1024
    for number in (found.control, length.trial, logprobs.trial):
        assert trials[number].tried_because.text.startswith(f"ablation of #{winner.number}")
    assert "smallest configuration tied with #1" in proc.stdout
    # the re-check compares with vLLM's defaults, which never ran: skipped, and it says so
    assert "re-check: skipped, the study has no completed vLLM-defaults trial" in proc.stdout


def test_the_smaller_configuration_ships(overnight):
    root, _, study = overnight
    found = ablation.stored(study, 1)
    chosen = ranking.choose(study)
    assert chosen.number == found.minimal
    out = subprocess.run([sys.executable, "-m", "autotune", "export", "explain-test",
                          "--studies-dir", str(root), "--format", "vllm-yaml"],
                         capture_output=True, text=True, check=True).stdout
    # the fixed flags differ from vLLM's own and stay; max-logprobs is gone
    assert yaml.safe_load(out) == {"enforce-eager": True, "kv-cache-memory-bytes": 2000000,
                                   "max-model-len": 1024}
    show = subprocess.run([sys.executable, "-m", "autotune", "show", "explain-test",
                           "--studies-dir", str(root)], capture_output=True, text=True,
                          check=True, env={**os.environ, "COLUMNS": "200"}).stdout
    assert "smallest configuration tied with #1" in show
    assert "max-model-len 1024 (default vLLM's own), trial #" in show


def test_explain_again_reuses_the_runs(overnight):
    """`autotune explain` on the same study finds every configuration already run."""
    root, _, study = overnight
    before = len(study.trials)
    proc = subprocess.run([sys.executable, "-m", "autotune", "explain", "explain-test",
                           "--studies-dir", str(root), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(study.trials) == before  # nothing launched
    data = json.loads(proc.stdout)
    assert data["minimal_flags"] == {"max-model-len": 1024}

