"""The study loop: ask -> run -> tell, one trial after another, resumable.

Each trial is asked of Optuna, run by `trial.run_trial` (or any function with its signature:
the seam tests give canned outcomes), and told back with its state, its values and its
named constraints; everything measured goes into the trial record (`writers.write`), so the
study database alone explains itself. The first trial is vLLM's defaults, and the weighted
score of every trial is relative to it (`ranking.reference_trial`).

Several workers can share one study (`--gpus`, or hosts on one PostgreSQL): the study is
created by exactly one of them, which queues vLLM's defaults; whoever finishes the defaults
queues the named baselines; heartbeats, re-queueing and the order workers keep are in
`autotune.tuning.sharing.heartbeat`. Creating the study and queueing its baselines is
`autotune.tuning.sharing.creation`'s, holding Ctrl-C during the writes
`autotune.tuning.interrupts`';
both are re-exported here (`study.open_study`, `study.no_interrupts`, ...).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune import _reasons as reasons
from autotune import tinymodel
from autotune._flags import Flags, FlagValue, normalize
from autotune.config import Scenario
from autotune.engine import gpu
from autotune.engine.info import engine_info
from autotune.errors import AutotuneError
from autotune.measure import capacityrecord, searchplan
from autotune.measure.measurement import Measurement
from autotune.stored import json_data
from autotune.tuning import ranking
from autotune.tuning import trial as trial_mod
from autotune.tuning.interrupts import (
    HeldInterrupts,
    interrupted,
    no_interrupts,
    raise_if_dropped,
    release_frames,
)
from autotune.tuning.policy import evidence, prune, relief, space
from autotune.tuning.policy import objective as obj
from autotune.tuning.quality import verdict
from autotune.tuning.quality.guard import Guard, make_guard
from autotune.tuning.quality.reference import reference_path
from autotune.tuning.records import studyrecord, writers
from autotune.tuning.records.measures import Measures
from autotune.tuning.records.progress import Progress
from autotune.tuning.records.sameengine import same_engine
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records
from autotune.tuning.records.studyrecord import StudyRecord
from autotune.tuning.records.trialrecord import ERROR, INTERRUPTED, TrialRecord
from autotune.tuning.sharing import creation, heartbeat
from autotune.tuning.sharing.creation import (  # noqa: F401 (the study's API, as before the split)
    BASELINES_QUEUED,
    DEFAULTS,
    REFERENCE_DATA,
    GridSearch,
    make_sampler,
    open_study,
    record_engine_defaults,
)
from autotune.tuning.sharing.storage import StudyLocation

log = logging.getLogger("autotune")
Runner = Callable[..., trial_mod.Outcome]  # `trial.run_trial`'s signature


def resolve_model(scenario: Scenario) -> str:
    return tinymodel.resolve(scenario.model.tiny, scenario.model.path)


@dataclass(frozen=True)
class RunContext:
    """One run of the loop as each of its trials sees it: the study as this worker shares it
    (`heartbeat.SharedStudy`: the study, the worker, its heartbeats), the scenario, the model
    as launched, the study's folder (each trial's files under `trials/`, the guardrail
    reference beside them), the guardrail (its reference filled in once a trial made it or
    the study had it), the runner (`trial.run_trial`, or the seam tests' canned one) and what
    runs before each launch (`before_launch`: the wait for the GPU). `tune` builds one per
    run, `explain` one for its ablations.

    What the study itself says (`StudyRecord`: the engine's defaults, the guardrail
    reference, the baselines queued) is not kept here: another worker may write it between
    two trials, so the loop reads it once per trial (`_run_asked`)."""

    shared: heartbeat.SharedStudy
    scenario: Scenario
    model: str
    folder: Path
    guard: Guard | None = None
    runner: Runner = trial_mod.run_trial
    before_launch: Callable[[], object] | None = None

    @property
    def study(self) -> optuna.Study:
        return self.shared.study

    @property
    def trials_dir(self) -> Path:
        """Where each trial keeps its files (`trials/N`)."""
        return self.folder / "trials"


def duplicate(now: Snapshot, flags: Mapping[str, FlagValue], number: int) -> TrialRecord | None:
    """A finished trial that ran the engine these flags would start (`sameengine.same_engine`,
    vLLM's recorded defaults filled in: a sampled default value is the defaults' engine)."""
    defaults = now.attrs.engine_defaults
    return next((r for r in records(now, (TrialState.COMPLETE, TrialState.PRUNED))
                 if r.number != number and same_engine(flags, r, defaults)), None)


def reference(study: StudyOrSnapshot) -> Measures | None:
    """The reference trial's measures (see `ranking.reference_trial`)."""
    r = ranking.reference_trial(study)
    return r.measures if r else None  # r has measures


def _pruner_hook(run: RunContext, trial: optuna.Trial, searched: bool
                 ) -> Callable[[Measurement], str | None] | None:
    """Report the probe phase's score so Optuna's pruner can stop a trial that is behind
    earlier ones at the same point (weighted mode; baselines always run to the end)."""
    scenario = run.scenario
    if scenario.objective.mode != "weighted" or not searched:
        return None

    def hook(partial: Measurement) -> str | None:
        ref = reference(run.study)
        if ref is None or not partial.completed:
            return None
        trial.report(obj.values(obj.measures(partial, scenario.objective), ref,
                                scenario.objective)[0], step=0)
        return prune.BEHIND if trial.should_prune() else None

    return hook


def _constraints(scenario: Scenario, outcome: trial_mod.Outcome) -> dict[str, float]:
    """Named constraints: the SLOs and failed requests, the guardrail, and `completed`
    (broken for a pruned trial, which also breaks every other, so all trials carry the
    same names, as GPSampler requires)."""
    names = obj.constraint_names(scenario.objective) + list(verdict.constraints(None))
    if outcome.state == trial_mod.PRUNED:
        return dict.fromkeys([*names, "completed"], 1.0)
    return {**obj.constraints(outcome.summary, scenario.objective),
            **verdict.constraints(outcome.quality), "completed": 0.0}


def run_one(run: RunContext) -> TrialRecord:
    """Ask, run and tell one trial, with its heartbeat; a Ctrl-C marks it FAIL, queues it
    again and re-raises (one that comes while the trial is being asked is held until the
    trial can be given back: a trial is never left RUNNING)."""
    hold = HeldInterrupts()
    try:
        trial = heartbeat.ask(run.study)
        with run.shared.heartbeat(trial.number):
            _run_asked(run, trial, hold)
    finally:
        hold.release()
    return TrialRecord.of(run.study.get_trials(deepcopy=False)[trial.number])


def _run_asked(run: RunContext, trial: optuna.Trial, hold: HeldInterrupts) -> None:
    """Run and tell an asked trial. The study's own attributes (`StudyRecord`) are read
    once for it, once vLLM's defaults are done, and carried through its steps (its twin,
    its copy, its first rate, its relief move): another worker may write them between two
    trials, not while one runs (the engine's defaults are kept before any loop starts; the
    baselines and the guardrail reference follow vLLM's defaults, waited for first).
    Where another worker may write meanwhile, the study is read again at that step: the
    guardrail reference a worker lacks (`sync_reference`), one a trial made
    (`result_of`), the baselines' queueing (`creation.queue_baselines`)."""
    study, scenario = run.study, run.scenario
    me = run.shared.worker
    asked = TrialRecord.of(study.get_trials(deepcopy=False)[trial.number])
    # Flags fixed when it was queued: a baseline's, or a relief move the space cannot
    # express as parameters (which, unlike a baseline, is pruned like any searched trial).
    base = asked.baseline_flags
    searched = asked.baseline is None
    flags: Flags | None = None
    try:
        hold.release()  # a Ctrl-C held since `ask` is raised here, where the trial goes back
        raise_if_dropped()  # as is one Python dropped before this trial started
        # Fixed engine flags hold for the baselines too (e.g. a deployment's max-model-len).
        flags = {**scenario.engine.flags, **normalize(base)} if base is not None \
            else space.suggest(trial, scenario)
        # Announced before anything waits or launches: the flags, why it is tried, then the
        # worker (other workers read a trial with a worker as one whose flags are known).
        writers.write(trial, flags=flags, origin=asked.tried_because.as_dict(),
                      worker=json_data(me))
        if not asked.is_defaults and not _after_defaults(run.shared):
            _give_back(study, trial, asked, flags, reasons.DEFAULTS_FIRST,
                       "vLLM's defaults are queued and must run first")
            return
        attrs = StudyRecord.of(study)  # once for this trial
        if not asked.is_defaults:
            run.shared.wait_for_twin(flags, trial.number, defaults=attrs.engine_defaults)
            sync_reference(run)
        now = Snapshot.of(study, attrs)  # the trials as they stand before it launches
        dup = duplicate(now, flags, trial.number)
        best = best_interval(now, scenario) if searched else None
        doomed = evidence.predicted_loser(flags, records(now), ranking.feasible_best(now)) \
            if best is not None else None
        if doomed is not None:  # the study's own evidence ranks it below the best
            log.info("trial %d not launched: %s", trial.number, doomed)
            outcome = trial_mod.Outcome(trial_mod.PRUNED, reasons.PREDICTED_BELOW_BEST,
                                        facts=trial_mod.EngineRun(flags, launched=False,
                                                                  detail=doomed))
        elif dup is not None:  # a rejected twin stays rejected
            outcome = trial_mod.Outcome(
                trial_mod.COMPLETE if dup.state == TrialState.COMPLETE else trial_mod.PRUNED,
                dup.reason, dup.metrics,
                # what ran is the twin's engine; the flags stay this trial's own
                dataclasses.replace(trial_mod.EngineRun.of_record(dup, dup.number),
                                    flags=flags),
                quality=dup.quality)
        else:
            log.info("trial %d: %s", trial.number,
                     " ".join(trial_mod.command_line(run.model, flags)))
            # A searched trial's burst stops a clear loser within seconds; its first
            # sustained step then runs at the best's lower bound: a loser fails there and is
            # pruned at once. A pass is followed by a step at the best's upper bound: a fail
            # there is a proven tie and ends the search; a pass searches upward from it.
            anchor = searchplan.Anchor(burst=True) if best is None else searchplan.Anchor(
                floor=best[0], start=best[0], burst=True, ceiling=best[1])
            outcome = run.runner(scenario, run.model, flags,
                                 trial_dir=run.trials_dir / str(trial.number),
                                 guard=run.guard, intermediate=_pruner_hook(run, trial, searched),
                                 anchor=anchor)
    except KeyboardInterrupt as err:
        _give_back_interrupted(run, trial, asked, flags, err)
        raise
    except Exception as err:
        if interrupted(err):  # a Ctrl-C that a database call re-raised as its own error
            _give_back_interrupted(run, trial, asked, flags, err)
            raise KeyboardInterrupt from err
        # A fault of autotune's own (the configuration's faults are pruned outcomes): the
        # trial is FAIL with what happened, never left RUNNING. A bad input stops the
        # study; anything else is logged with its traceback and the study goes on.
        with no_interrupts():
            writers.write(trial, outcome=ERROR, reason=type(err).__name__,
                          detail=str(err)[:2000], **({"flags": flags} if flags else {}))
            study.tell(trial, state=TrialState.FAIL)
            if asked.is_defaults:
                creation.queue_baselines(study, scenario)
        if isinstance(err, AutotuneError):
            raise
        log.exception("trial %d failed in autotune itself; the study goes on", trial.number)
    else:
        _tell(run, trial, outcome)
        if asked.is_defaults:
            creation.queue_baselines(study, scenario)
        _relieve(run, trial.number, attrs)


def _give_back_interrupted(run: RunContext, trial: optuna.Trial, asked: TrialRecord,
                           flags: Flags | None, err: BaseException) -> None:
    """An interrupted trial goes back to the queue with the flags it was running (its
    point drawn now if it had none yet, so that the same one runs again)."""
    release_frames(err)  # a database connection it interrupted
    with no_interrupts():  # a further Ctrl-C must not leave the study half-written
        if flags is None and asked.baseline_flags is None:
            flags = space.suggest(trial, run.scenario)
        _give_back(run.study, trial, asked, flags, None, None)


def _give_back(study: optuna.Study, trial: optuna.Trial, asked: TrialRecord,
               flags: Flags | None, reason: str | None, detail: str | None) -> None:
    """The trial is FAIL `interrupted` and its configuration goes back into the queue: queued
    first, then failed, so that other workers always find it in one place or the other."""
    fields: dict[str, object] = {"outcome": INTERRUPTED}
    if flags is not None:
        fields["flags"] = flags
    if reason:
        fields.update(reason=reason, detail=detail)
    writers.write(trial, **fields)
    study.enqueue_trial(trial.params, user_attrs=writers.queued_again(asked),
                        skip_if_exists=False)
    study.tell(trial, state=TrialState.FAIL)


def _after_defaults(shared: heartbeat.SharedStudy) -> bool:
    """Wait while vLLM's defaults run on another worker; False when they are queued and
    nobody runs them (this trial then goes back into the queue: the defaults come first)."""
    while True:
        state, _ = heartbeat.defaults_state(shared.study)
        if state == heartbeat.DONE:
            return True
        if state == heartbeat.QUEUED:
            return False
        shared.wait_for_defaults()


def sync_reference(run: RunContext) -> None:
    """A worker without the guardrail's reference takes the study's, made meanwhile by the
    defaults trial on another worker or host: written where this host keeps it, and loaded
    as `make_guard` loads any reference. With none in the study, this trial makes it (the
    defaults did not run). The study is read here, not with the trial's other attributes:
    the trial may have waited for a twin meanwhile, whose worker may have made it."""
    guard = run.guard
    if guard is None or guard.reference is not None:
        return
    data = StudyRecord.of(run.study).reference_data
    path = reference_path(run.scenario, run.folder)
    if data is None and not path.exists():
        return
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, ensure_ascii=False))
    fresh = make_guard(run.scenario, run.folder)
    guard.reference = fresh.reference if fresh is not None else None


