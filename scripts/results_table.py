"""Markdown tables of a capacity-at-SLO study for docs/results-h200.md.

    .venv/bin/python scripts/results_table.py [studies/qwen3-4b-h200.db]

Everything is read from the study database (each trial's record, the scenario
stored with the study) and, for the start-up split, from the engine logs under
studies/<name>/trials/<n>/engine.log. Gains are over the study's reference trial
(`autotune.tuning.study.reference_trial`: vLLM's defaults, or the first trial that completed)
and over the best feasible article configuration, when one exists.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna

from autotune.measure import capacityrecord
from autotune.tuning.ranking import reference_trial, stored_scenario
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import TrialRecord

HBM_BPS = 4.8e12  # H200 HBM3e, bytes/s


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list[Any]]) -> str:
    return "\n".join([_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows)])


def _label(t: TrialRecord) -> str:
    copy = t.duplicate_of
    return " ".join(x for x in (f"#{t.number}", t.baseline or "",
                                f"(copy of #{copy})" if copy is not None else "") if x)


def _rate(x: float) -> str:
    """Requests/s with three significant figures (1.67, 56.3, 120)."""
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def _overrides(t: TrialRecord) -> str:
    flags = t.flags or {}
    return " ".join(f"{k}={v}" for k, v in flags.items()) or "(defaults)"


def _capacity(t: TrialRecord) -> float:
    cap = t.capacity  # the rate achieved (an older record's, from its steps)
    return float(cap.request_throughput) if cap is not None else float("nan")


def _best_article(trials: list[TrialRecord]) -> TrialRecord | None:
    art = [t for t in trials if t.name.startswith("article") and t.feasible and t.values]
    return max(art, key=lambda t: t.values[0]) if art else None


def results(trials: list[TrialRecord], base: TrialRecord,
            output_len: int) -> str:
    """Baselines and searched trials that completed: figures at the capacity rate."""
    best_art = _best_article(trials)
    rows = []
    for t in trials:
        if t.outcome != "complete":
            continue
        m, c, q = t.metrics, t.capacity, t.quality
        lat = m.latencies
        assert c is not None and t.measures is not None, f"trial {t.number}: not measured"
        lo, hi = capacityrecord.interval(c)
        cap = c.request_throughput
        rows.append([
            _label(t), f"{_rate(cap)} ({_rate(lo)}-{_rate(hi)}, ±{c.uncertainty:.1%})",
            f"{c.output_throughput:.0f}", f"{m.output_throughput:.0f}",
            _f(m.request_goodput), f"{lat['p50_ttft_ms']:.0f} / {lat['p95_ttft_ms']:.0f}",
            f"{lat['p50_tpot_ms']:.1f} / {lat['p95_tpot_ms']:.1f}",
            f"{t.measures.memory_mib:.0f}",
            f"{q.drift if q and q.drift is not None else 0:.3f} "
            f"{'pass' if q and q.passed else 'FAIL'}",
            len(t.flags),
            f"{cap / _capacity(base):.3f}", f"{math.exp(t.values[0] - base.values[0]) - 1:+.1%}",
            *([f"{cap / _capacity(best_art):.3f}",
               f"{math.exp(t.values[0] - best_art.values[0]) - 1:+.1%}"] if best_art else []),
        ])
    ref = f"#{base.number}"
    head = ["trial", "capacity req/s (interval, ±)", f"out tok/s (rate×{output_len})",
            "out tok/s (in step)", "goodput", "TTFT p50/p95 ms", "TPOT p50/p95 ms", "peak MiB",
            "drift, guardrail", "overrides", f"cap. ÷ {ref}", f"score gain vs {ref}",
            *([f"cap. ÷ #{best_art.number}", f"score gain vs #{best_art.number}"]
              if best_art else [])]
    return _table(head, rows)


def flags(trials: list[TrialRecord]) -> str:
    """Every trial: flags, outcome, the burst's maximum throughput and the capacity."""
    rows = []
    for t in trials:
        c = t.capacity
        steps = c.steps if c else ()
        burst = steps[0].achieved_rps if steps else None
        why = t.reason
        if t.launched is False:
            why += " (not launched)"
        if t.duplicate_of is not None:
            why = f"duplicate of #{t.duplicate_of} (not launched)"
        rows.append([_label(t), _overrides(t), f"{t.state.name.lower()} {why}".strip(),
                     _rate(burst) if burst else "-",
                     _rate(c.request_throughput) if c and c.request_throughput else "-",
                     len(steps)])
    return _table(["trial", "flags", "state", "burst req/s", "capacity req/s", "steps"], rows)


