"""Terminal views: the live line of `autotune tune` and the table of `autotune show`."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from autotune import _reasons as reasons
from autotune import _traces as traces
from autotune._flags import FlagValue, to_args
from autotune._remeasurements import PairRun, Recheck, Validation
from autotune.engine import compilecache
from autotune.measure import capacityrecord, capacitytext, serversearch
from autotune.measure.capacityrecord import CapacityRecord
from autotune.results import _whatif as whatif
from autotune.results import cost
from autotune.results._decision import capacity_ratio
from autotune.results.show import Thresholds, fmt, outcome, reason, speculation_text
from autotune.results.summary import RankRow, Summary, TrialRow
from autotune.tuning.policy import relief
from autotune.tuning.records.progress import Progress
from autotune.tuning.records.trialrecord import TrialRecord


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def progress_line(p: Progress) -> str:
    """`trial 3/5 | 4m12s elapsed, ~1h left | best #2 +12.3% | last #3 pruned (oom)`."""
    parts = [f"trial {p.done}/{p.planned}", f"{_clock(p.elapsed_s)} elapsed"]
    left = p.elapsed_s / p.done * (p.planned - p.done) if p.done else 0.0
    if p.deadline_s is not None:
        left = min(left, max(0.0, p.deadline_s - p.elapsed_s))
    if p.done < p.planned:
        parts[-1] += f", ~{_clock(left)} left"
    if p.best is not None and (p.best.gain is not None or p.best.capacity is not None):
        parts.append(f"best #{p.best.number} " + _figure(p.best, p.reference))
        if relief.ceiling(p.best):  # before the night is spent on flags that cannot help
            parts.append("its GPU is near full use: further flags will not help much")
    if p.last is not None:
        why = reason(p.last)
        if p.last.reason == reasons.FAILED_TO_START and p.last.detail:
            why += f": {p.last.detail}"  # the name alone does not say why it did not start
        parts.append(f"last #{p.last.number} {outcome(p.last)}" + (f" ({why})" if why else "")
                     + (f": {capacitytext.describe(p.last.capacity)}"
                        if p.last.capacity is not None and not why else ""))
    return " | ".join(parts)


def _figure(best: TrialRecord, reference: TrialRecord | None) -> str:
    """The best's capacity and its ratio to the reference (`decision.capacity_ratio`), the
    same figures `show` gives; the score's gain where the study measures no capacity."""
    cap = best.capacity
    if cap is None or not cap.low:
        return f"score gain {best.gain:+.1%} vs defaults" if best.gain is not None else "-"
    text = f"{cap.request_throughput:.3g} req/s"
    ratio = capacity_ratio(best, reference)
    if ratio is not None:
        text += f", {ratio.ratio:.2f}x defaults ({ratio.span()})"
    elif reference is not None and reference.number == best.number:
        text += " (vLLM's defaults)"
    return text


def _flags(flags: Mapping[str, FlagValue]) -> str:
    out = []
    for k, v in flags.items():
        if isinstance(v, dict):
            v = json.dumps(v, separators=(",", ":"))
        out.append(f"{k}={v}" if not isinstance(v, bool) else (k if v else f"no-{k}"))
    return " ".join(out) or "(defaults)"


WIDE = 120  # columns from which `show` draws its full table; below, one trial per block


def _gain_cell(r: TrialRow, weighted: bool) -> str:
    if not weighted:
        return ", ".join(fmt(v, ".4g") for v in (r.values or []))
    if r.tied_with_best is not None and r.gain is not None:
        return f"tied (#{r.tied_with_best})"  # within noise of the best: not a loss
    return fmt(r.gain, "+.1%")


def _spec_cell(r: TrialRow) -> str:
    """Speculation's acceptance rate and tokens per step: `62% x2.9`, "-" without it."""
    spec = r.speculation
    if spec is None or spec.acceptance_rate is None:
        return "-"
    return f"{spec.acceptance_rate:.0%} x{fmt(spec.mean_acceptance_length, '.2f')}"


