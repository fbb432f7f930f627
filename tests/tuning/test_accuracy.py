"""Accuracy in points, paired against the reference, and the three verdicts."""

from __future__ import annotations

import pytest

from autotune.tuning.quality import accuracy


def _pair(n, right, lost, gained):
    ref = [True] * right + [False] * (n - right)
    got = list(ref)
    for i in range(lost):
        got[i] = False
    for i in range(gained):
        got[right + i] = True
    return ref, got


def test_wilson_interval_matches_known_values():
    low, high = accuracy.wilson(50, 100)
    assert low == pytest.approx(40.38, abs=0.01) and high == pytest.approx(59.62, abs=0.01)
    assert accuracy.wilson(0, 10)[0] == 0.0 and accuracy.wilson(10, 10)[1] == pytest.approx(100.0)


def test_identical_answers_give_a_zero_interval():
    ref, got = _pair(200, 120, 0, 0)
    s = accuracy.score(ref, got, changed=0)
    assert (s.difference, s.difference_low, s.difference_high) == (0.0, 0.0, 0.0)
    assert s.p_value == 1.0 and s.accuracy == s.reference_accuracy == 60.0


def test_a_paired_interval_covers_the_difference_and_is_reproducible():
    ref, got = _pair(200, 106, 20, 18)
    s = accuracy.score(ref, got, changed=36)
    assert s.difference == -1.0 and s.lost == 20 and s.gained == 18
    assert s.difference_low < -1.0 < 0 < s.difference_high
    # the bootstrap's 95 % half-width is about 1.96 * sqrt(38/200) / sqrt(200) = 6 points
    assert s.difference_high - s.difference_low == pytest.approx(12.1, abs=1.5)
    assert accuracy.score(ref, got, changed=36) == s  # fixed seed
    assert 0.8 < s.p_value <= 1.0
    assert s.changed_share == 0.18


def test_mcnemar_exact():
    assert accuracy.mcnemar(0, 0) == 1.0
    assert accuracy.mcnemar(10, 0) == pytest.approx(2 / 2**10)
    assert accuracy.mcnemar(5, 5) == 1.0


@pytest.mark.parametrize(("within", "lost", "gained", "said"), [
    (True, 0, 0, "unchanged"),
    (False, 20, 18, "changed"),   # -1.0 (-7 to +5): not shown to drop
    (False, 3, 0, "changed"),     # -1.5 but the interval reaches 0: not shown
    (False, 30, 2, "worse"),      # -14 points, the interval below zero
    (True, 30, 2, "worse"),       # drift within the noise, answers not
    (False, 12, 1, "worse"),      # -5.5, shown
])
def test_verdicts(within, lost, gained, said):
    ref, got = _pair(200, 100, lost, gained)
    assert accuracy.verdict(within, accuracy.score(ref, got, lost + gained), 1.0) == said


def test_a_small_real_drop_within_the_budget_is_changed_not_worse():
    ref, got = _pair(2000, 1000, 12, 0)  # -0.6 points, shown, within a 1-point budget
    s = accuracy.score(ref, got, 12)
    assert s.difference_high < 0
    assert accuracy.verdict(False, s, 1.0) == "changed"
    assert accuracy.verdict(False, s, 0.5) == "worse"


def test_items_for_an_interval():
    # +-1 point when 18 % of items change correctness at random: about 6,900 items
    assert accuracy.items_for(1.0, 0.18) == pytest.approx(6915, abs=5)
    assert accuracy.items_for(3.0, 0.18) < 800
    # fp8 KV on the H200: 10.6 % of 2,000 items flipped, +4.0 points (docs/real-model.md)
    assert accuracy.items_for(1.0, 212 / 2000, 4.0) == pytest.approx(4011, abs=2)
    with pytest.raises(ValueError):
        accuracy.items_for(0.0, 0.1)


def test_nothing_right_on_either_side_is_said_not_measurable():
    """A random-weight model answers no item right: 0 % against 0 % measures nothing, and
    the line says so in task terms instead of `+0.0 (+0.0 to +0.0)`; the verdict then
    rests on the log-probs, and says that too."""
    none = accuracy.score([False] * 1000, [False] * 1000, changed=120)
    assert not none.measurable
    said = accuracy.in_words(accuracy.UNCHANGED, none, 1.0)
    assert said == ("12 % of answers changed; accuracy not measurable: neither configuration "
                    "answered any of the 1,000 task items right (a random-weight model "
                    "answers none): unchanged (log-probs within the noise floor)")
    assert "+0.0" not in said and "0.0 %" not in said
    changed = accuracy.in_words(accuracy.CHANGED, none, 1.0)
    assert changed.endswith("changed (log-probs beyond the noise floor; no accuracy to hold "
                            "to the 1-point budget)")
    assert "within the 1-point budget" not in changed  # a budget nothing could test


def test_no_scored_item_is_not_measurable_either():
    empty = accuracy.score([], [], changed=0)
    assert (empty.items, empty.measurable) == (0, False)
    assert accuracy.in_words(accuracy.UNCHANGED, empty, 1.0) == (
        "accuracy not measurable: no task item was scored: unchanged (log-probs within "
        "the noise floor)")


@pytest.mark.parametrize(("reference", "trial"), [(1, 0), (0, 1), (5, 5)])
def test_one_right_answer_on_either_side_is_measurable(reference, trial):
    ref = [True] * reference + [False] * (100 - reference)
    got = [True] * trial + [False] * (100 - trial)
    score = accuracy.score(ref, got, changed=0)
    assert score.measurable
    assert score.words().startswith(f"0 % of answers changed; accuracy {trial:.1f} % vs "
                                    f"{reference:.1f} %")
