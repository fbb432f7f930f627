"""Creating or opening the study: its sampler and pruner, vLLM's defaults queued first, the
named baselines once they have run, and the installed engine's defaults kept with it.

Several workers can share one study (`--gpus`, or hosts on one PostgreSQL): the study is
created by exactly one of them, which queues vLLM's defaults; whoever finishes the defaults
queues the named baselines (`queue_baselines`, called by the loop in
`autotune.tuning.study`); a worker that opens the study long after the defaults finished,
with the baselines never queued, queues them itself.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.config import Scenario
from autotune.tuning.policy import objective as obj
from autotune.tuning.policy import space
from autotune.tuning.records import studyrecord, writers
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.studyrecord import StudyRecord
from autotune.tuning.records.trialrecord import DEFAULTS
from autotune.tuning.sharing import heartbeat


class GridSearch(optuna.samplers.GridSampler):
    """Optuna's grid for an ask-and-tell loop. The grid calls `study.stop()` after its last
    point, which only works inside `Study.optimize` (elsewhere it raises RuntimeError, after
    the trial is stored); the loop asks `is_exhausted` before each trial instead."""

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                    state: TrialState, values: Any) -> None:
        return None

def exhausted(study: optuna.Study) -> bool:
    """A finished grid with nothing queued: no new configuration is left to try."""
    return isinstance(study.sampler, optuna.samplers.GridSampler) \
        and study.sampler.is_exhausted(study) \
        and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,))

def make_sampler(scenario: Scenario, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The scenario's sampler (with `seed`, default the scenario's); constrained samplers
    read the trials' named constraints. TPE's constant liar counts running trials as bad
    ones, so workers sharing a study do not all propose near the same point."""
    s = scenario.sampler
    seed = s.seed if seed is None else seed
    if s.name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True)
    if s.name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if s.name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if s.name == "grid":
        return GridSearch(space.grid(scenario), seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


# Study attributes (`StudyRecord`): the named baselines are queued; the guardrail
# reference's contents (so that a worker on another host checks against the same one).
BASELINES_QUEUED, REFERENCE_DATA = studyrecord.BASELINES_QUEUED, studyrecord.REFERENCE_DATA
# A study created by another worker a moment ago gets its defaults trial within this.
_CREATOR_S = 10.0
# The defaults' worker queues the baselines right after telling them; if it has not
# within this long, it died in between and the next worker to open the study does.
_BASELINES_S = 60.0


def open_study(scenario: Scenario, url: str, *, worker: heartbeat.Worker | None = None,
               heartbeat_s: int | None = None, grace_s: int | None = None,
               register: bool = True) -> heartbeat.SharedStudy:
    """Create or load the scenario's study, with heartbeats, as `worker` (default: this
    process), whose sampler gets its own seed (`heartbeat.register`; `register=False` for a
    process that only watches the study, as `tune --gpus` does its workers). The study comes
    with its storage and worker (`heartbeat.SharedStudy`), which its heartbeats use.

    Creating the study is atomic in the storage (its name is unique), so of several workers
    starting together exactly one creates it and queues vLLM's defaults.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=3) \
        if scenario.prune.enabled and scenario.prune.pruner == "median" \
        else optuna.pruners.NopPruner()
    store = heartbeat.storage(url, heartbeat_s=heartbeat_s, grace_s=grace_s)
    try:
        study = optuna.create_study(storage=store, study_name=scenario.name,
                                    directions=obj.directions(scenario.objective),
                                    sampler=make_sampler(scenario), pruner=pruner)
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=str(scenario.name), storage=store,
                                  sampler=make_sampler(scenario), pruner=pruner)
        created = False
    me = worker or heartbeat.Worker.here()
    shared = heartbeat.SharedStudy.attach(study, store, me)
    if created or not _await_creator(study):
        # vLLM's defaults first; the named baselines follow once they finish (`run_one`).
        study.enqueue_trial({}, user_attrs=writers.queued(DEFAULTS, {}))
        studyrecord.set_scenario(study, scenario.model_dump(mode="json", by_alias=True))
        if not scenario.baselines:
            studyrecord.set_baselines_queued(study)
    else:
        _baselines_left_behind(study, scenario)
    if register:
        study.sampler = make_sampler(scenario,
                                     heartbeat.register(study, me, scenario.sampler.seed))
    return shared


def _await_creator(study: optuna.Study) -> bool:
    """Whether the study has its first trials queued: at once for a study that has trials
    or queued its baselines, else after waiting a moment for the worker that just created it.
    """
    deadline = time.monotonic() + _CREATOR_S
    while True:
        queued = StudyRecord.of(study).baselines_queued
        if queued or study.get_trials(deepcopy=False):
            return StudyRecord.of(study).baselines_queued or any(
                r.is_defaults for r in records(study))
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def queue_baselines(study: optuna.Study, scenario: Scenario) -> None:
    """Queue the named baselines: done by the worker that finished vLLM's defaults (one
    trial is told by one worker only, so they are queued once)."""
    if StudyRecord.of(study).baselines_queued:
        return
    for base in scenario.baselines:
        study.enqueue_trial({}, user_attrs=writers.queued(base.name, base.flags))
    studyrecord.set_baselines_queued(study)


def _baselines_left_behind(study: optuna.Study, scenario: Scenario) -> None:
    """The defaults finished long ago but the baselines were never queued (their worker
    died in between): queue them now."""
    if StudyRecord.of(study).baselines_queued:
        return
    state, rec = heartbeat.defaults_state(study)
    finished = [r.datetime_complete for r in records(study)
                if r.is_defaults and r.datetime_complete is not None]
    if state == heartbeat.DONE and finished and \
            (dt.datetime.now() - max(finished)).total_seconds() > _BASELINES_S:
        queue_baselines(study, scenario)


def record_engine_defaults(study: optuna.Study, scenario: Scenario, info: Any) -> None:
    """Keep the installed engine's defaults of the flags this study sets, once."""
    if StudyRecord.of(study).engine_defaults is not None:
        return
    names = set(scenario.space) | set(scenario.engine.flags)
    for base in scenario.baselines:
        names |= set(base.flags)
    defaults = {n: info.flags[n].default for n in sorted(names)
                if n in info.flags and info.flags[n].default is not None}
    studyrecord.set_engine_defaults(study, defaults)