def print_summary(data: Summary, console: Console | None = None, *,
                  decision_last: bool = False) -> None:
    """The study: its decision first (`show`; `decision_last` puts it at the end, where
    `tune` finishes), then every trial, the reasons, the quality verdicts, the ranking,
    where its GPU time went."""
    console = console or Console()
    if not decision_last:
        print_decision(data, console)
    weighted = data.weighted
    speculated = any(r.speculation for r in data.trials)
    if console.width >= WIDE:
        table = Table(title=f"study {data.study}")
        for col in ("#", "tried because", "flags", "outcome", "reason", "tput", "latency ms",
                    "mem MiB", "quality", *(["spec acc"] if speculated else []),
                    "gain" if weighted else "values"):
            table.add_column(col, overflow="fold")
        for r in data.trials:
            table.add_row(str(r.number), r.tried, _flags(r.flags), r.outcome, r.reason,
                          fmt(r.throughput), fmt(r.latency_ms), fmt(r.memory_mib, ".0f"),
                          r.quality.cell, *([_spec_cell(r)] if speculated else []),
                          _gain_cell(r, weighted))
        console.print(table)
    else:
        print_stacked(data, console, weighted)
    print_legend(data.reasons, console)
    print_quality(data.trials, console)
    if data.ranking:
        print_ranking(data.ranking, console)
    mm = data.memory_model
    if mm.trials:
        console.print(f"memory model: KV capacity predicted within {mm.max_abs_error:.1%} "
                      f"(median {mm.median_error:+.1%}) over {mm.trials} launched trials; "
                      f"{mm.not_launched} configuration(s) pruned without launching")
    for line in data.gpu_time.lines() if data.gpu_time is not None else []:
        console.print(line, markup=False, highlight=False)
    if data.load is not None:
        print_cost(data.cost, console)
    for line in data.explanation_lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if data.what_if is not None:
        print_what_if(data.what_if, console)
    for r in data.trials:
        if r.validation:
            console.print(f"validated: trial #{r.number} {r.validation.line()}")
        if r.validation_vllm:
            console.print(f"re-measured: trial #{r.number} {r.validation_vllm.line()}")
    if decision_last:
        print_decision(data, console)


def print_decision(data: Summary, console: Console) -> None:
    """The decision (`autotune.results._decision`) in its own words, or why there is none;
    a Pareto study's feasible front."""
    def say(line: str) -> None:  # wrapped at the terminal's width; names are not markup
        console.print(line, markup=False, highlight=False)

    if not data.weighted:
        nums = ", ".join(f"#{r.number}" for r in data.pareto or [])
        say(f"Pareto set (feasible): {nums or 'empty'}; `autotune export STUDY --trial N` "
            "exports one point")
        if not nums and data.no_answer is not None:
            say(data.no_answer.line())
        return
    if data.decision is not None:
        for line in data.decision.lines():
            say(line)
        if data.ceiling:
            say(f"  {data.ceiling}")
    elif data.no_answer is not None:
        say(data.no_answer.line())


def print_quality(trials: list[TrialRow], console: Console) -> None:
    """Each checked trial's quality verdict in words (task accuracy, the paired difference
    with its interval, the budget), so that "changed within budget" is never missed."""
    worded = [r for r in trials if r.quality.verdict and not r.reason.startswith("same as")]
    if worded:
        console.print("quality (task check against the reference configuration):")
    for r in worded:
        console.print(f"  #{r.number} {_flags(r.flags)}: {r.quality.words}", highlight=False,
                      markup=False)


def print_legend(legend: dict[str, str], console: Console) -> None:
    """What the reasons in the table mean (`autotune._reasons`), one line each."""
    if legend:
        console.print("reasons:")
    for name, meaning in legend.items():
        console.print(f"  {name}: {meaning}", highlight=False)


def print_cost(side: cost.SideBySide | None, console: Console) -> None:
    """`show --load`: the winner beside the defaults, replicas and money
    (`autotune.results.cost.SideBySide`), then what the winner saves."""
    if side is None:
        console.print("money and machines: no single winner to size (no feasible trial yet, or "
                      "a Pareto study: export --trial N --load R sizes one trial)")
        return
    # Names and the currency are user data: no `[...]` may read as markup. The heading is a
    # line of its own, not the table's title, which rich wraps to the table's width.
    console.print(f"money and machines at {side.load:g} req/s; {side.price_text}",
                  markup=False, highlight=False)
    table = Table()
    for col in ("", "winner", side.reference_name):
        table.add_column(Text(col), overflow="fold")
    for row in side.rows:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    console.print(side.saving, highlight=False, markup=False)


