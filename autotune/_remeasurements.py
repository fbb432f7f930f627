"""A trial's re-measurements as the study keeps them, typed: `Validation` (paired runs by
autotune's client, `autotune validate`) and `Recheck` (the same pairs measured by
`vllm bench serve`, `validate --client vllm`).

Both are kept as JSON objects with the study (`records.studyrecord.store_validation`) and read back
through `Stored.from_dict`, so a study written by an older autotune still reads and a
copy writes back what was stored. Readers (the terminal, the report, exports) use their
attributes and the words they give (`line`, `headline`): one stored type per client.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeVar

from autotune._device import DeviceSeen
from autotune._flags import Flags
from autotune.stored import Stored

VLLM_CLIENT = "vllm bench serve"
R = TypeVar("R", "Validation", "Recheck")


def verdict(low: float | None, high: float | None, no_change: float = 0.0) -> str:
    """'gain', 'loss' or 'within noise' from a 95 % interval ('no CI' without one): a gain or
    a loss only when the whole interval lies on one side of `no_change` (0 for a relative
    gain, 1 for a ratio)."""
    if low is None or high is None:
        return "no CI"
    if low > no_change:
        return "gain"
    if high < no_change:
        return "loss"
    return "within noise"


@dataclass(frozen=True)
class Ratio(Stored):
    """One metric's candidate/baseline ratio over the pairs (a geometric mean) with its 95 %
    interval; for the weighted score, `mean` is the mean log-ratio instead."""

    key: str = ""
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    better: str = "higher"
    mean: float | None = None
    baseline_mean: float | None = None
    candidate_mean: float | None = None


@dataclass(frozen=True)
class PairRun(Stored):
    """One fresh engine of a pair and what it measured: throughput, latency and memory by
    autotune's client; capacity and its bracket (or a fixed workload's `figure`) by
    `vllm bench serve`."""

    trial: int = 0
    role: str = ""
    pair: int = 0
    throughput: float | None = None
    latency_ms: float | None = None
    memory_mib: float | None = None
    startup_s: float | None = None
    capacity: float | None = None
    low: float | None = None
    high: float | None = None
    bracket: float | None = None
    steps: list[Any] = field(default_factory=list)
    metric: str | None = None
    figure: float | None = None
    output_throughput: float | None = None
    gpu: int | None = None
    # What else a run keeps: its flags, timings, where its files are, and the figures of
    # its client beyond the headline ones.
    failed: int | None = None
    completed: int | None = None
    uncertainty: float | None = None
    saturated: bool | None = None
    stopped: str | None = None
    max_request_throughput: float | None = None
    median_tpot_ms: float | None = None
    median_ttft_ms: float | None = None
    flags: Flags = field(default_factory=dict)
    measure_s: float | None = None
    log_path: str | None = None
    dir: str | None = None


@dataclass(frozen=True)
class Validation(Stored):
    """Paired, alternating runs of a candidate and its baseline by autotune's client: the
    headline `gain` (relative; higher is better) with its interval, and each metric's
    ratio."""

    NESTED = {"runs": PairRun, "device": DeviceSeen}
    KEYED = {"per_metric": Ratio}

    candidate: int = 0
    against: int = 0
    repeats: int = 0
    gain: float = 0.0
    ci_low: float | None = None
    ci_high: float | None = None
    metric: str = ""
    per_metric: dict[str, Ratio] = field(default_factory=dict)
    verdict: str | None = None
    runs: tuple[PairRun, ...] = ()
    engine_version: str | None = None
    device: DeviceSeen = field(default_factory=DeviceSeen)
    order: str | None = None
    dir: str | None = None
    when: str | None = None

    def word(self) -> str:
        return verdict(self.ci_low, self.ci_high)

    def line(self) -> str:
        """`+6.2 % (95 % CI -3.1 % .. +16.4 %, within noise) vs #0, 3 paired runs`."""
        ci = f"95% CI {self.ci_low:+.1%} .. {self.ci_high:+.1%}, {self.word()}" \
            if self.ci_low is not None and self.ci_high is not None else "no CI with 1 pair"
        return (f"{self.gain:+.1%} {self.metric} ({ci}) vs #{self.against}, {self.repeats} "
                "paired runs")

    def headline(self) -> Validation:
        """Without the per-run figures, for tables and exports."""
        return _without_runs(self)


@dataclass(frozen=True)
class Recheck(Stored):
    """The pairs measured by `vllm bench serve`: candidate/baseline of each run's capacity
    at SLO (or, in a fixed-workload study, of `metric`), its interval (never narrower than
    the runs' brackets allow), and the study's own ratio beside it."""

    NESTED = {"runs": PairRun, "device": DeviceSeen}
    NO_CHANGE: ClassVar[float] = 1.0

    client: str = VLLM_CLIENT
    candidate: int = 0
    against: int = 0
    repeats: int = 0
    step_s: float = 0.0
    metric: str | None = None  # a fixed-workload re-check's figure; None: capacity
    min_prompts: int | None = None
    workload_note: str | None = None
    baseline_mean: float | None = None
    candidate_mean: float | None = None
    pairs: int | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    better: str = "higher"
    bracket_low: float | None = None
    bracket_high: float | None = None
    study_ratio: float | None = None
    verdict: str | None = None
    runs: tuple[PairRun, ...] = ()
    engine_version: str | None = None
    client_vllm: str | None = None
    device: DeviceSeen = field(default_factory=DeviceSeen)
    helper_start_s: float | None = None
    order: str | None = None
    dir: str | None = None
    when: str | None = None

    def word(self) -> str:
        """Plain words: a gain only when the whole 95 % interval lies on the better side of
        1 (above it for a capacity, below it for a latency)."""
        if self.ratio is None:
            return "no ratio: a run met the SLOs at no rate" if self.metric is None \
                else "no ratio: a run measured nothing"
        word = verdict(self.ci_low, self.ci_high, self.NO_CHANGE)
        if self.better == "lower":
            word = {"gain": "loss", "loss": "gain"}.get(word, word)
        return {"no CI": "one pair, no interval: no gain shown",
                "within noise": "within noise (the interval includes 1): no gain shown"
                }.get(word, word)

    def line(self) -> str:
        """`autotune's steps: 1.24x; vllm bench serve: 1.02x (0.97-1.08), within noise ...`;
        a fixed-workload re-check names its metric (`median_tpot_ms 0.62x ...`)."""
        ours = self.study_ratio
        theirs = "-" if self.ratio is None else f"{self.ratio:.3g}x"
        if self.ci_low is not None and self.ci_high is not None:
            theirs += f" ({self.ci_low:.3g}-{self.ci_high:.3g})"
        what = f"{self.metric} " if self.metric else ""
        how = "runs of the study's workload" if self.metric else f"{self.step_s:g}-s steps"
        mine = "autotune's client" if self.metric else "autotune's steps"
        return (f"{what}{mine}: {'-' if ours is None else f'{ours:.3g}x'}; {self.client}: "
                f"{theirs}, {self.verdict or self.word()} (vs #{self.against}, "
                f"{self.repeats} pair(s) of {how})")

    def headline(self) -> Recheck:
        """Without the per-run figures, for tables and exports."""
        return _without_runs(self)


def _without_runs(v: R) -> R:
    """`v` without its per-run figures, writing back the other keys it was read with."""
    return replace(v, runs=(), read=None if v.read is None else
                   tuple(k for k in v.read if k != "runs"))
