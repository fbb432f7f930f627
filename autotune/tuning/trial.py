"""One configuration, start to finish: launch, measure, stop, and say what happened.

`run_trial` never raises for anything the configuration itself causes: an engine that cannot
start is a pruned outcome with its reason; an exception of autotune's own propagates (FAIL).
An engine that dies while measured ends the trial within a poll as pruned `crashed` (which
process died, how, the log's last error); a spent `budget.trial_timeout` ends it as pruned
`timeout` (`autotune.tuning._deadline`). Either way the engine's whole process group is gone
when `run_trial` returns.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from autotune import _reasons as reasons
from autotune._device import DeviceSeen
from autotune._flags import Flags, FlagValue, to_args
from autotune.config import Scenario, parse_duration
from autotune.engine import compilecache, gpu
from autotune.engine.ballast import Ballast, Held
from autotune.engine.compilecache import WarmLaunch
from autotune.engine.defaults import machine_of
from autotune.engine.info import engine_info, installed
from autotune.engine.log import Startup
from autotune.engine.server import Server
from autotune.errors import EngineError, Halted
from autotune.measure import searchplan, serversearch, speculation
from autotune.measure.bench import Load, ProbePhase, benchmark
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.loadgen import Target
from autotune.measure.measurement import Measurement
from autotune.measure.speculation import Speculation
from autotune.measure.watch import Alive
from autotune.traffic import WorkloadSpec
from autotune.tuning._deadline import CRASHED, TIMEOUT, Deadline, TrialWatch
from autotune.tuning.policy import compilekey, prune
from autotune.tuning.policy.compilekey import CompileKey
from autotune.tuning.policy.space import relation_violation
from autotune.tuning.quality import checking
from autotune.tuning.quality.client import Refused
from autotune.tuning.quality.guard import Guard
from autotune.tuning.quality.reference import Reference
from autotune.tuning.quality.verdict import Quality
from autotune.tuning.records.estimate import Estimate
from autotune.tuning.records.trialrecord import TrialRecord

log = logging.getLogger("autotune")

COMPLETE, PRUNED = "complete", "pruned"  # states; CRASHED and TIMEOUT are pruned reasons
CACHE_FOLDER = "compile-cache"  # a study's compile cache, in its folder (`with_study_folder`)
# How long a trial waits, before it measures, for the next engine's imports that its own
# launch started (`Server.spare_ready`): an H200 imports vLLM in 15-25 s.
SPARE_WAIT_S = 60.0


@dataclass
class EngineRun:
    """What a trial ran, where, and how its engine started: the trial record's fields of
    those names (`records.trialrecord.TrialRecord`), filled in as the trial goes, written by
    the study."""

    flags: Flags
    command: list[str] = field(default_factory=list)
    engine_version: str | None = None
    device: DeviceSeen = field(default_factory=DeviceSeen)
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    launched: bool | None = None
    launched_flags: Flags | None = None
    memory_estimate: Estimate | None = None
    kv_capacity_reported: int | None = None
    startup: Startup | None = None
    timings: dict[str, float] | None = None
    ballast: Held | None = None
    speculation: Speculation | None = None
    detail: str | None = None
    duplicate_of: int | None = None

    # Always stored, even when empty: what ran and where.
    _ALWAYS = ("flags", "command", "engine_version", "device", "env", "log_path")

    def fields(self) -> dict[str, Any]:
        """The record fields to write: the always-stored ones, and the others that are set."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name in self._ALWAYS or getattr(self, f.name) is not None}

    @classmethod
    def of_record(cls, rec: TrialRecord, duplicate_of: int | None = None) -> EngineRun:
        """A finished trial's engine run, for a trial that would start the same engine."""
        return cls(**{f.name: getattr(rec, f.name) for f in dataclasses.fields(cls)
                      if f.name != "duplicate_of"}, duplicate_of=duplicate_of)


@dataclass
class Outcome:
    """What a trial produced: a state, a reason when pruned, what ran (`facts`, its
    `EngineRun`), and what it measured (`summary`, the record's metrics)."""

    state: str
    reason: str = ""
    summary: Measurement = field(default_factory=Measurement)
    facts: EngineRun = field(default_factory=lambda: EngineRun({}))
    quality: Quality | None = None
    new_reference: Reference | None = None


def command_line(model: str, flags: Mapping[str, FlagValue]) -> list[str]:
    return ["vllm", "serve", model, *to_args(flags)]