def print_what_if(data: whatif.Rerank, console: Console) -> None:
    """The trials re-ranked under another SLO, from their recorded steps."""
    table = Table(title="what if: " + ", ".join(f"{k}<={v:g}" for k, v in data.slos.items())
                  + " (recorded steps only)")
    for col in ("#", "tried because", "answer", "steps"):
        table.add_column(col, overflow="fold")
    for t in data.trials:
        table.add_row(str(t.number), t.tried, t.text + (
            "" if t.quality_ok else " (rejected by the guardrail)"), str(t.steps))
    console.print(table)
    console.print(data.text())


def print_stacked(data: Summary, console: Console, weighted: bool = True) -> None:
    """The trials for a narrow terminal: per trial, its figures on one line and its flags
    (and why it ended as it did) indented below, so no cell is cut into pieces."""
    console.print(f"study {data.study}: {len(data.trials)} trials "
                  "(tput, latency ms, memory MiB, quality, gain)", style="bold")
    for r in data.trials:
        head = f"#{r.number:<3} {r.outcome:<10}"
        figures = "  ".join([fmt(r.throughput), fmt(r.latency_ms), fmt(r.memory_mib, ".0f"),
                             r.quality.cell, _gain_cell(r, weighted)])
        console.print(f"{head} {figures}", soft_wrap=True, highlight=False)
        about = " ".join(x for x in (r.tried + ":", _flags(r.flags)) if x)
        if r.speculation:
            about += f"; speculation {_spec_cell(r)}"
        if r.reason:
            about += f"; {r.reason}"
        if console.soft_wrap:  # never wrapped (piped): a Padding would crop it at the width
            console.print(" " * 5 + about, highlight=False)
        else:
            console.print(Padding(about, (0, 0, 0, 5)), highlight=False)


def print_ranking(ranking: list[RankRow], console: Console) -> None:
    """Feasible trials by the study's rule, the decision first (`ranking.standing`); `=`
    marks those the winner was chosen from, `?` capacities too uncertain to rank by. A
    narrow terminal gets the essential columns only."""
    wide = console.width >= WIDE
    table = Table(title="capacity at SLO (feasible trials)")
    cols: tuple[str, ...] = ("rank", "#", "baseline", "req/s", "interval", "±", "out tok/s",
                             "overrides", "steps") if wide else \
        ("rank", "#", "req/s", "interval", "±", "overrides")
    priced = any(r.per_million is not None for r in ranking)
    if priced:  # what a million output tokens cost at each one's capacity
        cols += (f"{ranking[0].currency}/M tok",)
    for col in cols:
        table.add_column(Text(col), no_wrap=True)  # the currency is user data, not markup
    for i, r in enumerate(ranking, 1):
        mark = (" =" if r.tied and i > 1 else "") + (" ?" if r.too_uncertain else "")
        cells = {"rank": f"{i}{mark}", "#": str(r.number),
                 "baseline": r.name, "req/s": fmt(r.request_throughput, ".3g"),
                 "interval": r.span, "±": fmt(r.uncertainty, ".1%"),
                 "out tok/s": fmt(r.output_throughput), "overrides": str(r.overrides),
                 "steps": str(r.steps)}
        if priced:
            cells[cols[-1]] = fmt(r.per_million, ".3g")
        table.add_row(*(cells[c] for c in cols))
    console.print(table)
    tied = [r for r in ranking if r.tied]
    if len(tied) > 1:
        console.print(f"the study cannot separate its top {len(tied)} configurations ("
                      + ", ".join(f"#{r.number}" for r in tied) + "): their capacity "
                      "intervals overlap. = marks them; among ties the configuration with "
                      "the fewest overrides of vLLM's defaults is preferred")
    unsure = [r for r in ranking if r.too_uncertain]
    if unsure:
        console.print("? marks a capacity still too uncertain to rank by (wider than "
                      f"±{capacityrecord.TOO_UNCERTAIN:.0%}: "
                      + ", ".join(f"#{r.number}" for r in unsure) + "): it ties with none "
                      "and ranks above only the trials its interval lies wholly above")
    if ranking and ranking[0].bottleneck:
        console.print(f"#{ranking[0].number} is limited by: {ranking[0].bottleneck}")