def _publish_reference(run: RunContext) -> None:
    """Keep the reference this worker loaded in the study too, for workers on other hosts."""
    guard = run.guard
    if guard is None or guard.reference is None \
            or StudyRecord.of(run.study).reference_data is not None:
        return
    path = reference_path(run.scenario, run.folder)
    if path.exists():
        studyrecord.set_reference_data(run.study, json.loads(path.read_text()))


@dataclass(frozen=True)
class TrialResult:
    """What a trial's outcome tells the study: its state, values, named constraints and
    record fields (`result_of`); `_tell` gives them to a running trial, `writers.append` to
    a trial measured outside the queue."""

    state: TrialState
    values: list[float] | None
    constraints: dict[str, float]
    fields: dict[str, object]


def result_of(run: RunContext, outcome: trial_mod.Outcome, number: int) -> TrialResult:
    """The record fields, constraints and values of trial `number`'s outcome; a new
    guardrail reference is kept with the study here, once: the study is read again for it,
    since another worker's trial may have made one while this one ran (then that one
    stays)."""
    study, scenario, guard = run.study, run.scenario, run.guard
    fields = {**outcome.facts.fields(), "outcome": outcome.state, "reason": outcome.reason}
    if outcome.summary:  # pruned: e.g. what the probe phase saw before it stopped the trial
        fields["metrics"] = outcome.summary
    constraints = _constraints(scenario, outcome)
    if outcome.state == trial_mod.PRUNED:
        return TrialResult(TrialState.PRUNED, None, constraints, fields)
    m = obj.measures(outcome.summary, scenario.objective)
    values = obj.values(m, reference(study), scenario.objective)
    if outcome.quality is not None:
        fields["quality"] = outcome.quality
    if outcome.new_reference is not None and guard is not None:
        made = StudyRecord.of(study).reference
        if made is None:
            guard.reference = outcome.new_reference
            path = reference_path(scenario, run.folder)
            outcome.new_reference.save(path)
            studyrecord.set_reference(study, str(path), number)
            # its JSON data as `save` wrote it, for workers on other hosts
            studyrecord.set_reference_data(study, dataclasses.asdict(outcome.new_reference))
        else:  # only where the defaults could not run and two trials raced to make one
            log.warning("trial %d made a guardrail reference, but trial %s's is the study's",
                        number, made.get("trial"))
    fields["measures"] = m.as_dict()
    if scenario.objective.mode == "weighted":
        fields["gain"] = obj.gain(values[0])
    return TrialResult(TrialState.COMPLETE, list(values), constraints, fields)


