"""The Optuna study: storage, baselines first, the ask/tell loop, resume.

Each trial is asked of Optuna, run by `trial.run`, and told back with its
state; everything measured goes into the trial's user attributes, so the study
database alone explains itself. The first trial is vLLM's defaults, and the
weighted score of every trial is relative to it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import tinymodel
from autotune.config import Scenario
from autotune.engine import gpu
from autotune.engine.info import engine_info
from autotune.errors import ConfigError
from autotune.flags import normalize
from autotune.measure import capacity
from autotune.tuning import guardrail, prune, space
from autotune.tuning import objective as obj
from autotune.tuning import trial as trial_mod

log = logging.getLogger("autotune")
DEFAULTS = "vllm-defaults"
# Optuna 5 deprecates `constraints_func` for `Trial.set_constraint`, which only the
# ask-and-tell path could use before `tell`; the samplers still honour it until Optuna 7.
warnings.filterwarnings("ignore", message=r"`constraints_func` has been deprecated",
                        category=FutureWarning)


@dataclass
class Progress:
    """What the live view shows after each trial."""

    done: int
    planned: int
    elapsed_s: float
    deadline_s: float | None
    last: FrozenTrial | None
    best: FrozenTrial | None


def storage_url(scenario: Scenario, storage: str | None, root: Path) -> str:
    if storage:
        return storage
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / (scenario.name or 'study')}.db"


def _constraints(t: FrozenTrial) -> list[float]:
    return list(t.user_attrs.get("constraints") or [0.0])


def make_sampler(scenario: Scenario) -> optuna.samplers.BaseSampler:
    s = scenario.sampler
    if s.name == "tpe":
        return optuna.samplers.TPESampler(seed=s.seed, constraints_func=_constraints)
    if s.name == "gp":
        return optuna.samplers.GPSampler(seed=s.seed, constraints_func=_constraints)
    if s.name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=s.seed, constraints_func=_constraints)
    if s.name == "grid":
        return optuna.samplers.GridSampler(space.grid(scenario), seed=s.seed)
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
        study.enqueue_trial({}, user_attrs={"baseline": DEFAULTS, "baseline_flags": {}})
        for base in scenario.baselines:
            study.enqueue_trial({}, user_attrs={"baseline": base.name,
                                                "baseline_flags": normalize(base.flags)})
        study.set_user_attr("baselines_enqueued", True)
        study.set_user_attr("scenario", scenario.model_dump(mode="json"))
    return study


def recover_interrupted(study: optuna.Study, url: str) -> int:
    """Trials left RUNNING by a killed tuner become FAIL and run again (SQLite: one worker)."""
    if not url.startswith("sqlite"):
        return 0
    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for t in stale:
        study.tell(t.number, state=TrialState.FAIL)
        _requeue(study, t)
    return len(stale)


def _requeue(study: optuna.Study, t: FrozenTrial) -> None:
    attrs = {k: v for k, v in t.user_attrs.items() if k in ("baseline", "baseline_flags")}
    study.enqueue_trial(t.params, user_attrs=attrs, skip_if_exists=False)


def resolve_model(scenario: Scenario) -> str:
    if scenario.model.tiny:
        return str(tinymodel.build(preset=scenario.model.tiny).path)
    return str(scenario.model.path)


def _key(flags: dict[str, Any]) -> str:
    return json.dumps(normalize(flags), sort_keys=True, default=str)


def _duplicate(study: optuna.Study, flags: dict[str, Any], number: int) -> FrozenTrial | None:
    key = _key(flags)
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        if t.number != number and _key(t.user_attrs.get("flags") or {}) == key:
            return t
    return None


def reference_trial(study: optuna.Study) -> FrozenTrial | None:
    """The trial scores are relative to: vLLM's defaults, else the first completed trial
    (on a 24 GB card the defaults' max-model-len does not fit, and they never run)."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    trials.sort(key=lambda t: (t.user_attrs.get("baseline") != DEFAULTS, t.number))
    return next((t for t in trials if "measures" in t.user_attrs), None)


def reference(study: optuna.Study, scenario: Scenario) -> obj.Measures | None:
    """The reference trial's measures (see `reference_trial`)."""
    t = reference_trial(study)
    return obj.Measures(**t.user_attrs["measures"]) if t else None


def reference_name(study: optuna.Study) -> str:
    """What gains are over, for display: "vLLM defaults" or the trial standing in for them."""
    t = reference_trial(study)
    if t is None or t.user_attrs.get("baseline") == DEFAULTS:
        return "vLLM defaults"
    return f"{t.user_attrs.get('baseline') or 'trial'} #{t.number} (vLLM defaults did not run)"


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
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
        ref = reference(study, scenario)
        if ref is None or not partial.get("completed"):
            return None
        trial.report(obj.values(obj.measures(partial, scenario.objective), ref,
                                scenario.objective)[0], step=0)
        return prune.BEHIND if trial.should_prune() else None

    return hook


def run_one(study: optuna.Study, scenario: Scenario, model: str, trials_root: Path,
            guard: trial_mod.Guard | None = None) -> FrozenTrial:
    """Ask, run and tell one trial; a Ctrl-C marks it FAIL, queues it again and re-raises."""
    trial = study.ask()
    base = trial.user_attrs.get("baseline_flags")
    # Fixed engine flags hold for the baselines too (e.g. a deployment's max-model-len).
    flags = {**normalize(scenario.engine.flags), **normalize(base)} if base is not None \
        else space.suggest(trial, scenario)
    n_constraints = len(scenario.objective.slos) + 4  # SLOs, failures, 2 guardrail, start
    try:
        dup = _duplicate(study, flags, trial.number)
        if dup is not None:
            outcome = trial_mod.Outcome(
                trial_mod.COMPLETE if dup.state == TrialState.COMPLETE else trial_mod.PRUNED,
                dup.user_attrs.get("reason", ""), dup.user_attrs.get("metrics", {}),
                {k: v for k, v in dup.user_attrs.items() if k not in ("baseline",)},
                quality=dup.user_attrs.get("quality"))  # a rejected twin stays rejected
            outcome.attrs["duplicate_of"] = dup.number
        else:
            log.info("trial %d: %s", trial.number, " ".join(trial_mod.command_line(model, flags)))
            outcome = trial_mod.run(scenario, model, flags, trial_dir=trials_root /
                                    str(trial.number), guard=guard,
                                    intermediate=_pruner_hook(study, trial, scenario, base),
                                    capacity_floor=None if base is not None
                                    else capacity_floor(study, scenario))
    except KeyboardInterrupt:
        with _no_interrupts():  # a further Ctrl-C must not leave the study half-written
            trial.set_user_attr("outcome", "interrupted")
            study.tell(trial, state=TrialState.FAIL)
            _requeue(study, study.get_trials(deepcopy=False)[trial.number])
        raise
    for k, v in outcome.attrs.items():
        trial.set_user_attr(k, v)
    trial.set_user_attr("outcome", outcome.state)
    trial.set_user_attr("reason", outcome.reason)
    if outcome.state == trial_mod.PRUNED:
        if outcome.summary:  # e.g. what the probe phase saw before it stopped the trial
            trial.set_user_attr("metrics", outcome.summary)
        trial.set_user_attr("constraints", [1.0] * n_constraints)
        study.tell(trial, state=TrialState.PRUNED)
    else:
        m = obj.measures(outcome.summary, scenario.objective)
        base_m = reference(study, scenario)
        values = obj.values(m, base_m, scenario.objective)
        constraints = obj.constraints(outcome.summary, scenario.objective) \
            + guardrail.constraints(outcome.quality) + [0.0]
        if outcome.quality is not None:
            trial.set_user_attr("quality", outcome.quality)
        if outcome.new_reference is not None and guard is not None:
            guard.reference = outcome.new_reference
            path = reference_path(scenario, trials_root.parent)
            outcome.new_reference.save(path)
            study.set_user_attr("reference", {"path": str(path), "trial": trial.number})
        trial.set_user_attr("metrics", outcome.summary)
        trial.set_user_attr("measures", m.as_dict())
        trial.set_user_attr("constraints", constraints)
        trial.set_user_attr("feasible", all(c <= 0 for c in constraints))
        if scenario.objective.mode == "weighted":
            trial.set_user_attr("gain", obj.gain(values[0]))
        study.tell(trial, values)
    return study.get_trials(deepcopy=False)[trial.number]


def reference_path(scenario: Scenario, study_dir: Path) -> Path:
    """Where the guardrail's reference lives: the scenario's file, else the study's folder."""
    return Path(scenario.guardrail.reference) if scenario.guardrail.reference \
        else study_dir / "reference.json"


def make_guard(scenario: Scenario, study_dir: Path) -> trial_mod.Guard | None:
    """The guardrail for this run: an existing reference is reused, else the first
    completed trial (vLLM's defaults) makes it."""
    spec = scenario.guardrail
    if not spec.enabled:
        return None
    try:
        prompts = guardrail.read_prompts(spec.prompts, spec.num_prompts)
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"guardrail.prompts: cannot read {spec.prompts}: {err}") from None
    path = reference_path(scenario, study_dir)
    reference = None
    if spec.prompts and not path.exists():
        from autotune.measure.workloads import Tokenizer

        reference = guardrail.expected_reference(
            spec.prompts, spec.num_prompts, spec.max_tokens, Tokenizer(resolve_model(scenario)),
            {"model": resolve_model(scenario)})
        if reference is not None:
            reference.thresholds = guardrail.thresholds(
                reference.noise, spec.noise_factor, spec.drift_threshold,
                spec.agreement_threshold)
            reference.save(path)
    if path.exists() and reference is None:
        try:
            reference = guardrail.Reference.load(path)
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise ConfigError(f"guardrail.reference: {path} is not a reference: {err}") from None
        if reference.prompts != prompts or reference.max_tokens != spec.max_tokens:
            raise ConfigError(f"guardrail.reference: {path} was made with other prompts or "
                              "max_tokens; remove it or point `reference` elsewhere")
        reference.thresholds = guardrail.thresholds(
            reference.noise, spec.noise_factor, spec.drift_threshold, spec.agreement_threshold)
        log.info("guardrail: reusing the reference in %s", path)
    return trial_mod.Guard(spec, prompts, reference)