@dataclass(frozen=True)
class Engine:
    """A configuration as it is launched: the flags as they reach vLLM (a smaller card's
    emulated, the compile key held), the ballast that holds the rest of the device (a
    no-op without a GPU or an emulated card), the server, neither started (`with
    engine.ballast, engine.server`), and how it shares compiled code (`warm`). Every trial
    and every re-measurement (`autotune.verify`) launches through `engine`, so what
    `validate` re-measures is what the study measured."""

    flags: Flags
    ballast: Ballast
    server: Server
    warm: WarmLaunch


def engine(scenario: Scenario, model: str, flags: Flags, log_path: Path, *,
           env: dict[str, str] | None = None, startup_timeout: float | None = None) -> Engine:
    """How a configuration is launched: `scenario.engine.env` updated by `env` (a device,
    cores of its own), the card of `scenario.hardware` emulated, the study's compile
    cache and key (`with_study_folder` places the cache)."""
    launch_env = {**scenario.engine.env, **(env or {})}
    launched = prune.emulate(flags, scenario.hardware, prune.device_bytes())
    warm = warm_launch(scenario, launched, launch_env)
    launched = {**launched, **warm.flags}
    # The emulated card's memory is a hard limit only when the rest of the device is held.
    ballast = Ballast(scenario.hardware.memory_gib if gpu.device() else None, env=launch_env)
    timeout = scenario.engine.startup_timeout_s if startup_timeout is None else startup_timeout
    forked = warm.env.get(compilecache.START_METHOD) == "fork"
    server = Server(model, launched, env={**launch_env, **warm.env}, log_path=log_path,
                    startup_timeout=timeout, fallback_env=compilecache.SPAWN if forked else None)
    return Engine(launched, ballast, server, warm)


def warm_launch(scenario: Scenario, flags: Flags, env: Mapping[str, str]) -> WarmLaunch:
    """What a launch of `flags` (as emulated) adds to share compiled code: the flags that
    hold the study's compile key, the cache folder and the environment
    (`autotune.engine.compilecache`, `autotune.tuning.policy.compilekey`)."""
    info = engine_info()
    seen = gpu.seen()
    machine = machine_of(seen)
    if scenario.hardware.memory_gib is not None and machine.device != "cpu":
        # vLLM's defaults follow the emulated card (`prune.emulate` passes them)
        machine = replace(machine, memory_mib=scenario.hardware.memory_gib * 1024)
    key = CompileKey.of(scenario, machine, compilekey.SCHEDULED in info.flags)
    added = key.flags(flags)
    place = scenario.engine.compile_cache
    cache = None
    if place not in (compilecache.VLLM, compilecache.STUDY):  # STUDY: not placed (vLLM's)
        spec = {**flags, **added}.get("speculative-config")
        tokens = int(spec.get("num_speculative_tokens") or 0) \
            if isinstance(spec, Mapping) else 0
        cache = compilecache.folder(Path(place), (info.distribution, info.version),
                                    seen.name, tokens)
    launch = compilecache.launch_env(cache, cpu=machine.device == "cpu",
                                     fork=scenario.engine.fork_engine_core, user=env)
    return WarmLaunch(added, str(cache) if cache is not None and compilecache.ROOT in launch
                      else env.get(compilecache.ROOT), launch)


def _as_launched(launch: Engine) -> WarmLaunch:
    """The launch's warm restart as it went: a forked start that failed and was started
    again spawned says so (`Server.fallback_env`)."""
    env = {k: launch.server.env.get(k, v) for k, v in launch.warm.env.items()}
    return replace(launch.warm, env=env)


def with_study_folder(scenario: Scenario, folder: Path) -> Scenario:
    """`scenario` with its compile cache placed: `study` is a folder of the study's own
    (`FOLDER/compile-cache`, kept across its trials, boxes and resumed runs), a relative
    folder is read from here; `vllm` stays vLLM's own cache."""
    place = scenario.engine.compile_cache
    if place == compilecache.VLLM:
        return scenario
    path = folder / CACHE_FOLDER if place == compilecache.STUDY else Path(place).expanduser()
    return scenario.model_copy(update={"engine": scenario.engine.model_copy(
        update={"compile_cache": str(path.resolve())})})


