"""One configuration, start to finish: launch, measure, stop, and say what happened.

`run` never raises for anything the configuration itself causes: an engine that
cannot start is a pruned outcome with its reason; an exception of autotune's
own propagates, and the study records the trial as FAIL.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import gpu
from .bench import benchmark
from .config import Scenario, parse_duration
from .engine import Server
from .engineinfo import installed
from .errors import EngineError
from .flags import to_args
from .loadgen import Target
from .space import relation_violation

COMPLETE, PRUNED = "complete", "pruned"


@dataclass
class Outcome:
    """What a trial produced: a state, a reason when pruned, and everything measured."""

    state: str
    reason: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)


def command_line(model: str, flags: dict[str, Any]) -> list[str]:
    return ["vllm", "serve", model, *to_args(flags)]


def run(scenario: Scenario, model: str, flags: dict[str, Any], trial_dir: Path) -> Outcome:
    """Launch `flags`, run the workload, stop the engine; timings and context in attrs."""
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
        return Outcome(PRUNED, "invalid_combination", attrs={**attrs, "detail": why})
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    workload = scenario.workload
    cap = parse_duration(scenario.budget.trial_timeout)
    if workload.max_duration_s is None or workload.max_duration_s > cap:
        workload = workload.model_copy(update={"max_duration_s": cap})
    try:
        with Server(model, flags, env=scenario.engine.env, log_path=trial_dir / "engine.log",
                    startup_timeout=scenario.engine.startup_timeout_s) as srv:
            timings["startup_s"] = time.monotonic() - t0
            attrs["startup"] = srv.figures.as_dict()
            t1 = time.monotonic()
            summary = benchmark(Target(srv.url, model, srv.headers), workload,
                                tokenizer_model=model,
                                pids=lambda: [p.pid for p in srv.processes()])
            timings["benchmark_s"] = time.monotonic() - t1
            t2 = time.monotonic()
        timings["teardown_s"] = time.monotonic() - t2
    except EngineError as err:
        timings["startup_s"] = time.monotonic() - t0
        attrs.update(detail=err.detail, timings=timings)
        return Outcome(PRUNED, err.reason, attrs=attrs)
    attrs["timings"] = timings
    (trial_dir / "bench.json").write_text(json.dumps(summary, indent=2, default=str))
    if not summary["completed"]:
        return Outcome(PRUNED, "no_successful_requests", summary, attrs)
    return Outcome(COMPLETE, "", summary, attrs)