def _tell(run: RunContext, trial: optuna.Trial, outcome: trial_mod.Outcome) -> None:
    """Write the outcome into the trial record and tell Optuna its state and values."""
    result = result_of(run, outcome, trial.number)
    writers.set_constraints(trial, result.constraints)
    writers.write(trial, **result.fields)
    if result.state == TrialState.PRUNED:
        run.study.tell(trial, state=TrialState.PRUNED)
    else:
        run.study.tell(trial, result.values)


def _relieve(run: RunContext, number: int, attrs: StudyRecord) -> None:
    """Queue the relief move of the best trial's bottleneck (or of trial `number`'s, just
    finished), where the scenario wants them and one is due (`relief.due`); `attrs`, the
    study's attributes as the trial read them."""
    scenario = run.scenario
    spec = scenario.relief
    if not spec.enabled or scenario.sampler.name == "grid":
        return
    now = Snapshot.of(run.study, attrs)  # the trials as they stand, this one told
    recs = records(now)
    if not relief.due(recs, spec.every):
        return
    best = ranking.feasible_best(now)
    just = next(r for r in recs if r.number == number)
    move = relief.propose(recs, scenario, attrs.engine_defaults or {},
                          [r for r in (best, just) if r is not None])
    if move is None:
        return
    run.study.enqueue_trial(move.params or {}, skip_if_exists=False,
                            user_attrs=writers.queued_move(
                                None if move.params is not None else move.flags,
                                move.origin.as_dict()))
    log.info("queued a relief move: %s", move.describe())