def run_trial(scenario: Scenario, model: str, flags: Flags, trial_dir: Path,
              guard: Guard | None = None,
              intermediate: Callable[[Measurement], str | None] | None = None,
              anchor: searchplan.Anchor | None = None) -> Outcome:
    """Launch `flags`, run the workload, check quality, stop the engine; what ran and its
    timings in the outcome's `facts` (its `EngineRun`).

    `intermediate` sees the probe phase's summary and may return a reason to stop
    (the study's Optuna pruner); the probe rules of `scenario.prune` apply first.
    In capacity mode `anchor` ties the search to capacities measured before
    (`searchplan.Anchor`). The study runs a searched trial's first sustained step at the
    best's lower bound, after the burst, so that a loser fails there and is pruned at once,
    and its next at the best's upper bound, so that a tie is proven there and stops
    (`autotune.tuning.study`); an ablation starts at the winner's capacity with no burst
    (`autotune.tuning.ablation`). The trial's clock (`budget.trial_timeout`) starts here.

    Args:
        scenario: the study's scenario (workload, objective, budget, prune rules, engine).
        model: the model as `vllm serve` takes it (a path or a hub name).
        flags: the trial's `vllm serve` flags, by name without dashes.
        trial_dir: the trial's folder (its engine log and step files).
        guard: the quality check against the study's reference (None: none).
        intermediate: the study's pruner, shown the probe phase's `Measurement`.
        anchor: capacities measured before that place this trial's search.

    Returns:
        The `Outcome`: complete, pruned (with the reason), crashed or timed out, with its
        `Measurement` and what ran. No engine process outlives the call.
    """
    deadline = Deadline(parse_duration(scenario.budget.trial_timeout),
                        scenario.budget.trial_timeout)
    trial_dir.mkdir(parents=True, exist_ok=True)
    facts = EngineRun(flags, command_line(model, flags), "-".join(installed()),
                      gpu.seen(), scenario.engine.env,
                      str(trial_dir / "engine.log"))
    why = relation_violation(flags)
    if why:
        facts.detail = why
        return Outcome(PRUNED, reasons.INVALID_COMBINATION, facts=facts)
    spec = scenario.prune
    estimate = prune.predict(scenario, model, flags, scenario.engine.env)
    facts.memory_estimate = estimate or None
    if why := (spec.enabled and prune.too_short(flags, scenario.workload)) or \
            prune.before_launch(estimate, spec):
        reason, _, facts.detail = why.partition(": ")
        facts.launched = False
        return Outcome(PRUNED, reason, facts=facts)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    workload = scenario.workload
    if workload.max_duration_s is None or workload.max_duration_s > deadline.seconds:
        workload = workload.model_copy(update={"max_duration_s": deadline.seconds})
    watch: TrialWatch | None = None
    launch = engine(scenario, model, flags, trial_dir / "engine.log",
                    startup_timeout=min(scenario.engine.startup_timeout_s, deadline.left()))
    if launch.flags != flags:
        facts.launched_flags = launch.flags
    ballast, server = launch.ballast, launch.server
    try:
        # The ballast starts before the engine and stops after it, on every path.
        with ballast, server as srv:
            timings["startup_s"] = time.monotonic() - t0
            facts.startup = Startup.from_dict({**srv.figures.as_dict(),
                                               "launch": srv.launch_path, "phases": srv.phases,
                                               "warm": _as_launched(launch).as_dict()})
            watch = TrialWatch(srv.death, deadline)
            t1 = time.monotonic()
            srv.spare_ready(min(SPARE_WAIT_S, deadline.left()))  # no import beside a step
            if (waited := time.monotonic() - t1) > 0.05:
                timings["spare_wait_s"] = waited
            try:
                t1 = time.monotonic()
                before = speculation.Counters.parse(srv.get_text("/metrics") or "")
                summary = _measure(srv, scenario, workload, model, watch, intermediate,
                                   anchor or searchplan.Anchor())
                drafted = speculation.between(
                    before, speculation.Counters.parse(srv.get_text("/metrics") or ""))
                if drafted is not None:
                    facts.speculation = drafted
                facts.kv_capacity_reported = srv.figures.kv_cache_tokens
                timings["benchmark_s"] = time.monotonic() - t1
                quality, new_ref = None, None
                if guard is not None and summary.completed and \
                        summary.stopped_after_probe is None:
                    t1 = time.monotonic()
                    quality, new_ref = _quality(Target(srv.url, model, srv.headers), guard,
                                                facts, model, watch)
                    timings["guardrail_s"] = time.monotonic() - t1
            finally:
                srv.stop_grace = deadline.grace(srv.stop_grace)  # the teardown is bounded too
            t2 = time.monotonic()
        timings["teardown_s"] = time.monotonic() - t2
    except Halted as halt:
        reason = watch.fired if watch is not None and watch.fired else CRASHED
        timings["until_stopped_s"] = time.monotonic() - t0  # start-up, measuring, teardown
        facts.detail, facts.timings, facts.ballast = halt.why, timings, ballast.record()
        return Outcome(PRUNED, reason, facts=facts)
    except EngineError as err:
        timings["startup_s"] = time.monotonic() - t0
        if server.phases:  # where the failed start spent its time
            facts.startup = Startup.from_dict({"launch": server.launch_path,
                                               "phases": server.phases,
                                               "warm": _as_launched(launch).as_dict()})
        facts.detail = err.detail
        if err.reason == TIMEOUT and deadline.spent():
            facts.detail = f"{deadline.reason()} during start-up ({err.detail})"
        facts.timings, facts.ballast = timings, ballast.record()
        return Outcome(PRUNED, err.reason, facts=facts)
    facts.timings, facts.ballast = timings, ballast.record()
    (trial_dir / "bench.json").write_text(json.dumps(summary.as_dict(), indent=2, default=str))
    if summary.stopped_after_probe is not None:
        return Outcome(PRUNED, summary.stopped_after_probe, summary, facts)
    if not summary.completed:
        return Outcome(PRUNED, reasons.NO_SUCCESSFUL_REQUESTS, summary, facts)
    if quality is not None and quality.error is not None:
        facts.detail = quality.error
        return Outcome(PRUNED, reasons.GUARDRAIL_ERROR, summary, facts)
    return Outcome(COMPLETE, "", summary, facts, quality, new_ref)


