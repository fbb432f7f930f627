"""The Optuna study: storage, baselines first, then ask -> run -> tell, resumable.

Each trial is asked of Optuna, run by `trial.run` (or any function with its signature:
the seam tests give canned outcomes), and told back with its state, its values and its
named constraints; everything measured goes into the trial record (`record.write`), so the
study database alone explains itself. The first trial is vLLM's defaults, and the weighted
score of every trial is relative to it (`ranking.reference_trial`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune import tinymodel
from autotune.config import Scenario
from autotune.engine import gpu
from autotune.engine.info import engine_info
from autotune.errors import AutotuneError
from autotune.flags import normalize
from autotune.measure import capacity
from autotune.tuning import guardrail, prune, ranking, record, space
from autotune.tuning import objective as obj
from autotune.tuning import trial as trial_mod
from autotune.tuning.record import DEFAULTS, TrialRecord

log = logging.getLogger("autotune")
Runner = Callable[..., trial_mod.Outcome]  # `trial.run`'s signature


@dataclass
class Progress:
    """What the live view shows after each trial."""

    done: int
    planned: int
    elapsed_s: float
    deadline_s: float | None
    last: TrialRecord | None
    best: TrialRecord | None


def storage_url(scenario: Scenario, storage: str | None, root: Path) -> str:
    if storage:
        return storage
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / (scenario.name or 'study')}.db"


class GridSearch(optuna.samplers.GridSampler):
    """Optuna's grid for an ask-and-tell loop. The grid calls `study.stop()` after its last
    point, which only works inside `Study.optimize` (elsewhere it raises RuntimeError, after
    the trial is stored); the loop asks `is_exhausted` before each trial instead."""

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                    state: TrialState, values: Any) -> None:
        return None


def _exhausted(study: optuna.Study) -> bool:
    """A finished grid with nothing queued: no new configuration is left to try."""
    return isinstance(study.sampler, optuna.samplers.GridSampler) \
        and study.sampler.is_exhausted(study) \
        and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


def make_sampler(scenario: Scenario) -> optuna.samplers.BaseSampler:
    """The scenario's sampler; constrained samplers read the trials' named constraints."""
    s = scenario.sampler
    if s.name == "tpe":
        return optuna.samplers.TPESampler(seed=s.seed)
    if s.name == "gp":
        return optuna.samplers.GPSampler(seed=s.seed)
    if s.name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=s.seed)
    if s.name == "grid":
        return GridSearch(space.grid(scenario), seed=s.seed)
    return optuna.samplers.RandomSampler(seed=s.seed)


def open_study(scenario: Scenario, url: str) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=3) \
        if scenario.prune.enabled and scenario.prune.pruner == "median" \
        else optuna.pruners.NopPruner()
    study = optuna.create_study(storage=url, study_name=scenario.name,
                                directions=obj.directions(scenario.objective),
                                sampler=make_sampler(scenario), pruner=pruner,
                                load_if_exists=True)
    if not study.user_attrs.get("baselines_enqueued"):
        # vLLM's defaults first, then the named baselines, before any search.
        study.enqueue_trial({}, user_attrs=record.queued(DEFAULTS, {}))
        for base in scenario.baselines:
            study.enqueue_trial({}, user_attrs=record.queued(base.name, normalize(base.flags)))
        study.set_user_attr("baselines_enqueued", True)
        study.set_user_attr("scenario", scenario.model_dump(mode="json"))
    return study


def recover_interrupted(study: optuna.Study, url: str) -> int:
    """Trials left RUNNING by a killed tuner become FAIL and run again (SQLite: one worker)."""
    if not url.startswith("sqlite"):
        return 0
    stale = record.records(study, (TrialState.RUNNING,))
    for rec in stale:
        study.tell(rec.number, state=TrialState.FAIL)
        study.enqueue_trial(rec.params, user_attrs=record.queued_again(rec),
                            skip_if_exists=False)
    return len(stale)


def resolve_model(scenario: Scenario) -> str:
    return tinymodel.resolve(scenario.model.tiny, scenario.model.path)


def _key(flags: dict[str, Any]) -> str:
    return json.dumps(normalize(flags), sort_keys=True, default=str)


def _duplicate(study: optuna.Study, flags: dict[str, Any], number: int) -> TrialRecord | None:
    key = _key(flags)
    return next((r for r in record.records(study, (TrialState.COMPLETE, TrialState.PRUNED))
                 if r.number != number and _key(r.flags) == key), None)


def reference(study: optuna.Study) -> obj.Measures | None:
    """The reference trial's measures (see `ranking.reference_trial`)."""
    r = ranking.reference_trial(study)
    return obj.Measures(**r.measures) if r else None


