"""Trials with their records added to a study as the study loop writes them, without an
engine: the tests' way to make a study of known trials."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.tuning.records import writers
from autotune.tuning.records.studyrecord import StudyRecord
from autotune.tuning.records.trialrecord import TrialRecord


def add(study: optuna.Study, state: TrialState = TrialState.COMPLETE, *,
        values: Sequence[float] | None = None, constraints: Mapping[str, float] | None = None,
        params: Mapping[str, Any] | None = None,
        distributions: Mapping[str, optuna.distributions.BaseDistribution] | None = None,
        **fields: Any) -> TrialRecord:
    """Add a trial with its record through Optuna's ask-and-tell API, as the study loop
    writes one (`records.writers.set_constraints`, then `write`, then `tell`)."""
    if params:
        study.enqueue_trial(dict(params), skip_if_exists=False)
    trial = study.ask(fixed_distributions=dict(distributions or {}))
    if constraints:
        writers.set_constraints(trial, constraints)
    writers.write(trial, **fields)
    if state == TrialState.COMPLETE:
        study.tell(trial, list(values or ()))
    elif state != TrialState.RUNNING:
        study.tell(trial, state=state)
    return TrialRecord.of(study.get_trials(deepcopy=False)[trial.number], StudyRecord.of(study))
