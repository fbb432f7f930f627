"""Accuracy on the task check, paired against the reference, and the verdict in a budget.

Both configurations answer the same items, so the comparison is paired: only the items
whose correctness differs (discordant pairs) carry information, and the difference's
interval comes from a paired bootstrap over items (resampling items, both answers of an
item together). McNemar's exact test on the discordant pairs says whether the change
is more than chance. Each accuracy alone gets a Wilson interval.

The verdict (docs/real-model.md, "three verdicts"):
- worse: the task check shows a drop (the paired interval lies below zero) and the drop
  is larger than the budget;
- unchanged: otherwise, when log-prob drift and agreement are within the noise floor's
  thresholds;
- changed within budget: anything else. A drop the items cannot show is not called worse:
  the words then say "as far as N items can tell" when the interval reaches past the
  budget. Without a task check (turned off, or a reference made before it existed) a
  change beyond the noise floor is worse: nothing in task terms says otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.stored import Stored

UNCHANGED, CHANGED, WORSE = "unchanged", "changed", "worse"
VERDICT_WORDS = {UNCHANGED: "unchanged", CHANGED: "changed within budget", WORSE: "worse"}
_Z = 1.959964
_RESAMPLES = 10_000


def wilson(k: int, n: int) -> tuple[float, float]:
    """95 % Wilson interval of a proportion k/n, in points (0-100)."""
    if n == 0:
        return (0.0, 100.0)
    p = k / n
    centre = (p + _Z**2 / (2 * n)) / (1 + _Z**2 / n)
    half = _Z * math.sqrt(p * (1 - p) / n + _Z**2 / (4 * n * n)) / (1 + _Z**2 / n)
    return (100 * max(0.0, centre - half), 100 * min(1.0, centre + half))


def paired_interval(reference: Sequence[bool], trial: Sequence[bool],
                    seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of (trial - reference) accuracy in points, from a paired
    bootstrap over items with a fixed seed (the same answers give the same interval)."""
    d = np.asarray(trial, dtype=float) - np.asarray(reference, dtype=float)
    if not d.any():
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(_RESAMPLES, len(d)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return (100 * float(low), 100 * float(high))


def mcnemar(lost: int, gained: int) -> float:
    """Exact two-sided McNemar p-value: the discordant pairs against a fair coin."""
    n = lost + gained
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(lost, gained) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class TaskScore(Stored):
    """A trial's task check against the reference's answers to the same items: accuracy
    (points) with its Wilson interval, the paired difference with its bootstrap interval,
    items whose answer text changed, items lost and gained, McNemar's p, and the cost."""

    items: int = 0
    accuracy: float = 0.0
    accuracy_low: float = 0.0
    accuracy_high: float = 0.0
    reference_accuracy: float = 0.0
    difference: float = 0.0
    difference_low: float = 0.0
    difference_high: float = 0.0
    changed: int = 0
    lost: int = 0
    gained: int = 0
    p_value: float = 1.0
    seconds: float | None = None

    @property
    def changed_share(self) -> float:
        return self.changed / self.items if self.items else 0.0

    @property
    def measurable(self) -> bool:
        """Whether accuracy can tell anything: some item was scored and one of the two
        configurations answered one right. On a random-weight model neither does, and
        0 % against 0 % is no evidence that the answers kept their quality."""
        return self.items > 0 and (self.accuracy > 0 or self.reference_accuracy > 0)

    def words(self) -> str:
        """E.g. "18 % of answers changed; accuracy 52.0 % vs 53.0 % (-1.0, -2.9 to +0.9)",
        or why accuracy cannot be measured."""
        if not self.items:
            return "accuracy not measurable: no task item was scored"
        changed = f"{100 * self.changed_share:.0f} % of answers changed; "
        if not self.measurable:
            return (changed + "accuracy not measurable: neither configuration answered "
                    f"any of the {self.items:,} task items right (a random-weight model "
                    "answers none)")
        return (changed + f"accuracy {self.accuracy:.1f} % vs {self.reference_accuracy:.1f} % "
                f"({self.difference:+.1f}, {self.difference_low:+.1f} to "
                f"{self.difference_high:+.1f})")


def score(reference: Sequence[bool], trial: Sequence[bool], changed: int,
          seconds: float | None = None) -> TaskScore:
    """The paired comparison of two configurations' correctness on the same items."""
    n = len(reference)
    k = sum(trial)
    lost = sum(1 for r, t in zip(reference, trial, strict=True) if r and not t)
    gained = sum(1 for r, t in zip(reference, trial, strict=True) if t and not r)
    low, high = wilson(k, n)
    dlow, dhigh = paired_interval(reference, trial)
    return TaskScore(items=n, accuracy=100 * k / n if n else 0.0, accuracy_low=low,
                     accuracy_high=high,
                     reference_accuracy=100 * sum(reference) / n if n else 0.0,
                     difference=100 * (gained - lost) / n if n else 0.0,
                     difference_low=dlow, difference_high=dhigh, changed=changed,
                     lost=lost, gained=gained, p_value=mcnemar(lost, gained),
                     seconds=seconds)


def shown_worse(tasks: TaskScore, budget: float) -> bool:
    """The drop is real (the paired interval lies below zero) and beyond the budget."""
    return tasks.difference_high < 0 and tasks.difference < -budget


def verdict(within_noise: bool, tasks: TaskScore | None, budget: float) -> str:
    """unchanged, changed (within budget) or worse; see the module's docstring."""
    if tasks is not None and shown_worse(tasks, budget):
        return WORSE
    if within_noise:
        return UNCHANGED
    return CHANGED if tasks is not None else WORSE


def in_words(verdict_: str | None, tasks: TaskScore | None, budget: float | None) -> str:
    """The verdict as a user reads it, e.g. "18 % of answers changed; accuracy 52.0 % vs
    53.0 % (-1.0, -2.9 to +0.9): within the 1-point budget"."""
    if verdict_ is None:
        return ""
    if tasks is None:
        return {UNCHANGED: "unchanged (log-probs within the noise floor)",
                WORSE: "worse: answers changed beyond the noise floor, no task check "
                       "to judge by"}.get(verdict_, VERDICT_WORDS.get(verdict_, verdict_))
    points = f"{budget:g}-point budget" if budget is not None else "budget"
    if not tasks.measurable:  # the verdict rests on the log-probs alone: say so
        said = {UNCHANGED: "unchanged (log-probs within the noise floor)",
                CHANGED: "changed (log-probs beyond the noise floor; no accuracy to hold "
                         f"to the {points})"}
        return f"{tasks.words()}: {said.get(verdict_, VERDICT_WORDS.get(verdict_, verdict_))}"
    tail = {UNCHANGED: "unchanged",
            CHANGED: f"within the {points}",
            WORSE: f"worse: beyond the {points}"}.get(verdict_, verdict_)
    if verdict_ == CHANGED and budget is not None and tasks.difference_low < -budget:
        tail += f" as far as {tasks.items} items can tell"
    return f"{tasks.words()}: {tail}"


def items_for(half_width: float, flipped_share: float, difference: float = 0.0) -> int:
    """Items a paired 95 % interval of +-`half_width` points needs when `flipped_share` of
    the items change correctness (lost or gained) and the accuracy moves by `difference`
    points: n = (z * sd / h)^2, where sd^2 = flipped_share - (difference / 100)^2 is the
    variance of one item's paired difference."""
    if half_width <= 0:
        raise ValueError("half_width must be > 0")
    variance = flipped_share - (difference / 100) ** 2
    return math.ceil((_Z * math.sqrt(max(variance, 0.0)) / (half_width / 100)) ** 2)