def best_interval(study: StudyOrSnapshot, scenario: Scenario) -> tuple[float, float] | None:
    """The interval (requests/s) of the leader the study's winner was chosen against
    (`ranking.standing`: the highest capacity sure enough to rank by), which a capacity
    search can stop below or be tied inside; not in a Pareto study, which has no single
    winner."""
    if scenario.workload.mode != "capacity" or not scenario.prune.enabled \
            or not scenario.prune.capacity_early_stop or scenario.objective.mode != "weighted":
        return None
    leader = ranking.standing(study).leader
    best = capacityrecord.interval(leader.capacity) \
        if leader is not None and leader.capacity is not None else None
    return best if best is not None and best[0] > 0 else None


def loop(run: RunContext, *, trials: int, timeout_s: float | None = None,
         claim: Callable[[], bool] | None = None,
         on_progress: Callable[[Progress], None] | None = None,
         clock: Callable[[], float] = time.monotonic) -> None:
    """Run up to `trials` trials, never starting one that the time box cannot hold (the
    longest trial so far); `run.before_launch` runs before each launch (e.g. wait for the
    GPU), and `claim` (workers of one `--gpus` run) takes one of the run's trials, False
    when none is left. Before each trial, trials of dead workers are queued again and,
    while vLLM's defaults run on another worker, this one waits."""
    study, shared = run.study, run.shared
    t0 = clock()
    longest = 0.0
    done = 0
    while done < trials:
        shared.recover()
        shared.wait_for_defaults()
        elapsed = clock() - t0
        if timeout_s is not None and elapsed + longest > timeout_s:
            log.info("stopping: %.0f s left, a trial takes up to %.0f s",
                     timeout_s - elapsed, longest)
            break
        if creation.exhausted(study):
            log.info("stopping: every point of the grid has run")
            break
        if claim is not None and not claim():
            log.info("stopping: the run's trials are all taken")
            break
        if run.before_launch is not None:
            run.before_launch()
        start = clock()
        last = run_one(run)
        done += 1
        longest = max(longest, clock() - start)
        if on_progress is not None:
            on_progress(Progress(done, trials, clock() - t0, timeout_s, last,
                                 ranking.feasible_best(study), ranking.reference_trial(study)))


