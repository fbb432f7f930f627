"""`autotune validate` on a real CPU study: two pairs of fresh engine launches, alternating,
and a gain with its 95 % interval stored on the trial, shown and exported."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.cli import main as cli
from autotune.config import Scenario
from autotune.tuning import ranking
from autotune.tuning.policy import objective as obj
from autotune.tuning.records.measures import Measures
from autotune.tuning.records.snapshot import records
from tests.conftest import copy_study

pytestmark = pytest.mark.engine


def _shown(capsys, *args: str) -> str:
    """`autotune show/export ...` output (in-process: these start no engine)."""
    assert cli.main(list(args)) == 0
    return capsys.readouterr().out


def test_validate_reruns_both_and_stores_the_interval(cpu_study, tmp_path, capsys,
                                                      no_leftover_engine):
    run = copy_study(cpu_study, tmp_path / "studies")
    db = str(run.root / "engine-test.db")
    before = records(optuna.load_study(study_name="engine-test",
                                       storage=f"sqlite:///{db}"))

    proc = subprocess.run([sys.executable, "-m", "autotune", "validate", db, "--trial", "2",
                           "--repeats", "2"], capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    st = optuna.load_study(study_name="engine-test", storage=f"sqlite:///{db}")
    trials = records(st)
    typed = trials[2].validation
    assert typed is not None and typed.word() == typed.verdict
    v = typed.as_dict()  # as stored, key for key
    assert (v["repeats"], v["against"], v["metric"]) == (2, 0, "weighted score")
    assert [(r["trial"], r["role"]) for r in v["runs"]] == [
        (0, "baseline"), (2, "candidate"), (0, "baseline"), (2, "candidate")]
    for r in v["runs"]:  # each a fresh, complete engine launch with its own log
        assert r["throughput"] > 0 and r["latency_ms"] > 0 and r["failed"] == 0
        assert r["startup_s"] > 0 and Path(r["log_path"]).exists()
    assert Path(v["dir"]).parent == run.root / "engine-test" / "validate"
    assert v["engine_version"].startswith("vllm") and v["device"] == {"name": "cpu"}
    # The headline is the geometric mean of the pairs' weighted scores, inside its interval.
    scenario = Scenario.model_validate(ranking.stored_scenario(st))
    scores = [obj.weighted_score(Measures(c["throughput"], c["latency_ms"], c["memory_mib"]),
                                 Measures(b["throughput"], b["latency_ms"], b["memory_mib"]),
                                 scenario.objective.weights)
              for b, c in zip(v["runs"][::2], v["runs"][1::2], strict=True)]
    assert v["gain"] == pytest.approx(math.expm1(sum(scores) / 2))
    assert v["ci_low"] < v["gain"] < v["ci_high"]
    assert {"throughput", "latency_ms", "score"} <= set(v["per_metric"])
    # Nothing else in the study changed.
    for old, new in zip(before, trials, strict=True):
        assert dataclasses.replace(new, validation=None) == old

    printed = " ".join(proc.stdout.split())
    line = f"{v['gain']:+.1%} weighted score (95% CI {v['ci_low']:+.1%} .. {v['ci_high']:+.1%}"
    assert f"validated gain of trial #2: {line}" in printed
    assert "run 4/4: trial #2 (candidate)" in printed
    assert f"validation: {line}" in " ".join(_shown(capsys, "show", db, "--trial", "2").split())
    assert f"validated: trial #2 {line}" in " ".join(_shown(capsys, "show", db).split())
    exported = json.loads(_shown(capsys, "export", db, "--trial", "2", "--format", "json"))
    assert {k: exported["validation"][k] for k in ("gain", "ci_low", "ci_high", "repeats")} \
        == {k: v[k] for k in ("gain", "ci_low", "ci_high", "repeats")}
