"""The decision a study gives, in the words a user acts on: which configuration to launch
(the winner by the study's one ranking rule, `ranking.standing`, as `export` picks it; a
fixed workload's line says it was ranked by the weighted score), the trials it cannot be
told apart from where a capacity is too uncertain to rank by, its real overrides of vLLM's
effective defaults, its capacity at the SLO as a ratio to vLLM's defaults with an interval,
its quality verdict, and with a price or a load its cost and replicas. The weighted score
comes last, as "score": it mixes throughput, latency and memory, so it is never the headline.

A study with no feasible trial gives `NoAnswer`: the reason its trials share and what to
change. `show`, the end of `tune`, the report's header and `--json` all read one `Decision`
(or `NoAnswer`), so they cannot disagree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from optuna.trial import TrialState

from autotune import _reasons as reasons
from autotune._flags import Flags, to_args
from autotune.config import Scenario
from autotune.measure import capacityrecord, capacitytext
from autotune.measure.capacityrecord import CapacityRatio
from autotune.results import cost
from autotune.results.show import capacity_caveat, slo_text
from autotune.tuning import ranking as ranked
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records
from autotune.tuning.records.trialrecord import TrialRecord


def capacity_ratio(best: TrialRecord, reference: TrialRecord | None) -> CapacityRatio | None:
    """`best`'s capacity over `reference`'s (`capacityrecord.ratio`), None where either has none
    or they are the same trial."""
    if reference is None or reference.number == best.number or best.capacity is None \
            or reference.capacity is None:
        return None
    return capacityrecord.ratio(best.capacity, reference.capacity)


# How a fixed workload's decision says what ranked it: its trials measured no capacity.
SCORED = "ranked by the weighted score (a fixed workload measures no capacity at SLO)"


@dataclass(frozen=True)
class Decision:
    """What to launch and what it is worth; `lines` is how every view words it."""

    trial: int
    tried: str
    overrides: Flags  # what it changes from vLLM's effective defaults ({}: the defaults)
    left_out: str  # flags it sets to what vLLM uses anyway, in words ("" if none)
    winner: int | None  # the trial whose `explain` found this one as its smallest tie
    slos: str
    capacity: str | None  # `capacitytext.describe`: the one capacity text of every view
    capacity_rps: float | None
    ratio: CapacityRatio | None
    throughput_ratio: float | None  # a fixed workload's throughput against the reference's
    reference: str
    quality: str
    caveat: str | None
    cost: str | None
    score: float | None
    score_gain: float | None
    is_reference: bool = False  # the decision is the trial every gain is relative to
    by: str = ranked.CAPACITY  # what ranked it (`ranking.basis`): capacity or the score
    apart: str | None = None  # the trials it cannot be told apart from, in words

    @property
    def command_flags(self) -> str:
        """`--max-num-seqs 16 --block-size 32`, or `vLLM's defaults`."""
        return " ".join(to_args(self.overrides)) or "vLLM's defaults (no flag changes)"

    def lines(self) -> list[str]:
        """The decision in a few lines: what to launch, the capacity ratio, quality, cost,
        then the score."""
        head = f"decision: trial #{self.trial} ({self.tried}): {self.command_flags}"
        if not self.overrides:
            head = (f"decision: keep vLLM's defaults (trial #{self.trial}, {self.tried}): no "
                    + ("configuration tried beat them beyond the noise" if self.by != ranked.SCORE
                       else "configuration tried scored higher"))
        if self.winner is not None:
            head += f" (the smallest configuration tied with the best, #{self.winner})"
        if self.by == ranked.SCORE:
            head += f"; {SCORED}"
        out = [head]
        if self.capacity is not None:
            text = f"  capacity at SLO ({self.slos}): {self.capacity}"
            if self.ratio is not None:
                text += f"; {self.ratio.text(self.reference)}"
            elif self.is_reference:
                text += f"; 1.00x {self.reference}: it is their own"
            out.append(text)
            if self.apart:
                out.append(f"  {self.apart}")
            if self.caveat:
                out.append(f"  not a figure to quote: {self.caveat}")
        elif self.throughput_ratio is not None:
            out.append(f"  throughput {self.throughput_ratio:.2f}x {self.reference} (one run "
                       "each, no interval: `autotune validate` measures one)")
        out.append(f"  quality: {self.quality}")
        if self.cost:
            out.append(f"  {self.cost}")
        if self.left_out:
            out.append(f"  set but left out as vLLM's defaults on this machine: {self.left_out}")
        if self.score is not None:
            out.append(f"  score {self.score:+.4f} (the weighted objective" + (
                f"; {self.score_gain:+.1%} as a weighted geometric-mean gain)"
                if self.score_gain is not None else ")"))
        return out


@dataclass(frozen=True)
class NoAnswer:
    """A study with no feasible trial: how many trials, the reason most of them share, one
    trial's detail for it, and what to change."""

    trials: int
    reason: str
    count: int
    detail: str | None
    fix: str

    def line(self) -> str:
        """`no answer: 3 of 3 trials ended as guardrail_error (...): DETAIL; fix: ...`."""
        if self.trials == 0:
            return "no answer yet: no trial has finished"
        said = f"no answer: {self.count} of {self.trials} trials ended as {self.reason}"
        meaning = reasons.meaning(self.reason)
        if meaning:
            said += f" ({meaning})"
        if self.detail:
            said += f": {' '.join(self.detail.split())[:300]}"
        return f"{said}; fix: {self.fix}"


