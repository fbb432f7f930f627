"""The trials as the figures place them: what the study's objective measures (`Axes`), and each
trial that has figures as a `Point` (what it measured: its record's `measures`, or the probe
phase's partial figures for a trial pruned mid-run); baselines are named, since every gain
reads against them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from optuna.trial import TrialState

from autotune._flags import Flags
from autotune.config import latency_key
from autotune.errors import ConfigError
from autotune.measure.measurement import Measurement
from autotune.results.show import reason
from autotune.tuning.policy import objective as obj
from autotune.tuning.ranking import choose, fixed_flags, reference_name, stored_scenario
from autotune.tuning.records.snapshot import StudyOrSnapshot, records
from autotune.tuning.records.trialrecord import DEFAULTS, TrialRecord

FEASIBLE, INFEASIBLE, PARTIAL = "feasible", "infeasible", "pruned (partial figures)"
HEIGHT = 520
THROUGHPUT_SHORT = {"output_throughput": "output tok/s", "request_throughput": "req/s",
                    "total_token_throughput": "total tok/s"}
THROUGHPUT_LABELS = {"output_throughput": "output throughput (tok/s)",
                     "request_throughput": "request throughput (req/s)",
                     "total_token_throughput": "total token throughput (tok/s)"}


@dataclass(frozen=True)
class Axes:
    """What the study's objective measures, for reading the figures and labelling them."""

    mode: str  # weighted | pareto
    throughput: str  # a `vllm bench serve` key, e.g. output_throughput
    latency: str  # e.g. ttft_p95
    capacity: bool = False  # throughput is measured at the capacity at SLO
    reference: str = "vLLM defaults"  # what gains are over (`study.reference_name`)

    @property
    def throughput_label(self) -> str:
        label = THROUGHPUT_LABELS.get(self.throughput, self.throughput)
        return label.replace(" (", " at SLO capacity (") if self.capacity else label

    @property
    def latency_label(self) -> str:
        metric, _, stat = self.latency.partition("_")
        return f"{metric.upper()} {stat} (ms)"


def axes(study: StudyOrSnapshot) -> Axes:
    scenario = stored_scenario(study)
    if scenario is None:
        return Axes("weighted" if len(study.directions) == 1 else "pareto",
                    "output_throughput", "ttft_p95", reference=reference_name(study))
    o = scenario.objective
    return Axes(o.mode, o.throughput, o.latency, scenario.workload.mode == "capacity",
                reference_name(study))


@dataclass
class Point:
    """One trial as the figures place it; `kind` is FEASIBLE, INFEASIBLE or PARTIAL."""

    number: int
    kind: str
    throughput: float
    latency_ms: float
    memory_mib: float | None
    name: str = ""  # the baseline's name, "" for a searched trial
    gain: float | None = None
    flags: Flags = field(default_factory=dict)
    why: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} #{self.number}" if self.name else f"#{self.number}"

    def hover(self, ax: Axes) -> str:
        lines = [f"<b>{self.label}</b> {self.kind}" + (f": {self.why}" if self.why else ""),
                 f"{ax.throughput_label}: {self.throughput:.4g}",
                 f"{ax.latency_label}: {self.latency_ms:.4g}",
                 "memory: " + ("-" if self.memory_mib is None else f"{self.memory_mib:.0f} MiB")]
        if self.gain is not None:
            lines.append(f"gain over {ax.reference}: {self.gain:+.1%}")
        lines += [f"--{k} {v}" for k, v in self.flags.items()] or ["(no flags beyond fixed)"]
        return "<br>".join(lines)


def points(study: StudyOrSnapshot) -> tuple[list[Point], list[TrialRecord]]:
    """The trials that can be placed, and the rest (pruned or failed with no figures)."""
    ax, fixed = axes(study), fixed_flags(study)
    placed, unplaced = [], []
    for r in records(study):
        flags = {k: v for k, v in r.flags.items() if fixed.get(k) != v}
        if r.state == TrialState.COMPLETE and r.measures:
            m = r.measures
            placed.append(_point(r, flags, FEASIBLE if r.feasible else INFEASIBLE,
                                 (m.throughput, m.latency_ms, m.memory_mib)))
        elif (partial := _partial(r.metrics, ax)) is not None:
            placed.append(_point(r, flags, PARTIAL, (*partial, obj.memory_mib(r.metrics))))
        else:
            unplaced.append(r)
    return placed, unplaced


def _point(r: TrialRecord, flags: Flags, kind: str,
           figures: tuple[float, float, float | None]) -> Point:
    """Trial `r` placed at (throughput, latency ms, memory MiB) `figures`."""
    throughput, latency_ms, memory_mib = figures
    return Point(number=r.number, kind=kind, throughput=throughput, latency_ms=latency_ms,
                 memory_mib=memory_mib, name=r.name, gain=r.gain, flags=flags, why=reason(r))


def _partial(metrics: Measurement, ax: Axes) -> tuple[float, float] | None:
    """Throughput and latency of a trial stopped mid-run (the probe phase), if it has them."""
    thr, lat = metrics.value(ax.throughput), metrics.value(latency_key(ax.latency))
    if not metrics.completed or thr is None or lat is None:
        return None
    return float(thr), float(lat)


def front(pts: Sequence[Point]) -> list[Point]:
    """Feasible points no other feasible point beats on both throughput and latency."""
    ok = [p for p in pts if p.kind == FEASIBLE]
    return sorted((p for p in ok if not any(
        o.throughput >= p.throughput and o.latency_ms <= p.latency_ms
        and (o.throughput, o.latency_ms) != (p.throughput, p.latency_ms) for o in ok)),
        key=lambda p: p.throughput)


def gain_of(p: Point, ref: Point | None, ax: Axes) -> float | None:
    """The weighted gain over vLLM's defaults; in Pareto studies, the throughput gain."""
    if ax.mode == "weighted":
        return p.gain
    if ref is None or not ref.throughput:
        return None
    return p.throughput / ref.throughput - 1


def baseline_point(pts: Sequence[Point]) -> Point | None:
    """vLLM's defaults as measured, else the first measured baseline (as the study does)."""
    done = [p for p in pts if p.kind != PARTIAL]
    return next((p for p in done if p.name == DEFAULTS), None) or \
        next((p for p in done if p.name), None)


def best(study: StudyOrSnapshot) -> TrialRecord | None:
    """The trial `autotune export` ships by default (its `balanced` policy), if any."""
    try:
        return choose(study, policy="balanced")
    except ConfigError:
        return None