def print_capacity(cap: CapacityRecord, slo_keys: list[str], console: Console) -> None:
    """The capacity line and the table of its search steps."""
    console.print(f"capacity at SLO: {capacitytext.describe(cap)}; "
                  f"{fmt(cap.output_throughput)} output tok/s at that rate")
    if source := capacitytext.achieved_text(cap):
        console.print(f"  {source}")
    if limit := capacityrecord.limit_text(cap):
        console.print(f"limited by: {limit}")
    table = Table(title="capacity search steps (offered, achieved and SLO figures of each "
                  "step's steady window)")
    for col in capacitytext.step_columns(cap, slo_keys):
        table.add_column(col, justify="right")
    for row in capacitytext.step_rows(cap, slo_keys):
        table.add_row(*row)
    console.print(table)


def print_trial(r: TrialRecord, console: Console | None = None) -> None:
    """One trial in full: configuration, outcome, key figures, quality and worst prompts."""
    console = console or Console()
    console.print(f"trial #{r.number} {r.name}: {outcome(r)}"
                  + (f" ({reason(r)})" if reason(r) else ""))
    why = r.tried_because
    console.print(f"tried because: {why.text}" + (
        f"; moved {why.knob} {why.before} -> {why.after}: {why.why}" if why.knob else ""))
    console.print("command: " + (" ".join(str(x) for x in r.command) or "-")
                  + ("" if r.command else f" (flags {_flags(r.flags)})"))
    if r.detail:
        console.print(f"detail: {r.detail}")
    if r.engine_version or r.device_name:
        console.print(f"engine: {r.engine_version or '-'} on {r.device_name or '-'}"
                      f"; log {r.log_path or '-'}")
    if r.timings:
        console.print("time: " + ", ".join(f"{k.removesuffix('_s')} {v:.1f} s"
                                           for k, v in r.timings.items())
                      + (f" ({r.startup.launch} start)" if r.startup.launch else ""))
    if r.startup.phases or r.startup.compile_cache:
        console.print("start-up: " + "; ".join(filter(None, (
            ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in r.startup.phases.items()),
            _compile(r)))))
    if (warm := r.startup.warm) is not None and (warm.flags or warm.cache or warm.env):
        console.print("warm restart: " + "; ".join(filter(None, (
            "held " + " ".join(to_args(warm.flags)) if warm.flags else "",
            f"compile cache {warm.cache}" if warm.cache else "",
            " ".join(f"{k}={v}" for k, v in warm.env.items()
                     if k != compilecache.ROOT)))), markup=False, highlight=False)
    m = r.metrics
    if r.bottleneck is not None and not r.capacity:
        console.print(f"limited by: {r.bottleneck.text}")
    if m:
        console.print(f"throughput {fmt(m.value('output_throughput'))} tok/s, "
                      f"{fmt(m.value('request_throughput'), '.2f')} req/s; TTFT p50/p95 "
                      f"{fmt(m.value('median_ttft_ms'))}/{fmt(m.value('p95_ttft_ms'))} ms; "
                      f"TPOT p50 {fmt(m.value('median_tpot_ms'), '.2f')} ms; "
                      f"completed {m.value('completed')}, failed {m.value('failed')}")
    if m and isinstance(m.replayed, traces.Replay):  # a trace: which part was measured
        console.print(m.replayed.text())
    if r.speculation is not None:
        spec = r.speculation
        console.print(f"speculation: {speculation_text(r) or 'nothing accepted'}; "
                      f"{spec.accepted_tokens:,} of {spec.draft_tokens:,} draft tokens accepted "
                      f"in {spec.drafts:,} drafts, of {spec.generated_tokens:,} output tokens; "
                      "by position "
                      + " ".join(f"{x:.0%}" for x in spec.accepted_per_position))
    if r.startup.async_scheduling is not None:
        console.print("async scheduling (as the engine said): "
                      + ("on" if r.startup.async_scheduling else "off"))
    if r.capacity:
        print_capacity(r.capacity, capacitytext.slo_keys(r.capacity), console)
    v = r.validation
    if v:
        console.print(f"validation: {v.line()}; {v.when}, {v.engine_version}")
        for name, ratio in v.per_metric.items():
            if name != "score":
                ci = "no CI" if ratio.ci_low is None else \
                    f"95% CI {_ratio(ratio.ci_low)} .. {_ratio(ratio.ci_high)}"
                console.print(f"  {ratio.key}: {_ratio(ratio.ratio)} of #{v.against} ({ci}, "
                              f"{ratio.better} is better)")
    vv = r.validation_vllm
    if vv:
        console.print(f"capacity re-measured: {vv.line()}; {vv.when}, {vv.engine_version}")
        if vv.workload_note:
            console.print(f"  {vv.workload_note}")
    q = r.quality
    if q and q.checked:
        th = Thresholds.of(q)
        if q.verdict is not None:
            console.print(f"quality: {q.words()}", highlight=False, markup=False)
            t = q.tasks
            if t is not None:
                console.print(f"  task check: {t.items} items, accuracy {t.accuracy:.1f} % "
                              f"({t.accuracy_low:.1f}-{t.accuracy_high:.1f}), reference "
                              f"{t.reference_accuracy:.1f} %; {t.lost} lost, {t.gained} gained "
                              f"(McNemar p {t.p_value:.2g}); {fmt(t.seconds, '.1f')} s",
                              highlight=False)
        console.print(f"{'  log-probs' if q.verdict else 'quality'}: "
                      f"{'' if q.verdict else ('passed' if q.passed else 'REJECTED') + '; '}"
                      f"drift {q.drift:.4f} nats (max {fmt(th.drift, '.4f')}; "
                      f"{q.noise_multiple()}), agreement "
                      f"{q.agreement:.3f} (min {fmt(th.agreement, '.3f')}), "
                      f"common prefix {q.prefix_ratio:.3f}; noise floor drift "
                      f"{(q.noise or {}).get('drift', 0):.4f}"
                      + (f"; prompts sent {q.template}" if q.template else ""),
                      highlight=False)
        for w in q.worst or []:
            console.print(f"  prompt {w['prompt']} ({w['prompt_text']!r}): drift "
                          f"{w['drift']:.4f}, similarity {w['similarity']:.2f}, diverges at "
                          f"token {w['diverges_at']}")
            console.print(f"    reference: {w['reference'][:120]!r}")
            console.print(f"    this run:  {w['output'][:120]!r}")