def timings(trials: list[TrialRecord]) -> str:
    rows = []
    for t in trials:
        tm, wall = t.timings, _wall(t)
        if t.duplicate_of is not None:
            rows.append([_label(t), "-", "-", "-", "-", f"{wall:.1f}", "copied, not launched"])
            continue
        if t.launched is False:
            rows.append([_label(t), "-", "-", "-", "-", f"{wall:.1f}",
                         f"{t.reason}, not launched"])
            continue
        rows.append([_label(t), *(_f(tm.get(k)) for k in
                                  ("startup_s", "benchmark_s", "guardrail_s", "teardown_s")),
                     f"{wall:.1f}", t.reason or t.outcome])
    return _table(["trial", "start-up s", "benchmark s", "guardrail s", "teardown s", "wall s",
                   "outcome"], rows)


def _wall(t: TrialRecord) -> float:
    assert t.datetime_start and t.datetime_complete
    return (t.datetime_complete - t.datetime_start).total_seconds()


EVENTS = [  # (name, regex on an engine log line); vLLM timestamps have 1 s resolution
    ("banner", r"version 0\.\d+"), ("config", r"Resolved architecture"),
    ("core", r"Initializing a V1 LLM engine"), ("weights", r"Model loading took"),
    ("compiled", r"torch\.compile took"), ("kv", r"GPU KV cache size"),
    ("graphs", r"Graph capturing finished"), ("init", r"init engine \("),
    ("serving", r"Starting vLLM server"),
]
TS = re.compile(r" (\d\d-\d\d \d\d:\d\d:\d\d) \[")


def _events(log: Path, year: int) -> dict[str, datetime]:
    found: dict[str, datetime] = {}
    for line in log.read_text(errors="replace").splitlines():
        ts = TS.search(line)
        for name, rx in EVENTS:
            if ts and name not in found and re.search(rx, line):
                found[name] = datetime.strptime(f"{year}-{ts.group(1)}", "%Y-%m-%d %H:%M:%S")
    return found


def startup(trials: list[TrialRecord], root: Path) -> str:
    """Start-up split from the engine log's timestamps (1 s resolution)."""
    rows = []
    for t in trials:
        log = root / "trials" / str(t.number) / "engine.log"
        if not log.exists() or t.datetime_start is None or t.startup_s is None:
            continue
        ev, st = _events(log, t.datetime_start.year), t.startup
        start = t.datetime_start.replace(microsecond=0)
        end = t.datetime_start + _td(t.timings["startup_s"])
        comp = re.search(r"torch\.compile took ([\d.]+) s", log.read_text(errors="replace"))

        def gap(a: str, b: str, ev: dict[str, datetime] = ev) -> str:
            return f"{(ev[b] - ev[a]).total_seconds():.0f}" if a in ev and b in ev else "-"

        ev["start"] = start
        after = "graphs" if "graphs" in ev else "kv"
        rows.append([
            _label(t), gap("start", "banner"), gap("banner", "config"), gap("config", "core"),
            gap("core", "weights"),
            comp.group(1) if comp else "- (eager)", gap("compiled" if comp else "weights", "kv"),
            _f(st.graph_capture_s, "{:.0f}"), gap(after, "init"), gap("init", "serving"),
            f"{(end - ev['serving']).total_seconds():.0f}" if "serving" in ev else "-",
            f"{t.timings['startup_s']:.1f}"])
    head = ["trial", "API-server spawn + imports", "model config", "engine-core spawn + imports",
            "device init + weights", "torch.compile s (vLLM)", "profiling + KV cache",
            "CUDA graphs", "warm-up after capture", "API ready", "to /health OK", "start-up s"]
    return _table(head, rows)


