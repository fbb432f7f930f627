"""Check that a tuned configuration's gain holds: paired, alternating re-runs with a CI.

One tuning run per configuration cannot tell a real gain from a lucky start-up. `validate`
launches baseline and candidate K times each, alternating, each a fresh engine with the
study's own scenario, and reports candidate/baseline over the K pairs with a 95 % interval
(`autotune.verify.pairstats`), kept with the study (`studyrecord.store_validation`) for
`show`, `export` and `report`. `validate --client vllm` (`autotune.verify.crosscheck`)
re-measures capacity with `vllm bench serve` instead.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune._remeasurements import PairRun, Ratio, Validation
from autotune.config import Objective, Scenario, latency_key
from autotune.engine import gpu
from autotune.errors import AutotuneError, ConfigError
from autotune.stored import json_data
from autotune.tuning import ranking
from autotune.tuning import study as study_mod
from autotune.tuning import trial as trial_mod
from autotune.tuning.policy import objective as obj
from autotune.tuning.policy import prune
from autotune.tuning.records import studyrecord
from autotune.tuning.records.measures import Measures
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.studyrecord import VALIDATION, StudyRecord
from autotune.tuning.records.trialrecord import TrialRecord
from autotune.verify import _pairloop as pairloop
from autotune.verify import pairstats

ROLES = ("baseline", "candidate")


class ValidationRunFailed(AutotuneError):
    """A re-run of a configuration that had completed did not complete this time."""


def schedule(repeats: int) -> list[tuple[int, str]]:
    """(pair, role) in launch order: baseline then candidate, `repeats` times, so slow drifts
    of the machine (heat, page cache, other load) hit both sides alike."""
    return [(pair, role) for pair in range(repeats) for role in ROLES]


def pick(study: optuna.Study, *, trial: int | None = None, policy: str = "balanced",
         against: int | None = None) -> tuple[TrialRecord, TrialRecord]:
    """(candidate, baseline): a feasible trial (`export`'s choice by default) and the
    vLLM-defaults trial or `against`."""
    if trial is None and not ranking.feasible(study):
        raise ConfigError("validate: the study has no feasible completed trial to validate")
    cand = ranking.choose(study, trial=trial, policy=policy, what="validate")
    trials = records(study)
    base: TrialRecord | None
    if against is not None:
        if not 0 <= against < len(trials):
            raise ConfigError(f"validate: no trial {against} (the study has {len(trials)})")
        base = trials[against]
        if base.state != TrialState.COMPLETE:
            raise ConfigError(f"validate: trial {against} cannot be the baseline: it never "
                              f"completed ({ranking.state_text(base)})")
    else:
        base = next((r for r in trials if r.state == TrialState.COMPLETE and r.is_defaults),
                    None)
        if base is None:
            raise ConfigError("validate: the study has no completed vLLM-defaults trial; "
                              "choose a baseline with --against N")
    for r in (cand, base):
        if not r.command and not r.flags and not r.is_defaults:
            raise ConfigError(f"validate: trial {r.number} has no recorded flags")
    return cand, base


def scenario_of(study: optuna.Study) -> Scenario:
    """The scenario the study was tuned with, as `tune` stored it."""
    stored = StudyRecord.of(study).scenario
    if stored.problem is not None:
        raise ConfigError(f"validate: the stored scenario no longer validates: "
                          f"{stored.problem}")
    if stored.scenario is None:
        raise ConfigError(f"validate: study {study.study_name} has no stored scenario")
    return stored.scenario


def summarize(runs: Sequence[PairRun], objective: Objective) -> Validation:
    """Gain and CI per metric from the runs' figures (pure: runs in, numbers out).

    Ratios are candidate/baseline; the headline `gain` is relative and "higher is
    better": exp(mean weighted score) - 1 in weighted mode, else throughput - 1.
    """
    base = sorted((r for r in runs if r.role == "baseline"), key=lambda r: r.pair)
    cand = sorted((r for r in runs if r.role == "candidate"), key=lambda r: r.pair)
    if not base or len(base) != len(cand):
        raise ValueError("validation needs one baseline and one candidate run per pair")
    per_metric: dict[str, Ratio] = {}
    figures: tuple[tuple[str, str, str, Callable[[PairRun], float | None]], ...] = (
        ("throughput", objective.throughput, "higher", lambda r: r.throughput),
        ("latency_ms", latency_key(objective.latency), "lower", lambda r: r.latency_ms),
        ("memory_mib", "memory_mib", "lower", lambda r: r.memory_mib))
    for name, key, better, of in figures:
        logs = pairstats.log_ratios([of(r) for r in cand], [of(r) for r in base])
        if logs is not None:
            per_metric[name] = replace(pairstats.ratio(logs, better), key=key,
                                       baseline_mean=_mean([of(r) for r in base]),
                                       candidate_mean=_mean([of(r) for r in cand]))
    if objective.mode == "weighted":
        scores = [obj.weighted_score(_measures(c), _measures(b), objective.weights)
                  for c, b in zip(cand, base, strict=True)]
        iv = pairstats.log_interval(scores)
        per_metric["score"] = Ratio(key="weighted score", mean=iv.mean, ci_low=iv.low,
                                    ci_high=iv.high, better="higher")
        head, metric = pairstats.gain(scores), "weighted score"
    else:
        logs = pairstats.log_ratios([r.throughput for r in cand], [r.throughput for r in base])
        if logs is None:
            raise ValueError("a run has no positive throughput")
        head, metric = pairstats.gain(logs), objective.throughput
    return replace(head, metric=metric, per_metric=per_metric)


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _measures(run: PairRun) -> Measures:
    return Measures(run.throughput if run.throughput is not None else math.nan,
                        run.latency_ms if run.latency_ms is not None else math.nan,
                        run.memory_mib)


def run_validation(study: optuna.Study, candidate: TrialRecord, against: TrialRecord,
                   repeats: int, out_dir: Path,
                   on_run: Callable[[int, int, PairRun], None] | None = None
                   ) -> Validation:
    """Launch both configurations `repeats` times each, alternating; store and return the
    validation. Nothing is written to the study unless every run completed."""
    if repeats < 1:
        raise ConfigError(f"validate: --repeats must be at least 1 (got {repeats})")
    scenario = scenario_of(study)
    # Same workload, objective, env and hardware emulation as the study; no probe phase
    # (its rules must not stop a validation run) and no guardrail (quality was checked).
    runs_scenario = trial_mod.with_study_folder(scenario.model_copy(
        update={"prune": scenario.prune.model_copy(update={"enabled": False})}), out_dir)
    model = study_mod.resolve_model(scenario)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    where = out_dir / "validate" / f"{candidate.number}-vs-{against.number}-{stamp}"
    idle_mib = gpu.Monitor().used_mib()  # None without a GPU
    seen: list[trial_mod.EngineRun] = []  # the last run's engine and device, for the record

    def measure(run: pairloop.Run) -> PairRun:
        outcome = trial_mod.run_trial(runs_scenario, model, dict(run.trial.flags),
                                      trial_dir=where / f"{run.index:02d}-{run.role}")
        if outcome.state != trial_mod.COMPLETE:
            raise ValidationRunFailed(
                f"validate: run {run.index} ({run.role}, trial #{run.trial.number}) did not "
                f"complete: {outcome.reason} {outcome.facts.detail or ''}".rstrip()
                + f"; log {outcome.facts.log_path}")
        seen[:] = [outcome.facts]
        m = obj.measures(outcome.summary, scenario.objective)
        return PairRun(throughput=m.throughput, latency_ms=m.latency_ms,
                       memory_mib=m.memory_mib, failed=outcome.summary.failed,
                       startup_s=(outcome.facts.timings or {}).get("startup_s"),
                       log_path=outcome.facts.log_path)

    runs = pairloop.run_pairs(
        schedule(repeats), candidate, against, measure, on_run=on_run,
        wait=lambda _: prune.wait_gpu_released(idle_mib, scenario.prune.gpu_release_timeout_s))
    result = replace(summarize(runs, scenario.objective), repeats=repeats,
                     against=against.number, candidate=candidate.number, runs=tuple(runs),
                     engine_version=seen[-1].engine_version, device=seen[-1].device,
                     order="alternating, baseline first", dir=str(where),
                     when=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    result = replace(result, verdict=result.word())
    with study_mod.no_interrupts():  # a Ctrl-C now must not lose K pairs of engine runs
        studyrecord.store_validation(study, candidate.number, VALIDATION, json_data(result))
    return result
