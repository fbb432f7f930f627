"""Short scalar copies of a trial's key figures, for optuna-dashboard.

optuna-dashboard shows a user attribute as text cut at 1,024 characters, so `metrics` and
`quality` (several thousand) arrive there as broken JSON. The trial record's writer
(`autotune.tuning.records.writers`) stores these beside the fields they come from (record
version 3), `set_constraints` stores `feasible`; `TrialRecord.scalars` derives them for a
record of any version. They are not fields of their own: nothing else may write them.
"""

from __future__ import annotations

from autotune.measure import capacityrecord
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.measurement import Measurement
from autotune.measure.speculation import Speculation
from autotune.tuning.quality.verdict import Quality
from autotune.tuning.records.origin import Origin

SCALARS = ("feasible", "capacity_rps", "capacity_low", "capacity_high",
           "capacity_uncertainty", "bottleneck", "drift", "agreement", "quality_passed",
           "quality_verdict", "spec_acceptance_rate", "spec_acceptance_length", "tried_because")


def capacity_record(metrics: Measurement) -> CapacityRecord | None:
    """The capacity search's record inside a trial's `metrics`, if it ran in capacity mode,
    as this version reads it (`capacityrecord.current`: an older record's capacity is the
    rate its steps achieved); `TrialRecord.capacity` reads it so too."""
    return capacityrecord.current(metrics.capacity) if metrics.capacity is not None else None


def short(metrics: Measurement | None, quality: Quality | None,
          spec: Speculation | None = None, origin: Origin | None = None) -> dict[str, object]:
    """The short scalars of `metrics` (capacity, bottleneck), `quality` (drift, ...),
    `spec` (speculative decoding's acceptance) and `origin` (why the trial was tried)."""
    out: dict[str, object] = {}
    if origin is not None:
        out["tried_because"] = origin.text
    if metrics is not None:
        cap = capacity_record(metrics)
        out.update(capacity_rps=(cap.request_throughput if cap.low else 0.0) if cap else None,
                   capacity_low=cap.low if cap else None,
                   capacity_high=cap.high if cap else None,
                   capacity_uncertainty=cap.uncertainty if cap else None,
                   bottleneck=capacityrecord.limit_text(cap) if cap else
                   (metrics.bottleneck.text if metrics.bottleneck else None))
    if quality is not None:
        out.update(drift=quality.drift, agreement=quality.agreement,
                   quality_passed=quality.passed,
                   quality_verdict=quality.words() if quality.verdict else None)
    if spec is not None:
        out.update(spec_acceptance_rate=spec.acceptance_rate,
                   spec_acceptance_length=spec.mean_acceptance_length)
    return out