def _td(s: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=s)


def roofline(trials: list[TrialRecord], weights_bytes: float,
             prompt: float, output: float) -> str:
    """Decode roofline at the batch implied by Little's law at the capacity rate.

    Each decoding sequence reads its KV cache (mean context: the prompt plus half the
    output) once per step; all sequences share one read of the weights.
    """
    rows = []
    for t in trials:
        if t.outcome != "complete" or not t.feasible or t.duplicate_of is not None:
            continue
        m, c = t.metrics, t.capacity
        assert c is not None, f"trial {t.number}: no capacity"
        rate = c.request_throughput
        lat = m.latencies
        batch = rate * (lat["mean_e2el_ms"] - lat["mean_ttft_ms"]) / 1000  # sequences decoding
        kv_tok = t.memory_estimate.kv_bytes_per_token
        ctx = prompt + output / 2
        step_bytes = weights_bytes + batch * ctx * kv_tok
        roof = batch / (step_bytes / HBM_BPS)
        out = c.output_throughput
        rows.append([_label(t), _rate(rate), f"{lat['mean_e2el_ms']:.0f}",
                     f"{lat['mean_ttft_ms']:.0f}", f"{batch:.1f}", f"{step_bytes / 1e9:.2f}",
                     f"{step_bytes / HBM_BPS * 1e3:.2f}", f"{roof:.0f}", f"{out:.0f}",
                     f"{out / roof:.1%}", f"{lat['mean_tpot_ms']:.2f}"])
    head = ["trial", "rate req/s", "mean E2E ms", "mean TTFT ms", "decoding seqs B",
            "GB read / step", "roofline step ms", "roofline tok/s", "measured out tok/s",
            "fraction", "measured mean TPOT ms"]
    return _table(head, rows)


def main(db: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
    everything = records(study)
    trials = [t for t in everything if t.datetime_complete]  # not the re-queued ones
    w = stored_scenario(study)["workload"]
    prompt, output = w["prefix_len"] + w["input_len"], w["output_len"]
    base = reference_trial(study)
    assert base is not None, f"{db}: no completed trial"
    launched = next(t for t in trials if t.memory_estimate)
    root = Path(db).with_suffix("")
    counts: dict[str, int] = {}
    for t in everything:
        kind = "duplicate" if t.duplicate_of is not None else (
            "infeasible" if t.state.name == "COMPLETE" and not t.feasible
            else t.state.name.lower())
        counts[kind] = counts.get(kind, 0) + 1
    print(f"study {study.study_name}: {len(everything)} trials {counts}; "
          f"engine {base.engine_version}; device {base.device}; "
          f"trial wall time {sum(_wall(t) for t in trials):.0f} s; gains over #{base.number}\n")
    for title, text in [
        ("Completed trials at their capacity rate", results(trials, base, output)),
        ("All trials", flags(trials)),
        ("Wall-time split per trial", timings(trials)),
        ("Start-up split from the engine logs (s)", startup(trials, root)),
        ("Decode roofline", roofline(trials, launched.memory_estimate.weights_bytes,
                                     prompt, output)),
    ]:
        print(f"### {title}\n\n{text}\n")


if __name__ == "__main__":
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", nargs="?", default="studies/qwen3-4b-h200.db",
                        help="a study database (SQLite file)")
    path = parser.parse_args().db
    if not Path(path).is_file():  # opening a missing file would create an empty database
        parser.error(f"{path}: no such study database")
    main(path)