# What to change when every trial ends one way; reasons not listed get the generic hint.
FIXES = {
    reasons.GUARDRAIL_ERROR: "read the trial's detail in `autotune show STUDY --trial N`; "
                             "`guardrail: {enabled: false}` tunes without the quality check",
    reasons.OOM: "lower gpu-memory-utilization, max-num-seqs or max-model-len in the space",
    reasons.KV_TOO_SMALL: "lower max-model-len or raise gpu-memory-utilization",
    reasons.INVALID_FLAG: "the engine refused a flag: its log is in the trial's folder",
    reasons.FAILED_TO_START: "the detail quotes the engine log's last error; "
                             "`autotune show STUDY --trial N` and the trial's engine log say more",
    reasons.TIMEOUT: "raise engine.startup_timeout_s or budget.trial_timeout",
    reasons.UNREACHABLE: "loosen the SLO: even a nearly idle engine misses it "
                         "(`autotune show STUDY --slo KEY=MS` re-ranks without a GPU)",
    reasons.NO_PASSING_RATE: "loosen the SLO, or give the search more steps "
                             "(`capacity.max_steps`); `autotune show STUDY --trial N` gives "
                             "each step's reason",
    reasons.MAX_MODEL_LEN_TOO_SHORT: "raise max-model-len to the workload's longest request",
    reasons.PREEMPTION: "a smaller max-num-seqs or a larger KV cache",
    "SLO missed": "loosen the SLO, or make the workload lighter "
                  "(`autotune show STUDY --slo KEY=MS` re-ranks without a GPU)",
    "quality": "the guardrail rejected every configuration: see `show`'s quality lines",
}
GENERIC_FIX = "read `autotune show STUDY --trial N` and the trial's engine log"


def no_answer(trials: list[TrialRecord]) -> NoAnswer:
    """Why a study has no feasible trial, from the reasons its finished trials carry."""
    done = [r for r in trials if r.state in (TrialState.COMPLETE, TrialState.PRUNED)
            and r.duplicate_of is None]
    if not done:
        return NoAnswer(0, "", 0, None, GENERIC_FIX)

    def why(r: TrialRecord) -> str:
        if r.state == TrialState.PRUNED:
            return r.reason or "pruned"
        q = r.quality
        return "quality" if q is not None and q.passed is False else "SLO missed"

    counts = Counter(why(r) for r in done)
    top, n = counts.most_common(1)[0]
    detail = next((r.detail for r in done if why(r) == top and r.detail), None)
    return NoAnswer(len(done), top, n, detail, FIXES.get(top, GENERIC_FIX))


