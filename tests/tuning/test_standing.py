"""The one ranking rule (`autotune.tuning._standing`) on hand-made trial records: capacity
decides, ties only where intervals overlap, then the fewest overrides; a capacity too
uncertain to rank by neither ties nor blocks; a fixed workload ranks by its score."""

from __future__ import annotations

from optuna.trial import TrialState

from autotune.measure.measurement import Measurement
from autotune.tuning import _standing as standing
from autotune.tuning import ranking
from autotune.tuning._standing import CAPACITY, PARETO, SCORE, rank
from autotune.tuning.records.trialrecord import TrialRecord

FIXED = {"enforce-eager": True}


def _trial(number: int, value: float, cap: tuple[float, float | None] | None,
           flags: dict, uncertainty: float | None = None) -> TrialRecord:
    metrics = {}
    if cap is not None:
        lo, hi = cap
        width = (hi - lo) / hi if hi else 0.0
        metrics = {"capacity": {"request_throughput": lo, "low": lo, "high": hi,
                                "spread": None, "uncertainty": uncertainty or width}}
    return TrialRecord(number=number, state=TrialState.COMPLETE, values=(value,),
                       constraints={"slo": -1.0}, flags={**FIXED, **flags},
                       metrics=Measurement.of(metrics))


def _order(found: standing.Standing) -> list[int]:
    return [r.number for r in found.order]


def test_ties_prefer_fewer_overrides_of_the_defaults():
    defaults = _trial(0, 0.0, (10.0, 10.4), {})
    tuned = _trial(1, 0.02, (10.2, 10.6), {"max-num-seqs": 8, "block-size": 32})
    clear = _trial(2, 0.30, (13.0, 13.5), {"max-num-seqs": 64})
    assert ranking.overrides(tuned, FIXED) == 2 and ranking.overrides(defaults, FIXED) == 0
    # 10.2-10.6 overlaps 10.0-10.4: a tie, which the configuration with no overrides wins
    found = rank([defaults, tuned], FIXED, CAPACITY)
    assert found.winner is defaults and found.leader is tuned
    assert found.tied_numbers == {1} and found.apart == ()
    # a capacity clear of the noise wins despite its override
    assert rank([defaults, tuned, clear], FIXED, CAPACITY).winner is clear
    assert rank([], FIXED, CAPACITY).winner is None


def test_capacity_decides_not_the_score():
    """The held-back case's shape: the faster trial's weighted score is worse (its TTFT at
    its own, higher, capacity is longer), and the intervals do not overlap."""
    defaults = _trial(0, 0.0, (8.87, 11.8), {})
    faster = _trial(1, -0.122, (14.8, 18.5), {"max-num-seqs": 8, "block-size": 32})
    found = rank([defaults, faster], FIXED, CAPACITY)
    assert _order(found) == [1, 0] and found.tied == () and found.apart == ()
    # ranked by the score, the defaults would win: that is the fixed workload's rule only
    assert rank([defaults, faster], FIXED, SCORE).winner is defaults


def test_the_ranking_is_the_rule_applied_again():
    """The whole order, not only the winner: among ties fewer overrides first, then the
    trials below by capacity."""
    top = _trial(0, 0.0, (20.0, 21.0), {"a": 1, "b": 2, "c": 3})
    small = _trial(1, 0.0, (19.8, 20.5), {"a": 1})
    mid = _trial(2, 0.0, (19.9, 20.6), {"a": 1, "b": 2})
    low = _trial(3, 0.0, (10.0, 11.0), {})
    found = rank([top, small, mid, low], FIXED, CAPACITY)
    assert _order(found) == [1, 2, 0, 3]
    assert found.leader is top and found.tied_numbers == {0, 2}


def test_a_capacity_too_uncertain_neither_ties_nor_blocks():
    """The defaults at ±40 % overlap a sure capacity above them: they do not tie with it
    (which would keep the defaults), and the decision says the two cannot be told apart."""
    unsure = _trial(0, 0.0, (9.0, 15.0), {})
    sure = _trial(1, 0.0, (12.0, 12.6), {"max-num-seqs": 8})
    assert unsure.capacity is not None and unsure.capacity.too_uncertain
    found = rank([unsure, sure], FIXED, CAPACITY)
    assert _order(found) == [1, 0] and found.tied == ()
    assert [r.number for r in found.apart] == [0]
    # ... even where its own figure is the higher: it stands above only what it clears
    higher = _trial(0, 0.0, (12.3, 20.0), {})
    assert _order(rank([higher, sure], FIXED, CAPACITY)) == [1, 0]


def test_a_capacity_too_uncertain_wins_where_its_interval_clears_the_rest():
    unsure = _trial(0, 0.0, (20.0, 30.0), {"max-num-seqs": 8})
    sure = _trial(1, 0.0, (12.0, 12.6), {})
    below = _trial(2, 0.0, (5.0, 5.2), {})
    found = rank([sure, unsure, below], FIXED, CAPACITY)
    assert _order(found) == [0, 1, 2] and found.apart == ()
    # a floor (open above) is never cleared
    floor = _trial(1, 0.0, (12.0, None), {})
    assert _order(rank([floor, unsure], FIXED, CAPACITY)) == [1, 0]


def test_capacities_all_too_uncertain_rank_among_themselves_and_say_so():
    a = _trial(0, 0.0, (10.0, 16.0), {})
    b = _trial(1, 0.0, (12.0, 19.0), {"max-num-seqs": 8})
    found = rank([a, b], FIXED, CAPACITY)
    assert found.winner is a and found.tied_numbers == {1}
    assert [r.number for r in found.apart] == [1]


def test_explains_smallest_tied_configuration_is_a_tie_of_the_trial_it_explained():
    """`explain` found #2 tied with #1 (beside #1's control, on the machine of the day);
    its own interval does not reach the leader's, yet it is the configuration to ship."""
    won = _trial(1, 0.0, (20.0, 21.0), {"a": 1, "b": 2})
    smaller = _trial(2, 0.0, (18.0, 19.5), {"a": 1})
    found = rank([won, smaller], FIXED, CAPACITY, explained={1: 2})
    assert found.winner is smaller and found.found_by == 1
    assert rank([won, smaller], FIXED, CAPACITY).winner is won


def test_a_fixed_workload_ranks_by_its_score_and_a_pareto_study_has_no_winner():
    a = _trial(0, 0.1, None, {})
    b = _trial(1, 0.3, None, {"max-num-seqs": 8})
    found = rank([a, b], FIXED, SCORE)
    assert _order(found) == [1, 0] and found.apart == ()
    assert rank([a, b], FIXED, PARETO).winner is None
    # a capacity study's trial without a capacity ranks after those with one
    c = _trial(2, 0.5, (4.0, 4.4), {})
    assert _order(rank([a, b, c], FIXED, CAPACITY)) == [2, 1, 0]