def _compile(r: TrialRecord) -> str:
    """`compile: miss, 28.2 s` (vLLM's torch.compile seconds), `compile: hit`; "" where
    the record does not say what the compile cache did."""
    s = r.startup
    if not s.compile_cache:
        return ""
    return f"compile: {s.compile_cache}" + (f", {s.compile_s:.1f} s" if s.compile_s else "")


def validation_run(i: int, n: int, r: PairRun) -> str:
    """`run 3/6: trial #0 (baseline): throughput 410.2, latency 88.1 ms, start-up 27.4 s`."""
    return (f"run {i}/{n}: trial #{r.trial} ({r.role}): throughput {fmt(r.throughput)}, "
            f"latency {fmt(r.latency_ms)} ms, start-up {fmt(r.startup_s)} s")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}x"


def print_validation(v: Validation, console: Console | None = None) -> None:
    """The runs of a validation, the candidate/baseline ratio of each metric with its 95 %
    CI, and the headline gain."""
    console = console or Console()
    keys = {name: m.key for name, m in v.per_metric.items()}
    runs = Table(title=f"validation: trial #{v.candidate} against #{v.against}, "
                 f"{v.repeats} pair(s), alternating, a fresh engine each run")
    for col in ("run", "trial", "role", keys.get("throughput", "throughput"),
                keys.get("latency_ms", "latency ms"), "mem MiB", "start-up s"):
        runs.add_column(col, overflow="fold")
    for i, r in enumerate(v.runs, 1):
        runs.add_row(str(i), f"#{r.trial}", r.role, fmt(r.throughput), fmt(r.latency_ms),
                     fmt(r.memory_mib, ".0f"), fmt(r.startup_s))
    console.print(runs)
    gains = Table(title="candidate / baseline (geometric mean over the pairs)")
    for col in ("metric", "baseline", "candidate", "ratio", "95% CI", "better"):
        gains.add_column(col, overflow="fold")
    for m in v.per_metric.values():
        if m.key == "weighted score":  # a mean log-ratio: exp() is its ratio
            m = replace(m, ratio=_exp(m.mean), ci_low=_exp(m.ci_low), ci_high=_exp(m.ci_high))
        ci = "-" if m.ci_low is None else f"{_ratio(m.ci_low)} .. {_ratio(m.ci_high)}"
        gains.add_row(m.key, fmt(m.baseline_mean), fmt(m.candidate_mean), _ratio(m.ratio), ci,
                      m.better)
    console.print(gains)
    if v.ci_low is None:
        console.print("one pair: no confidence interval (use --repeats 2 or more)")
    console.print(f"validated gain of trial #{v.candidate}: {v.line()}")