def decide(snap: Snapshot, price: cost.Price, load: float | None) -> Decision | None:
    """The decision of a one-objective study: the winner by the study's one rule
    (`ranking.standing`, `export`'s default choice), None without a feasible trial."""
    found = ranked.standing(snap)
    rec = found.winner
    if rec is None:
        return None
    effective = ranked.effective_defaults(snap)
    fixed = ranked.fixed_flags(snap)
    own = {k: v for k, v in rec.flags.items() if k not in fixed}
    reference = ranked.reference_trial(snap)
    scenario = ranked.stored_scenario(snap)
    slos = scenario.objective.slos if scenario is not None else {}
    throughput_ratio = None
    if rec.capacity is None and rec.measures and reference is not None and reference.measures \
            and reference.measures.throughput:
        throughput_ratio = rec.measures.throughput / reference.measures.throughput
    return Decision(
        trial=rec.number, tried=rec.tried_because.short, overrides=effective.overrides(own),
        left_out=effective.words(own), winner=found.found_by,
        slos=slo_text(slos), capacity=capacitytext.describe(rec.capacity) if rec.capacity else None,
        capacity_rps=rec.capacity.request_throughput if rec.capacity else None,
        ratio=capacity_ratio(rec, reference),
        throughput_ratio=throughput_ratio, reference=ranked.reference_name(snap),
        quality=_quality(rec, scenario), caveat=capacity_caveat(rec.capacity),
        cost=_cost(rec, reference, ranked.reference_name(snap), price, load),
        score=rec.values[0] if rec.values else None,
        score_gain=rec.gain,
        is_reference=reference is not None and reference.number == rec.number,
        by=found.by, apart=apart_text(rec, found.apart))


def apart_text(winner: TrialRecord, apart: Sequence[TrialRecord]) -> str | None:
    """`cannot be told apart from #0 (baseline vllm-defaults): its capacity is too
    uncertain to rank by (±31.0 %)`, where the winner's interval overlaps others' and a
    capacity, theirs or its own, is still too uncertain to rank by; None otherwise."""
    if not apart:
        return None
    unsure = [r for r in (winner, *apart) if r.capacity is not None and r.capacity.too_uncertain]
    whose = "; ".join(
        ("this capacity" if r is winner else f"#{r.number}'s")
        + f" ±{r.capacity.uncertainty or 0.0:.1%}" for r in unsure if r.capacity is not None)
    return ("cannot be told apart from "
            + ", ".join(f"#{r.number} ({r.tried_because.short})" for r in apart)
            + f": their intervals overlap, and a capacity is still too uncertain to rank by "
            f"({whose}; wider than ±{capacityrecord.TOO_UNCERTAIN:.0%} after "
            "the steps spent measuring it again)")


def _quality(rec: TrialRecord, scenario: Scenario | None) -> str:
    if rec.quality is not None and rec.quality.words():
        return rec.quality.words()
    if scenario is not None and not scenario.guardrail.enabled:
        return "not checked (the scenario turns the guardrail off)"
    return "not checked"


def _cost(rec: TrialRecord, reference: TrialRecord | None, reference_name: str,
          price: cost.Price, load: float | None) -> str | None:
    """`cost: 0.109 USD per million output tokens; 3 replica(s) of 1 GPU for 20 req/s (vLLM
    defaults: 4)`, where a price or a load is known."""
    if not price.known and load is None:
        return None
    mine = cost.trial_cost(rec, price, load)
    if mine.capacity_rps is None:
        return f"cost: {mine.missing}"
    parts = []
    if mine.per_million is not None:
        parts.append(f"{cost.money(mine.per_million, mine.currency)} per million output "
                     "tokens")
    if mine.replicas is not None:
        theirs = cost.trial_cost(reference, price, load) if reference is not None else None
        parts.append(f"{mine.replicas} replica(s) of {mine.holds} for {load:g} req/s"
                     + (f" ({reference_name}: {theirs.replicas})"
                        if theirs is not None and theirs.replicas is not None
                        and reference is not None and reference.number != rec.number
                        else ""))
    return "cost: " + ("; ".join(parts) or mine.missing)


def of_study(study: StudyOrSnapshot, price: cost.Price, load: float | None
             ) -> tuple[Decision | None, NoAnswer | None]:
    """The decision of a one-objective study, or why it has none."""
    snap = Snapshot.of(study)
    found = decide(snap, price, load)
    return (found, None) if found is not None else (None, no_answer(records(snap)))