def _measure(srv: Server, scenario: Scenario, workload: WorkloadSpec, model: str, alive: Alive,
             intermediate: Callable[[Measurement], str | None] | None,
             anchor: searchplan.Anchor) -> Measurement:
    """The workload against the running engine: a capacity search, or the fixed workload
    with its probe phase; every wait watched by `alive`."""
    spec = scenario.prune
    load = Load(Target(srv.url, model, srv.headers), workload, model,
                pids=lambda: [p.pid for p in srv.processes()], alive=alive)
    if workload.mode == "capacity":
        summary = serversearch.search(load, scenario.objective.slos, anchor)
        found = summary.capacity or CapacityRecord()
        if found.stopped == searchplan.BELOW_BEST:
            return summary.replace(stopped_after_probe=searchplan.BELOW_BEST)
        if not found.low:
            # No rate met the SLOs and kept pace: the trial has no capacity to rank by, and
            # its gentlest step's latencies alone could meet the SLOs (a step that fell
            # behind its arrivals), so it is pruned rather than left to read as feasible.
            return summary.replace(stopped_after_probe=found.stopped if found.stopped in (
                searchplan.UNREACHABLE, reasons.NO_SUCCESSFUL_REQUESTS)
                else reasons.NO_PASSING_RATE)
        return summary
    probe_n = math.ceil(workload.num_requests * spec.probe_fraction) \
        if spec.enabled and workload.kind != "chat" else 0

    def on_probe(partial: Measurement) -> str | None:
        return prune.probe_verdict(partial, spec) or (
            intermediate(partial) if intermediate else None)

    return benchmark(load, probe=ProbePhase(probe_n, on_probe))


def _quality(target: Target, guard: Guard, facts: EngineRun, model: str, alive: Alive
             ) -> tuple[Quality, Reference | None]:
    """Check against the reference, or make the reference (with its noise floor); a check
    that could not run is a verdict with its error (the engine failed under it: the trial
    is pruned) or `not_checked` (the engine refused a request autotune built: the trial
    stands, unchecked)."""
    try:
        if guard.reference is not None:
            return checking.check(target, guard, alive), None
        ref, quality = checking.make_reference(
            target, guard, context={"model": model, "flags": facts.flags,
                                    "engine_version": facts.engine_version,
                                    "device": facts.device.as_dict()},
            alive=alive)
        return quality, ref
    except Refused as err:  # autotune's request, not the configuration: unchecked
        log.warning("quality check not run: %s", err)
        return Quality(not_checked=str(err)), None
    except (RuntimeError, OSError, aiohttp.ClientError, asyncio.TimeoutError, KeyError) as err:
        return Quality.from_dict({"error": f"{type(err).__name__}: {err}"}), None
