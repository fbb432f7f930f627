"""`autotune validate --client vllm`: re-measure a gain with `vllm bench serve`.

A study ranks configurations with autotune's own load generator. Before a gain is
quoted, the candidate and the baseline are launched again, alternating, each on a
fresh engine started as the study's trials are, and each one's capacity at SLO is
searched with vLLM's own client at sustained steps (`autotune.measure.vllmbench`). The
ratio candidate/baseline comes with a 95 % interval from the pairs' log-ratios and
is kept with the study as the candidate's `validation_vllm` (`studyrecord.store_validation`),
beside (never in place of) the autotune-client validation.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import optuna

from autotune._remeasurements import VLLM_CLIENT, PairRun, Ratio, Recheck
from autotune.config import Scenario, latency_key
from autotune.engine import cpuplace, gpu
from autotune.engine.info import installed
from autotune.engine.server import Server
from autotune.errors import ConfigError, EngineError, Halted
from autotune.measure import searchplan, vllmbench, watch
from autotune.stored import json_data
from autotune.tuning import study as study_mod
from autotune.tuning import trial as trial_mod
from autotune.tuning.policy import prune
from autotune.tuning.records import studyrecord
from autotune.tuning.records.studyrecord import VALIDATION_VLLM
from autotune.tuning.records.trialrecord import TrialRecord
from autotune.verify import _pairloop as pairloop
from autotune.verify import pairstats, validate

# A re-check starts at the study's capacity and moves by this factor from there.
START_FACTOR = searchplan.AROUND
CLIENT = VLLM_CLIENT
REPEATS = 3


def summarize(runs: Sequence[PairRun], fixed: bool = False) -> Recheck:
    """Ratio candidate/baseline of each run's capacity at SLO (in a fixed-workload study,
    `fixed`, the objective's latency: lower is better) over the pairs, with its 95 %
    interval (pure). The ratio is None when a run has no figure.

    A capacity is only known to lie in its run's bracket, and re-check searches start at the
    same figure and move by the same factor, so two pairs can land on the same rates and agree
    exactly, which says nothing about the resolution. So the interval is never narrower than
    the brackets allow (`bracket_low`, the geometric mean of candidate low over baseline high,
    and `bracket_high`, of candidate high over baseline low).
    """
    def of(r: PairRun) -> float | None:
        return r.figure if fixed else r.capacity

    better = "lower" if fixed else "higher"
    base = sorted((r for r in runs if r.role == "baseline"), key=lambda r: r.pair)
    cand = sorted((r for r in runs if r.role == "candidate"), key=lambda r: r.pair)
    if not base or len(base) != len(cand):
        raise ValueError("validation needs one baseline and one candidate run per pair")
    logs = pairstats.log_ratios([of(r) for r in cand], [of(r) for r in base])
    found = pairstats.ratio(logs, better) if logs is not None else Ratio(better=better)
    out = Recheck(baseline_mean=sum(of(r) or 0.0 for r in base) / len(base),
                  candidate_mean=sum(of(r) or 0.0 for r in cand) / len(cand),
                  pairs=len(base), ratio=found.ratio, ci_low=found.ci_low,
                  ci_high=found.ci_high, better=better)
    if fixed or logs is None or not all(r.low for r in runs):
        return out
    # a run with no failing rate (a floor) leaves its side of the bracket open
    lows = pairstats.log_ratios([r.low for r in cand], [r.high for r in base])
    highs = pairstats.log_ratios([r.high for r in cand], [r.low for r in base])
    low = math.exp(statistics.fmean(lows)) if lows else None
    high = math.exp(statistics.fmean(highs)) if highs else None
    return replace(out, bracket_low=low, bracket_high=high,
                   ci_low=None if out.ci_low is None or low is None else min(out.ci_low, low),
                   ci_high=None if out.ci_high is None or high is None
                   else max(out.ci_high, high))


def study_ratio(candidate: TrialRecord, against: TrialRecord, fixed: bool = False
                ) -> float | None:
    """candidate/baseline as the study itself measured it with autotune's client: the
    capacity, or in a fixed-workload study the objective's latency."""
    if fixed:
        c = candidate.measures.latency_ms if candidate.measures else None
        b = against.measures.latency_ms if against.measures else None
        return c / b if c and b else None
    cap_c, cap_b = candidate.capacity, against.capacity
    if not cap_c or not cap_b or not cap_b.request_throughput:
        return None
    return cap_c.request_throughput / cap_b.request_throughput


