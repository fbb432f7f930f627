"""A study read once (`Snapshot`): its own attributes and every trial's record, for readers
that rank and tabulate the same trials several ways (`autotune show`, the report, export);
`records`, a study's trials as records; `StudyOrSnapshot`, what those readers take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from autotune.tuning.records.studyrecord import StudyRecord
from autotune.tuning.records.trialrecord import TrialRecord


@dataclass(frozen=True)
class Snapshot:
    """A study read once: its attributes and every trial's record (by number), for readers
    that rank and tabulate the same trials several ways (`autotune show`, the report)."""

    study: optuna.Study
    attrs: StudyRecord
    trials: tuple[TrialRecord, ...]

    @classmethod
    def of(cls, study: optuna.Study | Snapshot, attrs: StudyRecord | None = None) -> Snapshot:
        """`study` read now (a snapshot as it is); with `attrs`, the study's own attributes
        as the caller already read them, and only the trials are read."""
        if isinstance(study, Snapshot):
            return study
        attrs = StudyRecord.of(study) if attrs is None else attrs
        return cls(study, attrs, tuple(TrialRecord.of(t, attrs)
                                       for t in study.get_trials(deepcopy=False)))

    @property
    def study_name(self) -> str:
        return self.study.study_name

    @property
    def directions(self) -> list[optuna.study.StudyDirection]:
        return self.study.directions


# What readers take: a study, or one read once (`Snapshot.of` gives the latter either way).
StudyOrSnapshot = optuna.Study | Snapshot


def records(study: optuna.Study | Snapshot, states: Sequence[TrialState] | None = None
            ) -> list[TrialRecord]:
    """Every trial of a study (or those in `states`) as records, validations included; of
    a `Snapshot`, those it read."""
    if isinstance(study, Snapshot):
        return [r for r in study.trials if not states or r.state in states]
    attrs = StudyRecord.of(study)
    return [TrialRecord.of(t, attrs)
            for t in study.get_trials(deepcopy=False, states=tuple(states) if states else None)]