@dataclass(frozen=True)
class Request:
    """One `tune` run as the command line resolved it (`autotune.cli._tune`): the scenario
    (checked against the engine), where the study lives, how many trials and how long, and
    as which worker; `claim` takes one of a `--gpus` run's shared trials. `tune` resolves
    nothing of it again."""

    scenario: Scenario
    location: StudyLocation
    trials: int
    timeout_s: float | None
    worker: heartbeat.Worker
    claim: Callable[[], bool] | None = None


def tune(request: Request, *, on_progress: Callable[[Progress], None] | None = None,
         runner: Runner | None = None) -> optuna.Study:
    """Run up to `request.trials` more trials (or until its timeout), resuming the study
    if it exists; as its worker when several share the study.

    Args:
        request: the scenario, where the study lives, how many trials, the time allowed,
            this worker and (for `tune --gpus`) how trials are claimed.
        on_progress: called after every trial with the study's `Progress`.
        runner: what runs one trial (default `trial.run_trial`; tests pass their own).

    Returns:
        The Optuna study, every trial of this run stored in it.

    Raises:
        ConfigError: the scenario, the storage or the installed engine refuses the study
            before a trial runs (one line, the CLI's exit code 2).
    """
    scenario, where = request.scenario, request.location
    shared = open_study(scenario, where.url, worker=request.worker)
    record_engine_defaults(shared.study, scenario, engine_info())
    if recovered := shared.recover():
        log.info("%d interrupted trial(s) will run again", recovered)
    run = RunContext(shared, trial_mod.with_study_folder(scenario, where.folder),
                     resolve_model(scenario), where.folder, make_guard(scenario, where.folder),
                     runner or trial_mod.run_trial, gpu_released(scenario))
    _publish_reference(run)
    loop(run, trials=request.trials, timeout_s=request.timeout_s, claim=request.claim,
         on_progress=on_progress)
    return shared.study


def gpu_released(scenario: Scenario) -> Callable[[], object]:
    """What runs before each launch: the previous engine must have handed its GPU memory
    back (to what is in use now, before any engine of this run; nothing without a GPU)."""
    idle_mib = gpu.Monitor().used_mib()  # None without a GPU
    return lambda: prune.wait_gpu_released(idle_mib, scenario.prune.gpu_release_timeout_s)