@dataclass(frozen=True)
class RecheckPlan:
    """How a re-check runs: `repeats` pairs, capacity steps of `step_s` seconds, on `gpus`
    (two or more: each pair side by side on the first two; None: the only device)."""

    repeats: int
    step_s: float = vllmbench.STEP_S
    gpus: tuple[int, ...] | None = None


def run_crosscheck(study: optuna.Study, candidate: TrialRecord, against: TrialRecord,
                   plan: RecheckPlan, out_dir: Path, *,
                   on_run: Callable[[int, int, PairRun], None] | None = None) -> Recheck:
    """Measure both capacities with vLLM's client `plan.repeats` times each on fresh
    engines; store and return the re-check. Nothing is stored unless every run measured a
    capacity.

    On one device the runs alternate (baseline, candidate, ...). With two `gpus` each pair
    runs side by side, one configuration per GPU, swapped every pair, so a difference
    between the two devices cancels out and a pair costs the time of one run.
    Each run's search starts at the capacity the study reported for that trial and moves
    by 1.25x from there: its steps are spent around the figure being re-checked.
    """
    repeats, step_s, gpus = plan.repeats, plan.step_s, plan.gpus
    if repeats < 1:
        raise ConfigError(f"validate: --repeats must be at least 1 (got {repeats})")
    if not step_s > 0:
        raise ConfigError(f"validate: --step-seconds must be positive (got {step_s:g})")
    scenario = trial_mod.with_study_folder(validate.scenario_of(study), out_dir)
    fixed = scenario.workload.mode == "fixed"
    if not fixed and not scenario.objective.slos:
        raise ConfigError("validate --client vllm measures capacity at SLO, and the study's "
                          "objective has no slos")
    note = vllmbench.dataset_args(scenario.workload)[1]  # refuses a workload it cannot send
    model = study_mod.resolve_model(scenario)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    where = out_dir / "validate-vllm" / f"{candidate.number}-vs-{against.number}-{stamp}"
    order = validate.schedule(repeats)
    side_by_side = gpus is not None and len(gpus) >= 2
    devices: list[int | None] = list(gpus[:2]) if gpus and side_by_side else \
        [gpus[0] if gpus else None]
    idle = {d: gpu.Monitor(d).used_mib() for d in devices}  # None without a GPU
    bench = _Bench(scenario, model, step_s)
    with contextlib.ExitStack() as stack:
        # One vLLM client helper per device: its imports are paid once for all its runs.
        helpers = {d: stack.enter_context(vllmbench.Helper(
            where / (f"vllmbench-gpu{d}.log" if side_by_side else "vllmbench.log")))
            for d in devices}

        def measure(run: pairloop.Run) -> PairRun:
            on = f"-gpu{run.device}" if side_by_side else ""
            what = (f"run {run.index} ({run.role}, trial #{run.trial.number}"
                    + (f", GPU {run.device})" if side_by_side else ")"))
            return replace(_measure(helpers[run.device], bench, run,
                                    where / f"{run.index:02d}-{run.role}{on}", what),
                           gpu=run.device)

        runs = pairloop.run_pairs(
            order, candidate, against, measure, devices=devices, on_run=on_run,
            wait=lambda d: prune.wait_gpu_released(idle[d], scenario.prune.gpu_release_timeout_s,
                                                   d))
        helper_s = max((h.start_s or 0 for h in helpers.values()), default=0) or None
        client_version = helpers[devices[0]].version
    result = replace(
        summarize(runs, fixed), client=CLIENT, repeats=repeats, against=against.number,
        candidate=candidate.number, step_s=step_s,
        metric=latency_key(scenario.objective.latency) if fixed else None,
        min_prompts=vllmbench.MIN_PROMPTS, workload_note=note,
        study_ratio=study_ratio(candidate, against, fixed), runs=tuple(runs),
        engine_version="-".join(installed()), client_vllm=client_version,
        device=gpu.seen(),
        helper_start_s=helper_s,
        order=f"pairs side by side on GPUs {gpus[0]} and {gpus[1]}, swapped every pair"
        if side_by_side and gpus else "alternating, baseline first",
        dir=str(where), when=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    result = replace(result, verdict=result.word())
    with study_mod.no_interrupts():  # a Ctrl-C now must not lose the runs
        studyrecord.store_validation(study, candidate.number, VALIDATION_VLLM, json_data(result))
    return result


def _fixed(helper: vllmbench.Helper, scenario: Scenario, model: str, srv: Server,
           run_dir: Path) -> PairRun:
    """The study's fixed workload once with vLLM's client (its arrival and concurrency, its
    request count, its warm-up): the objective's latency and the throughput."""
    spec = scenario.workload
    key = latency_key(scenario.objective.latency)
    rate = None if math.isinf(spec.request_rate) else spec.request_rate
    count, trace_file = spec.num_requests, None
    if spec.kind == "trace":  # at the workload's own pace
        trace_file = run_dir / "fixed-trace.jsonl"
        count = vllmbench.write_trace(spec, count, spec.time_scale, 0, trace_file)
    argv = vllmbench.step_args(spec, vllmbench.Endpoint(srv.url, model, model),
                               vllmbench.Invocation(rate, count, spec.seed,
                                                    warmups=spec.warmup_requests,
                                                    trace_file=trace_file, result_dir=run_dir,
                                                    result_filename="fixed.json"))
    result = helper.step(argv, api_key=srv.api_key,
                         timeout_s=spec.timeout_s * 2 + spec.num_requests)
    watch.check(srv.death)
    if not result.completed:
        raise validate.ValidationRunFailed(f"validate: no request of the run completed; "
                                           f"log {run_dir / 'engine.log'}")
    return PairRun(figure=result.value(key), metric=key, completed=result.completed,
                   output_throughput=result.value("output_throughput"),
                   median_tpot_ms=result.value("median_tpot_ms"),
                   median_ttft_ms=result.value("median_ttft_ms"))


@dataclass(frozen=True)
class _Bench:
    """What every run of a re-check shares: the study's scenario, the model it serves and
    the length of a capacity step."""

    scenario: Scenario
    model: str
    step_s: float


def _measure(helper: vllmbench.Helper, bench: _Bench, run: pairloop.Run, run_dir: Path,
             what: str) -> PairRun:
    """One fresh engine with the run's trial's flags, launched as `trial.run_trial` launches
    it (the scenario's env, hardware emulation with its ballast), on the run's device when
    given, and its capacity by vLLM's client, searched from the capacity the study
    reported. The run's slot (index, count) places it among engines side by side: on the
    CPU build each gets cores of its own (`engine.cpuplace`)."""
    scenario, model, step_s, t = bench.scenario, bench.model, bench.step_s, run.trial
    env = {} if run.device is None else {"CUDA_VISIBLE_DEVICES": str(run.device)}
    env.update(cpuplace.placement(*run.slot, {**scenario.engine.env, **env}))
    eng = trial_mod.engine(scenario, model, dict(t.flags), run_dir / "engine.log", env=env)
    launch = eng.flags
    reported = (t.capacity.request_throughput or None) if t.capacity else None
    t0 = time.monotonic()
    try:
        with eng.ballast, eng.server as srv:
            startup = time.monotonic() - t0
            t1 = time.monotonic()
            if scenario.workload.mode == "fixed":
                got = _fixed(helper, scenario, model, srv, run_dir)
                return replace(got, flags=launch, startup_s=round(startup, 3),
                               measure_s=round(time.monotonic() - t1, 3),
                               log_path=str(run_dir / "engine.log"), dir=str(run_dir))
            found = vllmbench.search(
                helper, scenario.workload, scenario.objective.slos,
                vllmbench.Endpoint(srv.url, model, model, srv.api_key, srv.death),
                step_s=step_s, result_dir=run_dir,
                anchor=searchplan.Anchor(start=reported,
                                         factor=START_FACTOR if reported else None))
            measure_s = time.monotonic() - t1
    except EngineError as err:
        raise validate.ValidationRunFailed(
            f"validate: {what} did not start: {err.reason}: {err.detail}; "
            f"log {run_dir / 'engine.log'}") from None
    except Halted as err:
        raise validate.ValidationRunFailed(
            f"validate: {what} stopped: {err.why}; log {run_dir / 'engine.log'}"
        ) from None
    return PairRun(capacity=found.request_throughput, low=found.low, high=found.high,
                   bracket=found.bracket, uncertainty=found.uncertainty,
                   saturated=found.saturated, stopped=found.stopped,
                   max_request_throughput=found.max_request_throughput,
                   output_throughput=found.output_throughput, steps=json_data(found.steps),
                   flags=launch, startup_s=round(startup, 3), measure_s=round(measure_s, 3),
                   log_path=str(run_dir / "engine.log"), dir=str(run_dir))
