"""Pruning on the real CPU engine: before launch, at start-up, and in the probe phase; and
the relief move the preempting trial's bottleneck gets (the `cpu-pressure` study's case)."""

from __future__ import annotations

import json
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from autotune.tuning import record

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("no_leftover_engine")]

SCENARIO = """
name: pressure-test
model: {tiny: tiny}
engine:
  flags: {enforce-eager: true, max-model-len: 2048}
space:
  max-num-seqs: {choices: [2, 16]}
workload: {kind: random, num_requests: 32, input_len: 256, output_len: 256, max_concurrency: 16}
guardrail: {enabled: false}
prune: {probe_fraction: 0.5}
baselines:
  # 16 sequences of 512 tokens cannot share 3,840 tokens: vLLM preempts
  - {name: preempting, flags: {kv-cache-memory-bytes: 2000000, max-num-seqs: 16}}
  # 976 tokens cannot hold one 2,048-token sequence: the memory model says so
  - {name: too-small, flags: {kv-cache-memory-bytes: 500000}}
  # vLLM refuses 4 batched tokens with 8 sequences: pruned without launching too
  - {name: refused, flags: {max-num-seqs: 8, max-num-batched-tokens: 4}}
# The fifth trial is the relief move of the preempting baseline: fewer sequences.
budget: {trials: 5, trial_timeout: 5m}
sampler: {name: random, seed: 0}
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("pressure")
    path = root / "pressure-test.yaml"
    path.write_text(SCENARIO)
    proc = subprocess.run([sys.executable, "-m", "autotune", "tune", str(path), "--studies-dir",
                           str(root)], capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root, optuna.load_study(study_name="pressure-test",
                                   storage=f"sqlite:///{root}/pressure-test.db")


def test_preempting_configuration_is_pruned_in_the_probe_phase(study):
    _, st = study
    t = record.records(st)[1]
    assert t.baseline == "preempting"
    assert t.state == TrialState.PRUNED and t.reason == "preemption"
    m = t.metrics
    assert m["probes"]["preemptions"] > 0
    assert m["completed"] + m["failed"] == 16  # the probe only: the rest was never sent
    assert t.kv_capacity_reported == 3840  # 30 blocks of 128 (CPU default)
    assert t.memory_estimate["kv_capacity_tokens"] == 3840


def test_memory_model_prunes_before_launch(study):
    root, st = study
    t = record.records(st)[2]
    assert t.state == TrialState.PRUNED and t.reason == "kv_too_small"
    assert t.launched is False
    assert "max-model-len is 2048" in t.detail
    assert not (root / "pressure-test" / "trials" / "2" / "engine.log").exists()
    refused = record.records(st)[3]
    assert refused.reason == "invalid_combination"


def test_show_explains_every_pruned_trial(study):
    root, _ = study
    out = subprocess.run([sys.executable, "-m", "autotune", "show", "pressure-test",
                          "--studies-dir", str(root), "--json"], capture_output=True, text=True,
                         check=True).stdout
    data = json.loads(out)
    reasons = [r["reason"] for r in data["trials"]]
    assert reasons == ["", "preemption", "kv_too_small (not launched)", "invalid_combination",
                       ""]
    assert data["memory_model"]["trials"] == 3  # defaults, the preempting one, its relief
    assert data["memory_model"]["max_abs_error"] < 0.01
    assert data["memory_model"]["not_launched"] == 1


def test_the_preempting_trial_gets_a_relief_move_with_its_reason(study):
    root, st = study
    trials = record.records(st)
    assert [t.origin_kind for t in trials] == ["baseline"] * 4 + [record.RELIEF]
    relieved = trials[4]
    why = relieved.tried_because
    assert why.source == 1 and why.bottleneck == "kv_cache" and why.knob == "max-num-seqs"
    assert why.text.startswith("relieves kv_cache of #1 (pruned for preemption")
    # The baseline's flags with one move (16 -> 2 sequences), run as flags: the space cannot
    # express a KV size it does not search. It no longer preempts.
    assert relieved.flags == {"enforce-eager": True, "max-model-len": 2048,
                              "kv-cache-memory-bytes": 2000000, "max-num-seqs": 2}
    assert relieved.state == TrialState.COMPLETE
    assert relieved.metrics["probes"]["preemptions"] == 0
    text = subprocess.run([sys.executable, "-m", "autotune", "show", "pressure-test",
                           "--studies-dir", str(root)], capture_output=True, text=True,
                          check=True, env={"COLUMNS": "220", "PATH": ""}).stdout
    assert "relief #1 kv_cache: max-num-seqs 16->2" in text
