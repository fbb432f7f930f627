"""Where a study's GPU time went: start-up, bursts, sustained steps, the quality check,
teardown and idle time, with trials per GPU-hour and the start-up split after the first
trial (`GpuTime`), read from the trial records alone.

The clock is the study's own: each worker's trials from the first one's start to the last
one's end, so time a worker spent before its first trial or after its last (installing,
the engine's flag list, validation) is not the study's. A gap of more than `SESSION_GAP_S`
between two trials of one worker is a study stopped and resumed later (another day,
another machine), not GPU time of the study. A trial's own time ends where Optuna says it
completed and lasts its recorded span, or its timed parts where those are longer (a trial
stored after it ran, as `autotune explain` stores its runs, has no span of its own).
Every second of the clock falls in one activity (`Spent`), so the shares add up to 1.
A study of vLLM's CPU build has no GPU: its lines speak of machine time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from optuna.trial import TrialState

from autotune.engine.compilecache import HIT, MISS
from autotune.engine.phases import FAILED, PHASES
from autotune.results._replica import on_cpu
from autotune.results.show import outcome, reason
from autotune.tuning.records.trialrecord import TrialRecord

# Longer than any pause between two trials of one run (0.1-0.2 s on the H200 studies;
# a worker waits for the defaults before its first trial, not between two).
SESSION_GAP_S = 600.0
# How a trial counts: it started an engine, was pruned before launching one (the memory
# model, a flag combination vLLM refuses), or copied another trial's result.
LAUNCHED, NOT_LAUNCHED, COPY = "launched", "not launched", "copy"
# A trial that was interrupted or failed: its time counts, the trial does not.
STOPPED = "stopped"


@dataclass(frozen=True)
class Spent:
    """Seconds per activity: a trial's own (all but `idle`) or a whole study's.

    `burst` and `sustained` are the capacity steps' durations (the burst is the first,
    all-at-once step), `idle_waits` the waits for an idle engine before each step,
    `benchmark_rest` the rest of the benchmark (a fixed workload's whole run), `halted`
    a trial's time between its start-up and a crash or deadline that stopped it,
    `untimed` a trial's time outside its timed parts (the memory estimate and record
    writes, a copy, a trial pruned before launch, an interrupted one that timed nothing),
    `idle` the clock between trials."""

    startup: float = 0.0
    burst: float = 0.0
    sustained: float = 0.0
    idle_waits: float = 0.0
    benchmark_rest: float = 0.0
    quality: float = 0.0
    teardown: float = 0.0
    halted: float = 0.0
    untimed: float = 0.0
    idle: float = 0.0

    @property
    def total(self) -> float:
        return sum(seconds for _, seconds in self.items())

    def items(self) -> list[tuple[str, float]]:
        """(activity, seconds) in the order the views list them."""
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]

    def plus(self, other: Spent) -> Spent:
        """The sum, to the millisecond (the timers' own floats carry no more)."""
        return Spent(*(round(a + b, 3) for (_, a), (_, b) in zip(self.items(), other.items(),
                                                                 strict=True)))


# Each activity in the words the views print.
WORDS = {"startup": "start-up", "burst": "bursts", "sustained": "sustained steps",
         "idle_waits": "idle waits before steps", "benchmark_rest": "rest of the benchmark",
         "quality": "quality check", "teardown": "teardown", "halted": "halted trials",
         "untimed": "untimed", "idle": "idle between trials"}


@dataclass(frozen=True)
class Activity:
    """One activity of a study: its seconds and share of the GPU time; `percent` is the
    share to a tenth, rounded so that the percents of a study add up to 100.0."""

    name: str
    words: str
    seconds: float
    share: float
    percent: float


@dataclass(frozen=True)
class TrialTime:
    """One trial's part of the GPU time: how it counts (`LAUNCHED`, `NOT_LAUNCHED`, `COPY`,
    `STOPPED`), how it ended, its own seconds and what they went to, its start-up's launch
    path and compile cache outcome ("hit", "miss"; None where not recorded)."""

    number: int
    counts: str
    outcome: str
    reason: str
    wall_s: float
    spent: Spent
    startup_s: float | None = None
    launch: str | None = None
    compile_cache: str | None = None
    compile_s: float | None = None

    @classmethod
    def of(cls, r: TrialRecord) -> TrialTime:
        counts = _counts(r)
        spent = _spent(r) if counts in (LAUNCHED, STOPPED) else Spent()
        timed = spent.total
        span = (r.datetime_complete - r.datetime_start).total_seconds() \
            if r.datetime_start and r.datetime_complete else 0.0
        own = round(max(span, timed), 3)
        started = counts == LAUNCHED or (counts == STOPPED and r.startup_s is not None)
        s = r.startup
        return cls(r.number, counts, outcome(r), reason(r), own,
                   spent.plus(Spent(untimed=own - timed)),
                   round(r.startup_s or 0.0, 3) if started else None,
                   s.launch if started else None,
                   s.compile_cache if started else None, s.compile_s if started else None)


@dataclass(frozen=True)
class StartupSplit:
    """The start-up of some launched trials: how many, the median seconds, and the median
    seconds of each phase in start-up order (a phase a record lacks was folded into the
    next one: 0 there; empty where no record was split)."""

    trials: int
    median_s: float
    phases: dict[str, float] = field(default_factory=dict)
    launch: str | None = None  # of a single trial: warm or cold

    @classmethod
    def of(cls, trials: Sequence[TrialRecord]) -> StartupSplit | None:
        if not trials:
            return None
        split = [r.startup.phases for r in trials if r.startup.phases]
        names = sorted({p for s in split for p in s}, key=_phase_order)
        return cls(len(trials), statistics.median(r.startup_s or 0.0 for r in trials),
                   {p: statistics.median(s.get(p, 0.0) for s in split) for p in names},
                   trials[0].startup.launch if len(trials) == 1 else None)


@dataclass(frozen=True)
class CompileCount:
    """Launched trials after the first by what vLLM's torch.compile cache did for them:
    found the configuration's compiled code (hit), compiled it (miss), or not recorded
    (eager engines, records made before the outcome was kept)."""

    hits: int = 0
    misses: int = 0
    unknown: int = 0

    @classmethod
    def of(cls, trials: Sequence[TrialRecord]) -> CompileCount:
        found = Counter(r.startup.compile_cache for r in trials)
        return cls(found[HIT], found[MISS], len(trials) - found[HIT] - found[MISS])


@dataclass(frozen=True)
class GpuTime:
    """Where one study's GPU time went (`of`); `lines` says it in words."""

    seconds: float
    sessions: int
    trials: int  # complete or pruned, copies and trials pruned before launch included
    launched: int
    not_launched: int
    copies: int
    stopped: int  # interrupted or failed: their time counts, they do not
    spent: Spent
    activities: tuple[Activity, ...]
    first: StartupSplit | None  # the first launched trial's start-up
    later: StartupSplit | None  # the launched trials after it
    compile: CompileCount
    rows: tuple[TrialTime, ...]
    # "GPU", or "machine" for a study of vLLM's CPU build: its lines then speak of machine
    # time and trials per machine-hour (the keys of the stored figures stay the same).
    machine: str = "GPU"
    EXTRA = ("per_gpu_hour", "launched_per_gpu_hour")

    @property
    def per_gpu_hour(self) -> float | None:
        return self.trials / (self.seconds / 3600) if self.seconds > 0 else None

    @property
    def launched_per_gpu_hour(self) -> float | None:
        return self.launched / (self.seconds / 3600) if self.seconds > 0 else None

    @classmethod
    def of(cls, records: Sequence[TrialRecord]) -> GpuTime:
        """The GPU time of the trials in `records` (a study's): trials still waiting or
        running have no end yet and are left out."""
        done = sorted((r for r in records if r.datetime_complete is not None
                       and r.state != TrialState.RUNNING), key=lambda r: r.number)
        rows = tuple(TrialTime.of(r) for r in done)
        seconds, sessions = _clock(done, rows)
        spent = Spent()
        for row in rows:
            spent = spent.plus(row.spent)
        spent = spent.plus(Spent(idle=seconds - spent.total))
        started = [r for r, row in zip(done, rows, strict=True) if row.counts == LAUNCHED]
        n = Counter(row.counts for row in rows)
        return cls(seconds, sessions, len(rows) - n[STOPPED], n[LAUNCHED], n[NOT_LAUNCHED],
                   n[COPY], n[STOPPED], spent, _activities(spent),
                   StartupSplit.of(started[:1]), StartupSplit.of(started[1:]),
                   CompileCount.of(started[1:]), rows,
                   "machine" if done and all(on_cpu(r) for r in done) else "GPU")

    def lines(self) -> list[str]:
        """`GPU time 951 s for 8 trials: 30.3 per GPU-hour (...)`, where it went, and the
        start-up after the first trial; one line, "no trial has finished", without trials."""
        if not self.rows:
            return [f"{self.machine} time: no trial has finished"]
        others = "".join(f", {n} {what}" for n, what in (
            (self.not_launched, "pruned before launch"), (self.copies, "copied"),
            (self.stopped, "stopped, not counted")) if n)
        sessions = f" in {self.sessions} sessions" if self.sessions > 1 else ""
        hour = f"per {self.machine}-hour"
        build = " on vLLM's CPU build" if self.machine != "GPU" else ""
        head = (f"{self.machine} time {_s(self.seconds)} s{sessions} for "
                f"{_n(self.trials, 'trial')}{build}: {_rate(self.per_gpu_hour)} {hour}; "
                f"{self.launched} launched ({_rate(self.launched_per_gpu_hour)} {hour})"
                f"{others}")
        went = "where it went: " + ", ".join(
            f"{a.words} {_s(a.seconds)} s ({a.percent:.1f} %)" for a in self.activities
            if round(a.seconds, 1))
        return [head, went, self.startup_line()]

    def startup_line(self) -> str:
        """`start-up: the first trial 107 s (cold); after it, median 64 s over 7 (...)`."""
        first, later = self.first, self.later
        if first is None:
            return "start-up: no trial launched an engine"
        text = f"start-up: the first trial {_s(first.median_s)} s" + (
            f" ({first.launch})" if first.launch else "")
        if later is None:
            return text
        text += f"; after it, median {_s(later.median_s)} s over {_n(later.trials, 'trial')}"
        if later.phases:
            text += " (" + ", ".join(f"{p.replace('_', ' ')} {_s(v)}"
                                     for p, v in later.phases.items()) + ")"
        c = self.compile
        counted = [f"{n} {what}" for n, what in ((c.hits, "hit" if c.hits == 1 else "hits"), (
            c.misses, "miss" if c.misses == 1 else "misses"), (c.unknown, "not recorded"))
                   if n]
        return text + "; compile cache: " + (", ".join(counted) if c.hits or c.misses
                                             else "not recorded")


def _counts(r: TrialRecord) -> str:
    if r.state not in (TrialState.COMPLETE, TrialState.PRUNED):
        return STOPPED
    if r.duplicate_of is not None:
        return COPY  # its timings are the original's
    return NOT_LAUNCHED if r.launched is False or r.startup_s is None else LAUNCHED


def _spent(r: TrialRecord) -> Spent:
    """A launched trial's timed parts by activity (`autotune.tuning.trial` times them)."""
    t = r.timings
    startup = t.get("startup_s", 0.0)
    if "until_stopped_s" in t:  # halted: start-up, measuring and teardown in one
        return Spent(startup=startup, halted=max(t["until_stopped_s"] - startup, 0.0))
    burst = sustained = waits = 0.0
    cap = r.capacity
    if cap is not None and "benchmark_s" in t:
        for step in cap.steps:
            if step.kind == "burst":
                burst += step.duration_s
            else:
                sustained += step.duration_s
            waits += step.idle_wait_s
    rest = t.get("benchmark_s", 0.0) - burst - sustained - waits
    return Spent(startup=startup, burst=burst, sustained=sustained, idle_waits=waits,
                 benchmark_rest=rest, quality=t.get("guardrail_s", 0.0),
                 teardown=t.get("teardown_s", 0.0))


def _clock(done: Sequence[TrialRecord], rows: Sequence[TrialTime]) -> tuple[float, int]:
    """The study's GPU seconds and sessions: each worker's trials, split where one starts
    more than `SESSION_GAP_S` after the last ended; a session lasts from its first trial's
    start to its last one's end, or its trials' own time where that is longer."""
    by_worker: dict[str, list[tuple[dt.datetime, dt.datetime, float]]] = {}
    for r, row in zip(done, rows, strict=True):
        end = r.datetime_complete or dt.datetime.min  # `done` holds finished trials
        by_worker.setdefault(r.worker.id if r.worker else "", []).append(
            (end - dt.timedelta(seconds=row.wall_s), end, row.wall_s))
    found: list[tuple[dt.datetime, dt.datetime, float]] = []  # (first start, last end, own)
    for spans in by_worker.values():
        ours: list[tuple[dt.datetime, dt.datetime, float]] = []
        for start, end, wall in sorted(spans):
            if ours and (start - ours[-1][1]).total_seconds() <= SESSION_GAP_S:
                ours[-1] = (ours[-1][0], max(ours[-1][1], end), ours[-1][2] + wall)
            else:
                ours.append((start, end, wall))
        found += ours
    return round(sum(max((b - a).total_seconds(), own) for a, b, own in found), 3), len(found)


def _activities(spent: Spent) -> tuple[Activity, ...]:
    """Each activity with its share of `spent`, its percent to a tenth rounded by largest
    remainder so that they add up to 100.0 (a plain rounding of each can give 99.9)."""
    total = spent.total
    items = spent.items()
    shares = [s / total if total > 0 else 0.0 for _, s in items]
    tenths = [int(x * 1000) for x in shares]
    left = (1000 if total > 0 else 0) - sum(tenths)
    for i in sorted(range(len(items)), key=lambda i: tenths[i] - shares[i] * 1000)[:left]:
        tenths[i] += 1
    return tuple(Activity(name, WORDS[name], seconds, share, t / 10)
                 for (name, seconds), share, t in zip(items, shares, tenths, strict=True))


def _phase_order(name: str) -> tuple[int, str]:
    order = (*PHASES, FAILED)
    return (order.index(name), "") if name in order else (len(order), name)


def _s(seconds: float) -> str:
    """Seconds as the views write them: whole from 10 s (with thousands' commas), one
    decimal below."""
    return f"{seconds:,.0f}" if abs(seconds) >= 10 else f"{seconds:.1f}"


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
