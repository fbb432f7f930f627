"""The one-command form on the real CPU engine: `autotune tune --model M --slo ...` with no
YAML runs a study and writes the scenario it ran, which `autotune tune FILE` resumes."""

from __future__ import annotations

import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from autotune import config
from autotune.tuning import record

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("no_leftover_engine")]


def _tune(*args: str, cwd) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "autotune", "tune", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_tune_with_no_yaml_writes_the_scenario_that_resumes_it(tiny_model, tmp_path):
    # One trial (vLLM's defaults), then one more from the file: the least that shows the
    # file resuming the study (the CI run of three trials took 175 s, the suite's slowest).
    first = _tune("--model", str(tiny_model), "--slo", "e2el_p95_ms=2500", "--trials", "1",
                  "--studies-dir", str(tmp_path), cwd=tmp_path)
    path = tmp_path / "tiny-cpu" / "scenario.yaml"
    assert f"wrote {path}" in first.stdout and "max-num-seqs 4-64" in first.stdout
    scenario = config.load(path)
    assert scenario.name == "tiny-cpu" and scenario.workload.mode == "capacity"
    _tune(str(path), "--trials", "1", "--studies-dir", str(tmp_path), cwd=tmp_path)
    st = optuna.load_study(study_name="tiny-cpu", storage=f"sqlite:///{tmp_path}/tiny-cpu.db")
    trials = record.records(st)
    assert len(trials) == 2 and trials[0].is_defaults and not trials[1].is_defaults
    assert sum(t.is_defaults for t in trials) == 1  # the resumed run did not start over
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    assert trials[0].capacity is not None and trials[0].capacity.steps
