"""Throughput per GPU against interactivity (tokens/s a user sees, 1000 / TPOT) across the
load of the capacity search's steps, for the decision and vLLM's defaults: the picture the
field compares serving configurations by, read from steps already measured.

The definitions are the field's, matched to their code:

- InferenceX (`SemiAnalysisAI/InferenceX`, `utils/process_result.py`) reads one `vllm bench
  serve` result: `tput_per_gpu` = `total_token_throughput` / GPUs, `output_tput_per_gpu` =
  `output_throughput` / GPUs, and for every TPOT statistic `<stat>_intvty` = 1000 /
  `<stat>_tpot_ms` (`median_intvty` from the median TPOT, `p99_intvty` from the p99); its
  chart (`InferenceX-app`, `metric-registry.ts`, `CHART_AXIS_CONFIG.interactivity`) puts
  `median_intvty` ("Interactivity (tok/s/user)") against `tput_per_gpu`.
- vLLM's `bench sweep plot_pareto` (`vllm/benchmarks/sweep/plot_pareto.py`,
  `_prepare_records`): `tokens_per_gpu` = `output_throughput` / GPUs, GPUs being tensor x
  pipeline x data parallel size (`_infer_gpu_count`), as `replica.gpu_count` counts them; its
  `tokens_per_user` is `output_throughput` / the run's concurrency (`max_concurrency`, else
  `request_rate`), which a rate-driven step has no fixed value of, so the per-user axis here
  is InferenceX's.

A point is one step of a trial's capacity search (`StepRecord`): its throughputs are the
whole step's, as `vllm bench serve` counts a run (tokens of completed requests over the
step's duration, its drain included); its TPOT statistics are those of its judged (steady)
window. Steps recorded before the per-step latencies keep only the SLO's TPOT figure, and
before `total_token_throughput` no total: a total is then derived only where every request of
the workload has the same lengths, else left out, and each curve says what it lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from autotune.measure.capacityrecord import StepRecord
from autotune.results import _decision as decision
from autotune.results import cost
from autotune.results._replica import gpu_count, on_cpu
from autotune.tuning import ranking
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records
from autotune.tuning.records.trialrecord import TrialRecord

# The words the report and the notebook print beside the chart.
DEFINITIONS = (
    "Interactivity is what one user sees: 1000 / TPOT in ms, the output tokens per second "
    "after the first (InferenceX's median_intvty; here also at p95 TPOT, the slowest 5 % of "
    "users).",
    "Throughput per GPU is the step's output tokens (or input and output tokens: total) per "
    "second over the GPUs one server holds, tensor x pipeline x data parallel size "
    "(InferenceX's output_tput_per_gpu and tput_per_gpu; vLLM's plot_pareto tokens_per_gpu "
    "is the output one).",
    "Each point is a sustained step of the capacity search, in order of load: throughput over "
    "the whole step as vllm bench serve counts a run, TPOT over its judged steady window. "
    "Filled markers met the SLOs, hollow ones did not. The burst (every request at once, no "
    "steady state) is not drawn; show --json keeps it. On vLLM's CPU build it is per engine.",
)
# A step's TPOT statistics by the key its `latencies` (and `figures`) keep them under.
MEDIAN, P95 = "tpot_median_ms", "tpot_p95_ms"
DECISION, REFERENCE = "decision", "reference"


def per_user(tpot_ms: float | None) -> float | None:
    """Interactivity: output tokens/s one user sees after the first, 1000 / TPOT in ms."""
    return 1000.0 / tpot_ms if tpot_ms else None


@dataclass(frozen=True)
class LoadPoint:
    """One capacity step placed on the chart: its load, verdict, TPOT statistics and
    throughputs per GPU; `total_from` says where the total came from (`step`: stored with
    it; `workload`: its output times the fixed tokens per request; None: not known)."""

    EXTRA: ClassVar[tuple[str, ...]] = ("interactivity_median", "interactivity_p95")

    step: int
    kind: str
    rate: float | None  # offered requests/s; None for the burst
    load: float  # the rate, or what the burst achieved
    passed: bool
    tpot_median_ms: float | None
    tpot_p95_ms: float | None
    output_per_gpu: float
    total_per_gpu: float | None
    total_from: str | None

    @property
    def interactivity_median(self) -> float | None:
        return per_user(self.tpot_median_ms)

    @property
    def interactivity_p95(self) -> float | None:
        return per_user(self.tpot_p95_ms)


@dataclass(frozen=True)
class Curve:
    """One trial's steps: `role` is `decision`, `reference` (vLLM's defaults or their
    stand-in) or both (`decision = reference`); `missing` says what of the chart its
    record cannot give, and why."""

    EXTRA: ClassVar[tuple[str, ...]] = ("label",)

    trial: int
    role: str
    name: str  # `#6`, `vLLM defaults #0`
    gpus: int
    points: tuple[LoadPoint, ...]
    missing: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The name with the role a reader needs: `#6: the decision`."""
        return self.name + (": the decision" if self.role != REFERENCE else "")


