"""One configuration, start to finish: launch, measure, stop, and say what happened.

`run_trial` never raises for anything the configuration itself causes: an engine that
cannot start is a pruned outcome with its reason; an exception of autotune's
own propagates, and the study records the trial as FAIL.

An engine that dies while it is measured ends the trial within a poll as pruned
`crashed` (its detail: which process died, by which signal or exit code, and the log's
last error), and a trial whose `budget.trial_timeout` is spent, wherever it is, ends as
pruned `timeout` (`autotune.tuning.deadline`). Either way the engine's whole process
group is gone when `run_trial` returns.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from autotune import reasons
from autotune.config import Scenario, parse_duration
from autotune.engine import gpu
from autotune.engine.ballast import Ballast
from autotune.engine.info import installed
from autotune.engine.server import Server
from autotune.errors import EngineError, Halted
from autotune.flags import to_args
from autotune.measure import capacity, speculation
from autotune.measure.bench import benchmark
from autotune.measure.loadgen import Target
from autotune.measure.watch import Alive
from autotune.traffic import WorkloadSpec
from autotune.tuning import guardrail, prune
from autotune.tuning.deadline import CRASHED, TIMEOUT, Deadline, TrialWatch
from autotune.tuning.space import relation_violation

COMPLETE, PRUNED = "complete", "pruned"  # states; CRASHED and TIMEOUT are pruned reasons


@dataclass
class Outcome:
    """What a trial produced: a state, a reason when pruned, and everything measured."""

    state: str
    reason: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    quality: dict[str, Any] | None = None
    new_reference: guardrail.Reference | None = None


def command_line(model: str, flags: dict[str, Any]) -> list[str]:
    return ["vllm", "serve", model, *to_args(flags)]


def run_trial(scenario: Scenario, model: str, flags: dict[str, Any], trial_dir: Path,
              guard: guardrail.Guard | None = None,
              intermediate: Callable[[dict[str, Any]], str | None] | None = None,
              capacity_floor: float | None = None) -> Outcome:
    """Launch `flags`, run the workload, check quality, stop the engine; timings in attrs.

    `intermediate` sees the probe phase's summary and may return a reason to stop
    (the study's Optuna pruner); the probe rules of `scenario.prune` apply first.
    In capacity mode the search stops once the capacity is known to lie below
    `capacity_floor` (the best trial's lower bound, requests/s). The trial's clock
    (`budget.trial_timeout`) starts here.
    """
    deadline = Deadline(parse_duration(scenario.budget.trial_timeout),
                        scenario.budget.trial_timeout)
    trial_dir.mkdir(parents=True, exist_ok=True)
    device = gpu.device()
    attrs: dict[str, Any] = {
        "flags": flags,
        "command": command_line(model, flags),
        "engine_version": "-".join(installed()),
        "device": {"name": device.name, "memory_mib": device.memory_mib} if device
        else {"name": "cpu"},
        "env": scenario.engine.env,
        "log_path": str(trial_dir / "engine.log"),
    }
    why = relation_violation(flags)
    if why:
        return Outcome(PRUNED, reasons.INVALID_COMBINATION, attrs={**attrs, "detail": why})
    spec = scenario.prune
    estimate = prune.predict(scenario, model, flags, scenario.engine.env)
    attrs["memory_estimate"] = asdict(estimate) if estimate else None
    if why := (spec.enabled and prune.too_short(flags, scenario.workload)) or \
            prune.before_launch(estimate, spec):
        reason, _, detail = why.partition(": ")
        return Outcome(PRUNED, reason, attrs={**attrs, "detail": detail, "launched": False})
    launch_flags = prune.emulate(flags, scenario.hardware, prune.device_bytes())
    if launch_flags != flags:
        attrs["launched_flags"] = launch_flags
    # The emulated card's memory is a hard limit only when the rest of the device is held.
    ballast = Ballast(scenario.hardware.memory_gib if device else None,
                      env=scenario.engine.env)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    workload = scenario.workload
    if workload.max_duration_s is None or workload.max_duration_s > deadline.seconds:
        workload = workload.model_copy(update={"max_duration_s": deadline.seconds})
    watch: TrialWatch | None = None
    server: Server | None = None
    try:
        server = Server(model, launch_flags, env=scenario.engine.env,
                        log_path=trial_dir / "engine.log",
                        startup_timeout=min(scenario.engine.startup_timeout_s, deadline.left()))
        # The ballast starts before the engine and stops after it, on every path.
        with ballast, server as srv:
            timings["startup_s"] = time.monotonic() - t0
            attrs["startup"] = {**srv.figures.as_dict(), "launch": srv.launch_path,
                                "phases": srv.phases}
            watch = TrialWatch(srv.death, deadline)
            try:
                t1 = time.monotonic()
                before = speculation.Counters.parse(srv.get_text("/metrics") or "")
                summary = _measure(srv, scenario, workload, model, watch, intermediate,
                                   capacity_floor)
                drafted = speculation.between(
                    before, speculation.Counters.parse(srv.get_text("/metrics") or ""))
                if drafted is not None:
                    attrs["speculation"] = drafted.as_dict()
                attrs["kv_capacity_reported"] = srv.figures.kv_cache_tokens
                timings["benchmark_s"] = time.monotonic() - t1
                quality, new_ref = None, None
                if guard is not None and summary["completed"] and \
                        "stopped_after_probe" not in summary:
                    t1 = time.monotonic()
                    quality, new_ref = _quality(Target(srv.url, model, srv.headers), guard,
                                                {**attrs, "model": model}, watch)
                    timings["guardrail_s"] = time.monotonic() - t1
            finally:
                srv.stop_grace = deadline.grace(srv.stop_grace)  # the teardown is bounded too
            t2 = time.monotonic()
        timings["teardown_s"] = time.monotonic() - t2
    except Halted as halt:
        reason = watch.fired if watch is not None and watch.fired else CRASHED
        timings["until_stopped_s"] = time.monotonic() - t0  # start-up, measuring, teardown
        attrs.update(detail=halt.why, timings=timings, **ballast.record())
        return Outcome(PRUNED, reason, attrs=attrs)
    except EngineError as err:
        timings["startup_s"] = time.monotonic() - t0
        if server is not None and server.phases:  # where the failed start spent its time
            attrs["startup"] = {"launch": server.launch_path, "phases": server.phases}
        detail = err.detail
        if err.reason == TIMEOUT and deadline.spent():
            detail = f"{deadline.reason()} during start-up ({detail})"
        attrs.update(detail=detail, timings=timings, **ballast.record())
        return Outcome(PRUNED, err.reason, attrs=attrs)
    attrs.update(timings=timings, **ballast.record())
    (trial_dir / "bench.json").write_text(json.dumps(summary, indent=2, default=str))
    if "stopped_after_probe" in summary:
        return Outcome(PRUNED, summary["stopped_after_probe"], summary, attrs)
    if not summary["completed"]:
        return Outcome(PRUNED, reasons.NO_SUCCESSFUL_REQUESTS, summary, attrs)
    if quality is not None and "error" in quality:
        return Outcome(PRUNED, reasons.GUARDRAIL_ERROR, summary,
                       {**attrs, "detail": quality["error"]})
    return Outcome(COMPLETE, "", summary, attrs, quality, new_ref)


def _measure(srv: Server, scenario: Scenario, workload: WorkloadSpec, model: str, alive: Alive,
             intermediate: Callable[[dict[str, Any]], str | None] | None,
             capacity_floor: float | None) -> dict[str, Any]:
    """The workload against the running engine: a capacity search, or the fixed workload
    with its probe phase; every wait watched by `alive`."""
    spec = scenario.prune
    target = Target(srv.url, model, srv.headers)
    pids = lambda: [p.pid for p in srv.processes()]  # noqa: E731
    if workload.mode == "capacity":
        summary = capacity.search(target, workload, tokenizer_model=model,
                                  slos=scenario.objective.slos, pids=pids,
                                  should_stop=_below(capacity_floor), alive=alive)
        if summary["capacity"]["stopped"] == capacity.BELOW_BEST:
            summary["stopped_after_probe"] = capacity.BELOW_BEST
        return summary
    probe_n = math.ceil(workload.num_requests * spec.probe_fraction) \
        if spec.enabled and workload.kind != "chat" else 0

    def on_probe(partial: dict[str, Any]) -> str | None:
        return prune.probe_verdict(partial, spec) or (
            intermediate(partial) if intermediate else None)

    return benchmark(target, workload, tokenizer_model=model, pids=pids,
                     probe_sessions=probe_n, on_probe=on_probe, alive=alive)


def _below(floor: float | None) -> capacity.StopRule | None:
    """Stop a capacity search whose failing rate is already at or under `floor`."""
    if not floor:
        return None

    def rule(low: float | None, high: float | None) -> str | None:
        return capacity.BELOW_BEST if high is not None and high <= floor else None

    return rule


def _quality(target: Target, guard: guardrail.Guard, context: dict[str, Any], alive: Alive
             ) -> tuple[dict[str, Any], guardrail.Reference | None]:
    """Check against the reference, or make the reference (with its noise floor)."""
    spec = guard.spec
    try:
        if guard.reference is not None:
            return guardrail.check(target, guard.reference, alive), None
        ref, report = guardrail.make_reference(
            target, guard.prompts, spec.max_tokens, factor=spec.noise_factor,
            drift=spec.drift_threshold, agreement=spec.agreement_threshold,
            context={k: context.get(k) for k in ("model", "flags", "engine_version", "device")},
            alive=alive)
        return {**guardrail.verdict(report, ref), "made_reference": True}, ref
    except (RuntimeError, OSError, aiohttp.ClientError, asyncio.TimeoutError, KeyError) as err:
        return {"error": f"{type(err).__name__}: {err}"}, None