def _exp(x: float | None) -> float | None:
    return None if x is None else math.exp(x)


def validation_vllm_run(i: int, n: int, r: PairRun) -> str:
    """`run 3/6: trial #0 (baseline): 12.3 req/s (12.1-13.0), 6 steps, start-up 27.4 s`;
    a fixed-workload run gives its metric (`median_tpot_ms 4.1, 812 tok/s`)."""
    if r.metric:
        return (f"run {i}/{n}: trial #{r.trial} ({r.role}): {r.metric} "
                f"{fmt(r.figure, '.3g')}, {fmt(r.output_throughput)} output "
                f"tok/s, start-up {fmt(r.startup_s)} s")
    return (f"run {i}/{n}: trial #{r.trial} ({r.role}): capacity "
            f"{fmt(r.capacity, '.3g')} req/s (passes {fmt(r.low, '.3g')}, fails "
            f"{fmt(r.high, '.3g')}), {len(r.steps)} steps, start-up {fmt(r.startup_s)} s")


def print_validation_vllm(v: Recheck, console: Console | None = None) -> None:
    """Each run's capacity and bracket by `vllm bench serve`, then the ratio with its 95 %
    interval next to the study's own ratio."""
    console = console or Console()
    if v.metric:
        _print_fixed_vllm(v, console)
        return
    runs = Table(title=f"capacity at SLO by vllm bench serve: trial #{v.candidate} against "
                 f"#{v.against}, {v.repeats} pair(s), alternating, a fresh engine each "
                 f"run, {v.step_s:g}-s steps")
    for col in ("run", "trial", "role", "req/s", "passes", "fails", "bracket", "steps",
                "start-up s"):
        runs.add_column(col, overflow="fold")
    for i, r in enumerate(v.runs, 1):
        runs.add_row(str(i), f"#{r.trial}", r.role, fmt(r.capacity, ".3g"),
                     fmt(r.low, ".3g"), fmt(r.high, ".3g"), fmt(r.bracket, ".1%"),
                     str(len(r.steps)), fmt(r.startup_s))
    console.print(runs)
    if v.workload_note:
        console.print(v.workload_note)
    if v.ci_low is None and v.ratio is not None:
        console.print("one pair: no confidence interval (use --repeats 2 or more)")
    console.print(f"capacity of trial #{v.candidate} / #{v.against}: {v.line()}")


def _print_fixed_vllm(v: Recheck, console: Console) -> None:
    """A fixed-workload re-check: each run's metric and throughput, then the ratio."""
    runs = Table(title=f"the study's workload by vllm bench serve: trial #{v.candidate} "
                 f"against #{v.against}, {v.repeats} pair(s), alternating, a fresh "
                 "engine each run")
    for col in ("run", "trial", "role", v.metric or "figure", "output tok/s", "start-up s"):
        runs.add_column(col, overflow="fold")
    for i, r in enumerate(v.runs, 1):
        runs.add_row(str(i), f"#{r.trial}", r.role, fmt(r.figure, ".3g"),
                     fmt(r.output_throughput), fmt(r.startup_s))
    console.print(runs)
    if v.ci_low is None and v.ratio is not None:
        console.print("one pair: no confidence interval (use --repeats 2 or more)")
    console.print(f"trial #{v.candidate} / #{v.against}: {v.line()}")


