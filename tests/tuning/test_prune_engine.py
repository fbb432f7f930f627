"""The shipped example `search_spaces/cpu-pressure.yaml`, end to end on the real CPU engine:
within its 8 trials it shows every outcome the README names for it (completed trials, a
configuration pruned before launch, preemption in the probe phase, a relief move for the
preempting trial, a trial behind the median, a repeated configuration copied), and `show`
explains each. One `tune` of about two and a half minutes: five engines, one at a time."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from autotune.tuning.records.origin import RELIEF
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import TrialRecord
from tests.paths import ROOT

# `alone`: `behind` is the median pruner comparing one trial's probe score with another
# trial's, measured minutes apart; another worker's engine on the same two cores turned that
# comparison into noise once in six CI runs (no trial was behind; 2026-12-02), and so did a
# pinned run on 2026-12-06 while the trial behind served 4 sequences against 16. It serves
# one now (seed 7, `scripts/pressure_seeds.py`): -0.85 against +0.04 at the probe.
pytestmark = [pytest.mark.engine, pytest.mark.alone,
              pytest.mark.usefixtures("no_leftover_engine")]

SHIPPED = ROOT / "search_spaces" / "cpu-pressure.yaml"
# What the README says the example shows, as `show --json` words each trial's reason.
OUTCOMES = {"", "preemption", "kv_too_small (not launched)", "behind"}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("pressure")
    path = root / SHIPPED.name
    shutil.copy(SHIPPED, path)
    proc = subprocess.run([sys.executable, "-m", "autotune", "tune", str(path), "--studies-dir",
                           str(root)], capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    st = optuna.load_study(study_name="cpu-pressure", storage=f"sqlite:///{root}/cpu-pressure.db")
    return root, records(st)


def _first(trials: list[TrialRecord], reason: str) -> TrialRecord:
    found = [t for t in trials if t.reason == reason and t.duplicate_of is None]
    assert found, (reason, [(t.number, t.reason) for t in trials])
    return found[0]


def test_every_documented_outcome_within_the_budget(study):
    root, trials = study
    assert len(trials) == 8
    out = subprocess.run([sys.executable, "-m", "autotune", "show", "cpu-pressure",
                          "--studies-dir", str(root), "--json"], capture_output=True, text=True,
                         check=True).stdout
    data = json.loads(out)
    assert OUTCOMES <= {r["reason"] for r in data["trials"]}
    assert any(t.origin_kind == RELIEF for t in trials)
    assert any(t.duplicate_of is not None for t in trials)  # a repeat is copied, not launched
    assert data["memory_model"]["not_launched"] >= 1
    assert data["memory_model"]["max_abs_error"] < 0.01
    text = subprocess.run([sys.executable, "-m", "autotune", "show", "cpu-pressure",
                           "--studies-dir", str(root)], capture_output=True, text=True,
                          check=True, env={"COLUMNS": "220", "PATH": ""}).stdout
    for words in ("kv_too_small (not launched)", "preemption: the probe phase saw requests "
                  "preempted", "behind: Optuna's pruner", "relief #"):
        assert words in text, words


def test_preempting_configuration_is_pruned_in_the_probe_phase(study):
    _, trials = study
    t = _first(trials, "preemption")
    assert t.state == TrialState.PRUNED
    assert t.flags["kv-cache-memory-bytes"] == 2000000 and t.flags["max-num-seqs"] == 16
    m = t.metrics
    assert m.probes is not None and m.probes.preemptions > 0
    assert m.completed + m.failed == 12  # the probe only: the rest was never sent
    assert t.kv_capacity_reported == 3840  # 30 blocks of 128 (CPU default)
    assert t.memory_estimate is not None and t.memory_estimate.kv_capacity_tokens == 3840


def test_memory_model_prunes_before_launch(study):
    root, trials = study
    t = _first(trials, "kv_too_small")
    assert t.state == TrialState.PRUNED and t.launched is False
    assert t.flags["kv-cache-memory-bytes"] == 500000
    assert "max-model-len is 2048" in t.detail
    assert not (root / "cpu-pressure" / "trials" / str(t.number) / "engine.log").exists()


def test_the_preempting_trial_gets_a_relief_move_with_its_reason(study):
    root, trials = study
    preempting = _first(trials, "preemption")
    relieved = trials[preempting.number + 1]
    why = relieved.tried_because
    assert relieved.origin_kind == RELIEF and why.source == preempting.number
    assert why.bottleneck == "kv_cache"
    assert why.text.startswith(f"relieves kv_cache of #{preempting.number} (pruned for "
                               "preemption")
    # One move from the preempting configuration; it no longer preempts. It completes, or
    # the median pruner stops it as behind: a verdict asked only once the probe phase's own
    # (preemption) passed, `prune.probe_verdict` before the pruner's hook. A move to fewer
    # sequences can score below the median (a fresh-clone run on 2026-12-04: behind).
    moved = {k for k in relieved.flags if relieved.flags[k] != preempting.flags.get(k)}
    assert moved == {why.knob}
    assert (relieved.state, relieved.reason) in {(TrialState.COMPLETE, ""),
                                                 (TrialState.PRUNED, "behind")}
    assert relieved.metrics.probes is not None and relieved.metrics.probes.preemptions == 0


def test_a_trial_behind_the_median_is_stopped_after_its_probe(study):
    _, trials = study
    t = _first(trials, "behind")
    assert t.state == TrialState.PRUNED
    assert t.metrics.completed + t.metrics.failed == 12
    # only once three trials had completed (the median pruner's start-up)
    done = [r for r in trials[:t.number] if r.state == TrialState.COMPLETE]
    assert len(done) >= 3
