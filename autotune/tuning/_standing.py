"""The one rule that ranks a study's feasible trials, and so names its winner.

Where the study measures capacity at SLO, capacity decides: the leader is the highest
capacity; trials whose uncertainty intervals overlap the leader's cannot be told apart from
it (`capacityrecord.tied`), and among those ties the configuration with the fewest
overrides of vLLM's effective defaults wins, then the higher capacity: a user should not
deploy five extra flags for a gain inside the noise. `explain`'s smallest configuration
tied with one of those trials is a tie too. A capacity still too uncertain to rank by
(`CapacityRecord.too_uncertain`, after the steps its search spent measuring it again)
neither ties with nor blocks the others: it stands above only the trials whose intervals
its own clears, and below the rest. A study of a fixed workload has no capacity and ranks
by its weighted score (one run each, no interval, so no ties).

The whole ranking is the rule applied again to the trials left, so the first row of
`show`'s capacity table is the decision, and `export`, `validate`, `explain`, the report
and the loop's best all read `Standing.winner`. Pure: records in, a `Standing` out;
`ranking.standing` reads a study into it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.engine.defaults import same
from autotune.measure import capacityrecord
from autotune.measure.capacityrecord import CapacityRecord
from autotune.tuning.records.trialrecord import TrialRecord

CAPACITY = "capacity"  # ranked by capacity at SLO (`workload.mode: capacity`)
SCORE = "score"  # ranked by the weighted score (a fixed workload)
PARETO = "pareto"  # several objectives: a Pareto set, no single winner

Score = Callable[[TrialRecord], float]


def overrides(rec: TrialRecord, defaults: Mapping[str, Any]) -> int:
    """How many flags the trial sets to other than `defaults` (vLLM's effective defaults
    and the scenario's fixed flags): 0 for vLLM's defaults."""
    return sum(1 for k, v in rec.flags.items() if k not in defaults or not same(defaults[k], v))


def first_value(rec: TrialRecord) -> float:
    """A trial's first objective value (the weighted score); -inf without one."""
    return rec.values[0] if rec.values else -math.inf


def _cap(rec: TrialRecord) -> CapacityRecord | None:
    """The trial's capacity, where its search found one."""
    cap = rec.capacity
    return cap if cap is not None and cap.low else None


def _clears(a: CapacityRecord, b: CapacityRecord) -> bool:
    """`a`'s interval lies wholly above `b`'s (a floor's, open above, is never cleared)."""
    high = capacityrecord.bounds(b)[1]
    return high is not None and capacityrecord.bounds(a)[0] > high


@dataclass(frozen=True)
class Standing:
    """Where the candidates stand: `order`, the ranking, winner first; `by`, what ranked
    them (`CAPACITY`, `SCORE`, `PARETO`: a Pareto study's capacities ranked for its table,
    with no winner); `leader`, the highest capacity the winner was chosen against;
    `tied`, the other trials the rule could not separate from the leader; `found_by`,
    the trial whose `explain` found the winner as its smallest tied configuration."""

    by: str
    order: tuple[TrialRecord, ...] = ()
    leader: TrialRecord | None = None
    tied: tuple[TrialRecord, ...] = ()
    found_by: int | None = None

    @property
    def winner(self) -> TrialRecord | None:
        """The trial to launch; None without candidates, and in a Pareto study."""
        return self.order[0] if self.order and self.by != PARETO else None

    @property
    def tied_numbers(self) -> frozenset[int]:
        return frozenset(r.number for r in self.tied)

    @property
    def apart(self) -> tuple[TrialRecord, ...]:
        """Trials the winner cannot be told apart from because a capacity, theirs or its
        own, is still too uncertain to rank by: their intervals overlap, so the order
        between them rests on the rule for uncertain capacities, not on a difference
        the study measured."""
        w = self.order[0] if self.order else None
        won = _cap(w) if w is not None else None
        if won is None or self.by == SCORE:
            return ()
        return tuple(r for r in self.order[1:] if (cap := _cap(r)) is not None
                     and (cap.too_uncertain or won.too_uncertain)
                     and capacityrecord.tied(cap, won))


def rank(candidates: Sequence[TrialRecord], defaults: Mapping[str, Any], by: str, *,
         score: Score = first_value, explained: Mapping[int, int] | None = None) -> Standing:
    """The candidates ranked by the rule (the module's docstring). `defaults` are the
    values that are no override; `score` ranks a `SCORE` study (and, after those with a
    capacity, a capacity study's trials without one); `explained` maps a trial `explain`
    ran on to the smallest configuration it found tied with it."""
    if by == SCORE:
        scored = sorted(candidates, key=lambda r: (-score(r), overrides(r, defaults), r.number))
        return Standing(by, tuple(scored), scored[0] if scored else None)
    left = [r for r in candidates if _cap(r) is not None]
    order: list[TrialRecord] = []
    leader: TrialRecord | None = None
    tied: list[TrialRecord] = []
    found_by = None
    while left:
        top, group = _group(left, explained or {})
        chosen = min(group, key=lambda r: (overrides(r, defaults), -_capacity(r), r.number))
        if not order:
            leader, tied = top, [r for r in group if r is not chosen]
            found_by = next((n for n, small in (explained or {}).items()
                             if small == chosen.number and n != chosen.number
                             and any(r.number == n for r in group)), None)
        order.append(chosen)
        left = [r for r in left if r is not chosen]
    rest = sorted((r for r in candidates if _cap(r) is None),
                  key=lambda r: (-score(r), overrides(r, defaults), r.number))
    return Standing(by, tuple(order + rest), leader, tuple(tied), found_by)


def _capacity(rec: TrialRecord) -> float:
    cap = _cap(rec)
    return cap.request_throughput if cap is not None else 0.0


def _group(left: Sequence[TrialRecord], explained: Mapping[int, int]
           ) -> tuple[TrialRecord, list[TrialRecord]]:
    """The leader of `left` (trials with a capacity) and the trials it cannot be told apart
    from, itself included: among the capacities sure enough to rank by and those that clear
    every one of them, the highest, and those whose intervals overlap it; then `explain`'s
    smallest tied configuration of any of them."""
    caps = {r.number: cap for r in left if (cap := _cap(r)) is not None}
    sure = [cap for cap in caps.values() if not cap.too_uncertain]
    pool = [r for r in left if not caps[r.number].too_uncertain
            or all(_clears(caps[r.number], s) for s in sure)]
    top = max(pool, key=lambda r: (caps[r.number].request_throughput, -r.number))
    group = [r for r in pool if capacityrecord.tied(caps[r.number], caps[top.number])]
    inside = {r.number for r in group}
    small = {explained[n] for n in inside if n in explained}
    group += [r for r in left if r.number in small and r.number not in inside]
    return top, group