# A log record with this attribute true (`extra={PRINTED: True}`) was printed by the
# command itself and goes to the log file only.
PRINTED = "autotune_printed"


# A line that launches an engine: what runs it ("trial 3", "ablation of #6: without x").
_LAUNCH = re.compile(r"^(.+?): (?:vllm serve|python) ")


def _cut(text: str, most: int = 100) -> str:
    """`text` in at most about `most` characters, cut between words and marked as cut, so
    that no figure is quoted in part (`6932.5>25` of `6932.5>2500`)."""
    return text if len(text) <= most else text[:most].rsplit(" ", 1)[0] + " ..."


class _Narrator(logging.Handler):
    """Says on the terminal what the run is doing, from the `autotune` logger's records:
    the status line names the current phase (building the model, starting trial k's
    engine, capacity step k at R req/s), and each of those events is printed as a line
    (a step as it starts is the status alone: its verdict line follows)."""

    def __init__(self, console: Console, status: Any, what: str):
        super().__init__(logging.INFO)
        self.console, self.status, self.what = console, status, what
        self.doing = "preparing the study"  # the phase a Ctrl-C interrupts
        self.running = ""  # what runs the current engine ("trial 3")

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, PRINTED, False):  # the command's own lines: printed already
            return
        try:
            text = record.getMessage()
            note = getattr(record, serversearch.STEP, None)
            if isinstance(note, serversearch.StepNote):
                # the step under way, or the last one judged: never the one before it
                self.doing = ", ".join(filter(None, (
                    self.running, note.name if note.starts else f"after {note.name}")))
                if note.starts:
                    self._status(self.doing)
                    return
            self.console.print(f"  {text}" if text.startswith("capacity") else text,
                               soft_wrap=True, highlight=False, markup=False)
            if launch := _LAUNCH.match(text):
                self.running = launch.group(1)
            phase = re.sub(r"^(trial \d+): (vllm serve|python) .*",
                           r"\1: starting the engine and waiting for it to serve", text)
            if not isinstance(note, serversearch.StepNote):
                self.doing = _cut(phase)
            self._status(_cut(phase))
        except Exception:  # noqa: BLE001 - the narration must never stop a run
            self.handleError(record)

    def _status(self, phase: str) -> None:
        self.status.update(f"{phase} (since {time.strftime('%H:%M:%S')}; {self.what})")


@contextlib.contextmanager
def live(console: Console, what: str) -> Iterator[Any]:
    """A status line that says in words what `tune` is doing, from its first second, and
    where the run's log and each trial's engine log are."""
    logger = logging.getLogger("autotune")
    for h in logger.handlers:
        if isinstance(h, logging.FileHandler):
            folder = Path(h.baseFilename).parent
            console.print(f"log of this run: {h.baseFilename}; each trial's engine log and "
                          f"figures: {folder / 'trials'}/<trial>/", soft_wrap=True)
    with console.status(f"preparing the study ({what})") as status:
        narrator = _Narrator(console, status, what)
        logger.addHandler(narrator)
        previous = _say_when_interrupted(console, narrator)
        try:
            yield status
        finally:
            logger.removeHandler(narrator)
            if previous is not None:
                signal.signal(signal.SIGINT, previous)


def _say_when_interrupted(console: Console, narrator: _Narrator) -> Any:
    """Say at once what a Ctrl-C (or SIGTERM, which takes its path) stops, before the engine's
    teardown runs, then interrupt as before; the handler it replaced, or None where none
    could be set (not the main thread)."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:  # started in the background: Ctrl-C is not ours to take
        return None
    told = [0]

    def handler(signum: int, frame: Any) -> None:
        told[0] += 1
        console.print(f"interrupted ({narrator.doing}): stopping the engine, the trial goes "
                      "back into the queue; run again to resume" if told[0] == 1 else
                      "interrupted again: no more grace, killing the engine now",
                      markup=False, highlight=False)
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        return None
    return previous
