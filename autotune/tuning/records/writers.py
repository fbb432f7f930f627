"""The trial record's writers: `write`, the study loop's only writer of a running trial's
record, and what a trial starts with when it is queued or added as it is.

An unknown field is a bug (`TypeError`): only `TrialRecord`'s own fields are stored, with
the record's version and the short scalars of its long fields
(`autotune.tuning.records._scalars`). The study's own attributes have their setters beside
`StudyRecord` (`autotune.tuning.records.studyrecord`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import optuna
from optuna.trial import TrialState

from autotune.measure.measurement import Measurement
from autotune.measure.speculation import Speculation
from autotune.stored import Stored, json_data
from autotune.tuning.quality.verdict import Quality
from autotune.tuning.records._scalars import short
from autotune.tuning.records.origin import Origin
from autotune.tuning.records.studyrecord import StudyRecord
from autotune.tuning.records.trialrecord import VERSION, WRITABLE, TrialRecord


def write(trial: optuna.Trial, **values: Any) -> None:
    """Store record fields on a running trial (before `tell`); unknown names are a bug.
    Typed values (`Measures`, `Quality`, `Startup`) are stored as their dicts, plain dicts
    as they are. The short scalars of `metrics` and `quality` are stored with them
    (`records.scalars.SCALARS`)."""
    for key, value in user_attrs(**values).items():
        trial.set_user_attr(key, value)


def user_attrs(**values: Any) -> dict[str, object]:
    """The user attributes that store record fields (`write`'s), with their short scalars;
    unknown names are a bug."""
    unknown = set(values) - WRITABLE
    if unknown:
        raise TypeError(f"not trial record fields: {', '.join(sorted(unknown))}")
    out: dict[str, object] = {"record_version": VERSION}
    out.update((k, json_data(v)) for k, v in values.items())
    quality = out.get("quality")
    found = short(_stored(Measurement, out.get("metrics")),
                  Quality.from_dict(quality) if isinstance(quality, Mapping) else None,
                  _stored(Speculation, out.get("speculation")),
                  _stored(Origin, out.get("origin")))
    out.update((k, v) for k, v in found.items() if v is not None)
    return out


S = TypeVar("S", bound=Stored)


def _stored(kind: type[S], value: Any) -> S | None:
    """The record a stored (plain) field holds; None for an empty or missing one."""
    return kind.from_dict(value) if isinstance(value, Mapping) and value else None


def append(study: optuna.Study, state: TrialState, values: Sequence[float] | None,
           constraints: Mapping[str, float], started: dt.datetime | None = None,
           **fields: Any) -> TrialRecord:
    """Add a finished trial measured outside Optuna's queue (`autotune explain`'s): added
    as it is (`Study.add_trial`), so that trials already queued keep their turn; `started`
    is when its run began (default: now)."""
    attrs = user_attrs(**fields)
    if constraints:
        attrs["feasible"] = all(float(v) <= 0 for v in constraints.values())
    frozen = optuna.trial.create_trial(
        state=state, values=list(values) if state == TrialState.COMPLETE and values else None,
        user_attrs=attrs, constraints={k: float(v) for k, v in constraints.items()})
    if started is not None:
        frozen.datetime_start = started
    study.add_trial(frozen)
    return TrialRecord.of(study.get_trials(deepcopy=False)[-1], StudyRecord.of(study))


def queued(baseline: str | None, flags: Mapping[str, Any] | None) -> dict[str, object]:
    """The user attributes a queued trial starts with (`Study.enqueue_trial`)."""
    return {"baseline": baseline, "baseline_flags": dict(flags) if flags is not None else None}


def queued_move(flags: Mapping[str, Any] | None, origin: Mapping[str, Any]) -> dict[str, object]:
    """What a relief move is queued with: why it is tried, and its flags where the space
    cannot express them as parameters (`flags` None where it can)."""
    return {**(queued(None, flags) if flags is not None else {}), "origin": dict(origin)}


def queued_again(rec: TrialRecord) -> dict[str, object]:
    """What a trial that did not finish takes back into the queue: its baseline or its
    queued flags, and why it was tried."""
    out = queued(rec.baseline, rec.baseline_flags) if rec.baseline_flags is not None else {}
    if rec.origin is not None:
        out["origin"] = json_data(rec.origin)
    return out


def set_constraints(trial: optuna.Trial, constraints: Mapping[str, float]) -> None:
    """Optuna's named constraints: a trial is feasible when every value is <= 0. `feasible`
    is stored beside them as a plain attribute (a pruned trial breaks `completed`, so it is
    false there), for readers that show attributes but not constraints."""
    for key, value in constraints.items():
        trial.set_constraint(key, float(value))
    if constraints:
        trial.set_user_attr("feasible", all(float(v) <= 0 for v in constraints.values()))
