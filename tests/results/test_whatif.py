"""What-if SLOs: a committed H200 study re-ranked under other SLOs from its recorded steps."""

from __future__ import annotations

import json
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from autotune._slo import Slo, parse
from autotune.measure.measurement import Measurement
from autotune.results import _whatif as whatif
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import TrialRecord
from tests.paths import ROOT

STUDY = "qwen3-4b-h200-sustained"  # TTFT p95 <= 500, TPOT p95 <= 30; 20-s steps


@pytest.fixture(scope="module")
def trials() -> list[TrialRecord]:
    st = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{ROOT}/studies/{STUDY}.db")
    return records(st)


def test_a_stricter_ttft_slo_is_covered_by_the_recorded_steps(trials):
    data = whatif.rerank(trials, [parse("ttft_p95_ms=300")])
    by = {t.number: t for t in data.trials}
    # The defaults: 37.8 req/s offered passed (TTFT 108 ms), achieving 36.2 in its steady
    # window; 42.0 failed on its growing backlog (its window offered 42.4), which no SLO
    # changes; 50.4 had TTFT 257 ms but failed on the backlog too.
    assert by[0].status == whatif.COVERED
    assert by[0].failed is not None
    assert (round(by[0].passed, 1), round(by[0].failed, 1)) == (36.2, 42.4)
    assert data.best == 2 and by[2].passed == pytest.approx(37.9, abs=0.05)
    # #0 fails at 42.4 > 37.9 and #1 at 45.6: the steps cannot rank them below #2.
    assert set(data.contenders) == {0, 1}


def test_an_slo_no_step_met_is_an_upper_bound(trials):
    data = whatif.rerank(trials, [parse("ttft_p95_ms=90")])
    assert data.counts == whatif.Counts(covered=0, at_least=0, at_most=3, no_data=0)
    by = {t.number: t for t in data.trials}
    assert by[0].text == "at most 33.8 req/s (every step tried failed)"  # offered 33.6
    assert data.best is None


def test_a_metric_the_study_did_not_record_has_no_data(trials):
    data = whatif.rerank(trials, [parse("e2el_p99_ms=2000")])
    assert data.counts.no_data == 3 and data.best is None


def test_every_step_passing_is_a_lower_bound():
    steps = [{"index": 0, "rate": None, "violations": ["ttft_p95_ms 900>500"], "figures": {}},
             {"index": 1, "rate": 10.0, "violations": ["ttft_p95_ms 600>500"],
              "latencies": {"ttft_p95_ms": 600.0}},
             {"index": 2, "rate": 5.0, "violations": [], "latencies": {"ttft_p95_ms": 300.0}}]
    rec = TrialRecord(0, TrialState.COMPLETE,
                      metrics=Measurement.of({"capacity": {"steps": steps}}))
    got = whatif.answer(rec, [Slo("ttft_p95_ms", 1000)])
    assert got.status == whatif.AT_LEAST and got.passed == 10.0
    # A step that failed on its backlog fails under any SLO.
    steps[1]["violations"].append("backlog +30 requests (9% of arrivals)")
    got = whatif.answer(rec, [Slo("ttft_p95_ms", 1000)])
    assert (got.status, got.passed, got.failed) == (whatif.COVERED, 5.0, 10.0)


def test_show_and_report_take_the_slo(tmp_path):
    show = subprocess.run([sys.executable, "-m", "autotune", "show", STUDY, "--studies-dir",
                           str(ROOT / "studies"), "--slo", "ttft_p95_ms=300", "--json"],
                          capture_output=True, text=True, check=True)
    assert json.loads(show.stdout)["what_if"]["best"] == 2
    out = tmp_path / "r.html"
    subprocess.run([sys.executable, "-m", "autotune", "report", STUDY, "--studies-dir",
                    str(ROOT / "studies"), "--slo", "ttft_p95_ms=300", "-o", str(out)],
                   capture_output=True, text=True, check=True)
    html = out.read_text()
    assert "What if the SLO were ttft_p95_ms&lt;=300" in html
    assert "#2 carries 37.9 req/s" in html


@pytest.mark.parametrize(("spec", "message"), [
    ("ttft_p95=300", "must end in _ms"),
    ("ttft_p42_ms=300", "unknown latency metric 'ttft_p42'"),
    ("ttft_p95_ms", "is not KEY=MS"),
    ("ttft_p95_ms=fast", "is not a number"),
])
def test_a_bad_slo_is_one_line(spec, message):
    proc = subprocess.run([sys.executable, "-m", "autotune", "show", STUDY, "--studies-dir",
                           str(ROOT / "studies"), "--slo", spec], capture_output=True, text=True)
    assert proc.returncode == 2 and message in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