@dataclass(frozen=True)
class Interactivity:
    """The chart's data: per GPU, or per engine on vLLM's CPU build (`per`), one curve for
    the decision and one for vLLM's defaults; `note` says why one is absent."""

    per: str
    curves: tuple[Curve, ...]
    note: str | None = None

    def lines(self) -> list[str]:
        """What the chart lacks, in words: each distinct gap once, with the curves it
        concerns, then why a curve is absent."""
        said: dict[str, list[str]] = {}
        for c in self.curves:
            for gap in c.missing:
                said.setdefault(gap, []).append(c.name)
        return [f"{gap} ({', '.join(labels)})" for gap, labels in said.items()] + \
            ([self.note] if self.note else [])

    @classmethod
    def of(cls, trials: Sequence[TrialRecord], decision: int | None, reference: int | None
           ) -> Interactivity:
        """The decision's trial (`decision.Decision.trial`) and the reference trial
        (`ranking.reference_trial`) as curves, the decision first."""
        found = {r.number: r for r in trials}
        roles = [(n, role) for n, role in ((decision, DECISION), (reference, REFERENCE))
                 if n is not None and n in found]
        if len(roles) == 2 and roles[0][0] == roles[1][0]:
            roles = [(roles[0][0], f"{DECISION} = {REFERENCE}")]
        curves = tuple(curve(found[n], role) for n, role in roles)
        cpu = any(on_cpu(found[n]) for n, _ in roles)
        notes = [] if decision is not None else ["no decision (no feasible trial, or a "
                                                 "Pareto study): vLLM's defaults alone"]
        if reference is None:
            notes.append("no reference trial: vLLM's defaults did not complete")
        return cls("engine (CPU)" if cpu else "GPU", curves, "; ".join(notes) or None)


def curve(r: TrialRecord, role: str) -> Curve:
    """`r`'s capacity steps as points, with what its record lacks in words."""
    stands = "vLLM defaults" if r.is_defaults else f"{r.baseline or 'trial'} (for vLLM defaults)"
    name = f"#{r.number}" if role == DECISION else f"{stands} #{r.number}"
    gpus = 1 if on_cpu(r) else gpu_count(r.flags)
    steps = r.capacity.steps if r.capacity is not None else ()
    if not steps:
        return Curve(r.number, role, name, gpus, (), (
            "no capacity search: a fixed workload measures one load a trial",))
    ratio = tokens_ratio(r)
    points = tuple(p for s in steps if (p := point(s, gpus, ratio)) is not None)
    missing = []
    if len(points) < len(steps):
        missing.append(f"{len(steps) - len(points)} step(s) keep no TPOT figure")
    if points and all(p.tpot_median_ms is None for p in points):
        missing.append("median TPOT not stored: its steps predate the per-step latencies "
                       "(p95 only, the SLO's figure)")
    if any(p.total_per_gpu is None for p in points):
        missing.append("total tokens not stored per step, and its workload's requests vary "
                       "in length: total left out")
    elif any(p.total_from == "workload" for p in points):
        missing.append("total tokens derived: the step's output tokens x (input + output) / "
                       "output tokens per request, the same for every request of its workload")
    return Curve(r.number, role, name, gpus, points, tuple(missing))


def tokens_ratio(r: TrialRecord) -> float | None:
    """(input + output) / output tokens per request, where every request of the trial's
    workload has the same lengths (random prompts, `range_ratio` 0, `ignore_eos`): the
    factor from a step's output to its total tokens. None otherwise."""
    m = r.metrics
    if m.workload is None or not m.workload.same_lengths or not m.total_output_tokens:
        return None
    return (m.total_input_tokens + m.total_output_tokens) / m.total_output_tokens


def point(s: StepRecord, gpus: int, ratio: float | None) -> LoadPoint | None:
    """Step `s` per GPU; None where it keeps no TPOT figure to place it by."""
    median = s.latencies.get(MEDIAN)
    p95 = s.latencies.get(P95, s.figures.get(P95))
    if median is None and p95 is None:
        return None
    if s.total_token_throughput is not None:
        total, source = s.total_token_throughput / gpus, "step"
    elif ratio is not None:
        total, source = s.output_throughput * ratio / gpus, "workload"
    else:
        total, source = None, None
    return LoadPoint(s.index, s.kind, s.rate, s.load, s.passed, median, p95,
                 s.output_throughput / gpus, total, source)


def of_study(study: StudyOrSnapshot) -> Interactivity:
    """The chart's data for a study: the trial its decision names (`decision.decide`; none
    in a Pareto study) and its reference trial (`ranking.reference_trial`)."""
    snap = Snapshot.of(study)
    found = decision.decide(snap, cost.Price(), None) if len(snap.directions) == 1 else None
    reference = ranking.reference_trial(snap)
    return Interactivity.of(records(snap), found.trial if found else None,
                            reference.number if reference else None)


def hover(c: Curve, p: LoadPoint, per: str) -> str:
    """A point's figures in words, for the chart's hover text."""
    rate = f"{p.rate:.3g} req/s" if p.rate is not None else f"burst ({p.load:.3g} req/s)"
    tpot = ", ".join(f"{stat} TPOT {ms:.1f} ms: {1000 / ms:.1f} tok/s/user"
                     for stat, ms in (("median", p.tpot_median_ms), ("p95", p.tpot_p95_ms))
                     if ms)
    total = "-" if p.total_per_gpu is None else f"{p.total_per_gpu:,.0f}" + (
        " (derived)" if p.total_from == "workload" else "")
    return (f"<b>{c.label}</b><br>step {p.step} ({p.kind}) at {rate}: "
            f"{'met the SLOs' if p.passed else 'missed the SLOs'}<br>{tpot}<br>"
            f"output {p.output_per_gpu:,.0f} tok/s, total {total} tok/s per {per}")
