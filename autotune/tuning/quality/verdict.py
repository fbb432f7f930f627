"""The guardrail's verdict on a trial: the thresholds over the reference's noise floor, the
drift rule (drift and agreement against them), the task check's paired score, the verdict
a user reads (unchanged, changed within the accuracy budget, worse; `accuracy`), the record
a trial keeps of it (`Quality`) and the Optuna constraint it sets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autotune.config import GuardrailSpec
from autotune.stored import Stored
from autotune.tuning.quality import accuracy, tasks
from autotune.tuning.quality.reference import Reference, TaskAnswers

DRIFT_FLOOR = 0.01  # nats: below this, differences are rounding on any backend


def thresholds(noise: dict[str, float], factor: float, drift: float | None,
               agreement: float | None) -> dict[str, float]:
    """Defaults relative to the noise floor: drift <= factor x noise + floor; agreement >=
    half of what two reference runs share. Explicit values win."""
    return {
        "drift": drift if drift is not None else factor * noise["drift"] + DRIFT_FLOOR,
        "agreement": agreement if agreement is not None else 0.5 * noise["agreement"],
    }


def task_score(ref: TaskAnswers, items: list[tasks.Item], keep: Sequence[int],
               answers: list[str], seconds: float) -> accuracy.TaskScore:
    """The paired score over the items in `keep` (`answers` are theirs, in order)."""
    right = [tasks.correct(items[i], a) for i, a in zip(keep, answers, strict=True)]
    changed = sum(ref.outputs[i].strip() != a.strip() for i, a in zip(keep, answers,
                                                                       strict=True))
    return accuracy.score([ref.correct[i] for i in keep], right, changed, seconds)


def judge(report: Quality, reference: Reference, tasks_score: accuracy.TaskScore | None,
          spec: GuardrailSpec, made_reference: bool | None = None) -> Quality:
    """The verdict on `report`: the drift rule, then the task check's score under the
    accuracy budget, and whether it passes what the scenario requires."""
    judged = drift_verdict(report, reference)
    said = accuracy.verdict(bool(judged.passed), tasks_score, spec.max_accuracy_drop)
    passed = said == accuracy.UNCHANGED if spec.require == "unchanged" \
        else said != accuracy.WORSE
    return replace(judged, passed=passed, verdict=said, template=reference.template,
                   tasks=tasks_score,
                   budget=spec.max_accuracy_drop if tasks_score is not None else None,
                   require=spec.require, made_reference=made_reference)


def drift_verdict(report: Quality, reference: Reference) -> Quality:
    """`compare`'s report judged by the noise floor's thresholds alone (drift and
    agreement), the guardrail's rule before the task check; `judge` adds the task check."""
    t = reference.thresholds
    return replace(report, thresholds=t, noise=reference.noise,
                   passed=(report.drift or 0.0) <= t["drift"]
                   and (report.agreement or 0.0) >= t["agreement"])


@dataclass(frozen=True)
class Quality(Stored):
    """The guardrail's verdict on a trial as its record keeps it: `compare`'s figures, the
    thresholds and noise floor, the task check (`tasks`: accuracy and the paired
    difference against the reference), the verdict (`accuracy.UNCHANGED`, `CHANGED`,
    `WORSE`) under the accuracy `budget` (points) and what the scenario `require`d,
    whether it passed (not rejected) and whether the trial made the reference; a check
    that failed to run keeps only its `error`. Records written before the task check have
    no verdict: `passed` alone says what the drift rule decided."""

    NESTED = {"tasks": accuracy.TaskScore}

    drift: float | None = None
    drift_max: float | None = None
    agreement: float | None = None
    prefix_ratio: float | None = None
    worst: list[dict[str, Any]] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=dict)
    noise: dict[str, float] = field(default_factory=dict)
    passed: bool | None = None
    made_reference: bool | None = None
    error: str | None = None
    verdict: str | None = None
    template: str | None = None
    tasks: accuracy.TaskScore | None = None
    budget: float | None = None
    require: str | None = None
    left_out: list[str] = field(default_factory=list)  # items too long for the engine
    # Why the check could not run for a reason of autotune's (a request the engine
    # refused as built): the trial stands, unchecked, rather than pruned.
    not_checked: str | None = None

    @property
    def checked(self) -> bool:
        """Whether the outputs were compared (not an error, nor a record without drift)."""
        return self.drift is not None

    def noise_multiple(self) -> str:
        """The drift as a multiple of the noise floor, e.g. "700x the noise floor"."""
        floor = self.noise.get("drift")
        if self.drift is None or floor is None:
            return ""
        if floor <= 0:
            return "noise floor 0" if self.drift <= 0 else "over a noise floor of 0"
        return f"{self.drift / floor:.0f}x the noise floor"

    def short(self) -> str:
        """A table cell: the verdict and the paired difference ("changed -1.0 (-2.9..+0.9)"),
        or the drift of a record without a verdict ("0.070"), "-" when not checked."""
        if self.verdict is None:
            return f"{self.drift:.3f}" if self.drift is not None else "-"
        t = self.tasks
        cell = {accuracy.CHANGED: "changed"}.get(self.verdict, self.verdict)
        if self.passed is False:
            cell = cell.upper()
        if t is not None and (t.changed or t.lost or t.gained):
            cell += (f" {t.difference:+.1f} ({t.difference_low:+.1f}.."
                     f"{t.difference_high:+.1f})")
        return cell

    def words(self) -> str:
        """The verdict in words: the task check's figures and the budget, or what the
        drift rule said for a record without a verdict."""
        if self.error or self.not_checked:
            return f"not checked: {self.error or self.not_checked}"
        if self.verdict is None:
            if not self.checked or self.passed is None:
                return ""
            return "passed" if self.passed else "rejected"
        said = accuracy.in_words(self.verdict, self.tasks, self.budget)
        if self.require == "unchanged" and self.verdict != accuracy.UNCHANGED:
            said += " (rejected: the scenario requires unchanged)"
        return "; ".join([said, *self.left_out])


def constraints(report: Quality | None) -> dict[str, float]:
    """One named Optuna constraint, `quality` (<= 0 is met): 1 when the guardrail rejected
    the trial, 0 otherwise, when it is off or when it could not run for autotune's own
    reason (`not_checked`: no verdict, so no rejection)."""
    if report is None or report.not_checked:
        return {"quality": 0.0}
    assert report.passed is not None, "a verdict says whether it passed"
    return {"quality": 0.0 if report.passed else 1.0}