@contextlib.contextmanager
def no_interrupts() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM for a few database writes (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _pruner_hook(study: optuna.Study, trial: optuna.Trial, scenario: Scenario,
                 baseline: dict[str, Any] | None) -> Callable[[dict[str, Any]], str | None] | None:
    """Report the probe phase's score so Optuna's pruner can stop a trial that is behind
    earlier ones at the same point (weighted mode; baselines always run to the end)."""
    if scenario.objective.mode != "weighted" or baseline is not None:
        return None

    def hook(partial: dict[str, Any]) -> str | None:
        ref = reference(study)
        if ref is None or not partial.get("completed"):
            return None
        trial.report(obj.values(obj.measures(partial, scenario.objective), ref,
                                scenario.objective)[0], step=0)
        return prune.BEHIND if trial.should_prune() else None

    return hook


def _constraints(scenario: Scenario, outcome: trial_mod.Outcome) -> dict[str, float]:
    """Named constraints: the SLOs and failed requests, the guardrail, and `completed`
    (broken for a pruned trial, which also breaks every other, so all trials carry the
    same names, as GPSampler requires)."""
    names = obj.constraint_names(scenario.objective) + list(guardrail.constraints(None))
    if outcome.state == trial_mod.PRUNED:
        return dict.fromkeys([*names, "completed"], 1.0)
    return {**obj.constraints(outcome.summary, scenario.objective),
            **guardrail.constraints(outcome.quality), "completed": 0.0}


def run_one(study: optuna.Study, scenario: Scenario, model: str, trials_root: Path,
            guard: guardrail.Guard | None = None, runner: Runner = trial_mod.run
            ) -> TrialRecord:
    """Ask, run and tell one trial; a Ctrl-C marks it FAIL, queues it again and re-raises."""
    trial = study.ask()
    asked = TrialRecord.of(study.get_trials(deepcopy=False)[trial.number])
    base = asked.baseline_flags
    # Fixed engine flags hold for the baselines too (e.g. a deployment's max-model-len).
    flags = {**normalize(scenario.engine.flags), **normalize(base)} if base is not None \
        else space.suggest(trial, scenario)
    try:
        dup = _duplicate(study, flags, trial.number)
        if dup is not None:  # a rejected twin stays rejected
            outcome = trial_mod.Outcome(
                trial_mod.COMPLETE if dup.state == TrialState.COMPLETE else trial_mod.PRUNED,
                dup.reason, dup.metrics, {**record.copied(dup), "duplicate_of": dup.number},
                quality=dup.quality)
        else:
            log.info("trial %d: %s", trial.number, " ".join(trial_mod.command_line(model, flags)))
            outcome = runner(scenario, model, flags, trial_dir=trials_root / str(trial.number),
                             guard=guard,
                             intermediate=_pruner_hook(study, trial, scenario, base),
                             capacity_floor=None if base is not None
                             else capacity_floor(study, scenario))
    except KeyboardInterrupt:
        with no_interrupts():  # a further Ctrl-C must not leave the study half-written
            record.write(trial, outcome=record.INTERRUPTED, flags=flags)
            study.tell(trial, state=TrialState.FAIL)
            study.enqueue_trial(trial.params, user_attrs=record.queued_again(asked),
                                skip_if_exists=False)
        raise
    except Exception as err:
        # A fault of autotune's own (the configuration's faults are pruned outcomes): the
        # trial is FAIL with what happened, never left RUNNING. A bad input stops the
        # study; anything else is logged with its traceback and the study goes on.
        with no_interrupts():
            record.write(trial, outcome=record.ERROR, reason=type(err).__name__,
                         detail=str(err)[:2000], flags=flags)
            study.tell(trial, state=TrialState.FAIL)
        if isinstance(err, AutotuneError):
            raise
        log.exception("trial %d failed in autotune itself; the study goes on", trial.number)
    else:
        _tell(study, trial, scenario, outcome, guard, trials_root.parent)
    return TrialRecord.of(study.get_trials(deepcopy=False)[trial.number])


def _tell(study: optuna.Study, trial: optuna.Trial, scenario: Scenario,
          outcome: trial_mod.Outcome, guard: guardrail.Guard | None, study_dir: Path) -> None:
    """Write the outcome into the trial record and tell Optuna its state and values."""
    fields = {**outcome.attrs, "outcome": outcome.state, "reason": outcome.reason}
    if outcome.summary:  # pruned: e.g. what the probe phase saw before it stopped the trial
        fields["metrics"] = outcome.summary
    record.set_constraints(trial, _constraints(scenario, outcome))
    if outcome.state == trial_mod.PRUNED:
        record.write(trial, **fields)
        study.tell(trial, state=TrialState.PRUNED)
        return
    m = obj.measures(outcome.summary, scenario.objective)
    values = obj.values(m, reference(study), scenario.objective)
    if outcome.quality is not None:
        fields["quality"] = outcome.quality
    if outcome.new_reference is not None and guard is not None:
        guard.reference = outcome.new_reference
        path = guardrail.reference_path(scenario, study_dir)
        outcome.new_reference.save(path)
        study.set_user_attr("reference", {"path": str(path), "trial": trial.number})
    fields["measures"] = m.as_dict()
    if scenario.objective.mode == "weighted":
        fields["gain"] = obj.gain(values[0])
    record.write(trial, **fields)
    study.tell(trial, values)


def record_engine_defaults(study: optuna.Study, scenario: Scenario, info: Any) -> None:
    """Keep the installed engine's defaults of the flags this study sets, once."""
    if "engine_defaults" in study.user_attrs:
        return
    names = set(scenario.space) | set(normalize(scenario.engine.flags))
    for base in scenario.baselines:
        names |= set(normalize(base.flags))
    defaults = {n: info.flags[n].default for n in sorted(names)
                if n in info.flags and info.flags[n].default is not None}
    study.set_user_attr("engine_defaults", defaults)


def capacity_floor(study: optuna.Study, scenario: Scenario) -> float | None:
    """The best feasible trial's capacity lower bound (requests/s), below which a capacity
    search can stop: only where the objective is weighted and throughput counts."""
    if scenario.workload.mode != "capacity" or not scenario.prune.enabled \
            or not scenario.prune.capacity_early_stop or scenario.objective.mode != "weighted" \
            or not scenario.objective.weights.get("throughput"):
        return None
    lows = [capacity.interval(r.capacity)[0] for r in ranking.feasible(study) if r.capacity]
    return max(lows, default=None) or None


def loop(study: optuna.Study, scenario: Scenario, model: str, study_dir: Path, *,
         trials: int, timeout_s: float | None = None, guard: guardrail.Guard | None = None,
         runner: Runner = trial_mod.run, between: Callable[[], None] | None = None,
         on_progress: Callable[[Progress], None] | None = None,
         clock: Callable[[], float] = time.monotonic) -> None:
    """Run up to `trials` trials, never starting one that the time box cannot hold (the
    longest trial so far); `between` runs before each launch (e.g. wait for the GPU)."""
    t0 = clock()
    longest = 0.0
    for done in range(trials):
        elapsed = clock() - t0
        if timeout_s is not None and elapsed + longest > timeout_s:
            log.info("stopping: %.0f s left, a trial takes up to %.0f s",
                     timeout_s - elapsed, longest)
            break
        if _exhausted(study):
            log.info("stopping: every point of the grid has run")
            break
        if between is not None:
            between()
        start = clock()
        last = run_one(study, scenario, model, study_dir / "trials", guard, runner)
        longest = max(longest, clock() - start)
        if on_progress is not None:
            on_progress(Progress(done + 1, trials, clock() - t0, timeout_s, last,
                                 ranking.feasible_best(study)))


def tune(scenario: Scenario, scenario_path: str | Path, *, storage: str | None = None,
         trials: int | None = None, timeout_s: float | None = None,
         root: Path = Path("studies"),
         on_progress: Callable[[Progress], None] | None = None) -> optuna.Study:
    """Run up to `trials` more trials (or until `timeout_s`), resuming the study if it exists."""
    info = engine_info()
    space.check_against_engine(scenario, info, scenario_path)
    url = storage_url(scenario, storage, root)
    study = open_study(scenario, url)
    record_engine_defaults(study, scenario, info)
    if recovered := recover_interrupted(study, url):
        log.info("%d interrupted trial(s) will run again", recovered)
    study_dir = root / (scenario.name or "study")
    guard = guardrail.make_guard(scenario, study_dir)
    idle_mib = gpu.Monitor().used_mib()  # None without a GPU
    # The previous engine must have handed its GPU memory back before the next launch.
    loop(study, scenario, resolve_model(scenario), study_dir,
         trials=trials if trials is not None else scenario.budget.trials, timeout_s=timeout_s,
         guard=guard, on_progress=on_progress,
         between=lambda: prune.wait_gpu_released(idle_mib, scenario.prune.gpu_release_timeout_s))
    return study