def fixed_flags(study: optuna.Study) -> dict[str, Any]:
    """The scenario's fixed engine flags (set for every trial, so not an override)."""
    return normalize(((study.user_attrs.get("scenario") or {}).get("engine") or {})
                     .get("flags") or {})


def not_overrides(study: optuna.Study) -> dict[str, Any]:
    """Flag values that do not count as overriding vLLM's defaults: the engine parser's own
    defaults (recorded when the study started) and the scenario's fixed flags."""
    return {**(study.user_attrs.get("engine_defaults") or {}), **fixed_flags(study)}


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


def feasible_best(study: optuna.Study) -> FrozenTrial | None:
    """The best feasible completed trial (weighted mode); None if there is none. Capacities
    within each other's noise are ties, won by the configuration with fewer overrides."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("feasible") and len(t.values or []) == 1]
    return capacity.pick(done, lambda t: t.values[0], not_overrides(study))


def capacity_floor(study: optuna.Study, scenario: Scenario) -> float | None:
    """The best feasible trial's capacity lower bound (requests/s), below which a capacity
    search can stop: only where the objective is weighted and throughput counts."""
    if scenario.workload.mode != "capacity" or not scenario.prune.enabled \
            or not scenario.prune.capacity_early_stop or scenario.objective.mode != "weighted" \
            or not scenario.objective.weights.get("throughput"):
        return None
    lows = [capacity.interval(c)[0] for t in study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("feasible") and (c := capacity.of(t))]
    return max(lows, default=None) or None


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
    model = resolve_model(scenario)
    trials_root = root / (scenario.name or "study") / "trials"
    guard = make_guard(scenario, trials_root.parent)
    idle_mib = gpu.Monitor().used_mib()  # None without a GPU
    planned = trials if trials is not None else scenario.budget.trials
    t0 = time.monotonic()
    longest = 0.0
    last = None
    for done in range(planned):
        elapsed = time.monotonic() - t0
        # Never start a trial that the time box cannot hold (the longest one so far).
        if timeout_s is not None and elapsed + longest > timeout_s:
            log.info("stopping: %.0f s left, a trial takes up to %.0f s",
                     timeout_s - elapsed, longest)
            break
        # The previous engine must have handed its GPU memory back before the next launch.
        prune.wait_gpu_released(idle_mib, scenario.prune.gpu_release_timeout_s)
        start = time.monotonic()
        last = run_one(study, scenario, model, trials_root, guard)
        longest = max(longest, time.monotonic() - start)
        if on_progress is not None:
            on_progress(Progress(done + 1, planned, time.monotonic() - t0, timeout_s, last,
                                 feasible_best(study)))
    return study
