"""Benchmark: engine start-up, cold against warm (a spare reaper that imported vLLM already).

    .venv/bin/python benchmarks/startup.py [--pairs 4] [--model PATH] [--gap 20]
        [--flags JSON] [--fill] [--capacity | --bench]

Each pair starts the same engine twice, one after the other, on this machine: cold (a fresh
`python -m ...` that imports vLLM) and warm (the fork of a spare prepared when the previous
engine stopped, as in a study; every start waits `--gap` seconds after the previous stop,
as a trial's teardown, pre-launch checks and GPU release give it). The order alternates
every pair (cold-warm, warm-cold, ...), so a drift of the machine hits both. `--fill` starts
one engine first, reported apart: on a fresh machine it fills the caches (compile, model
inspection), the "cold caches" figure.
Prints every start (process start to a served completion) with its phases (engine/phases.py),
the medians and their ratio, with the ratio of each pair, a 95 % interval of the mean
log-ratio (a gain only when the whole interval lies below 1), and the median of each phase
for either path: where the seconds that are left go.

`--capacity` also searches each engine's capacity at an SLO (the capacity engine tests'
workload: 64-token prompts, 128-token replies, E2EL p95 <= 2.5 s), to show that a warm
start is the same engine: the warm/cold capacity ratio's interval must include 1, and each
search's own interval says how far one run is from the next. `--bench` sends one fixed
workload instead (`--bench-requests` requests of 512 prompt and 256 reply tokens, at most
64 at a time): the figure for a GPU, where a capacity search per start costs minutes.

`--flags` (a JSON object of `vllm serve` flags) replaces the CPU default
(`{"enforce-eager": true, "max-num-seqs": 4}`): `{"max-model-len": 8192}` is vLLM's own
start-up on a GPU, torch.compile and CUDA graphs included (scripts/gpu/box.sh runs it
with `BOX_VERB=startup`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import config, tinymodel
from autotune.engine import warm
from autotune.engine.server import Server
from autotune.measure import bench, capacityrecord, serversearch
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.loadgen import Target
from autotune.traffic import CapacitySpec, WorkloadSpec
from autotune.verify import pairstats

FLAGS = {"enforce-eager": True, "max-num-seqs": 4}
SPEC = WorkloadSpec(kind="random", num_requests=32, input_len=64, output_len=128,
                    warmup_requests=8, mode="capacity",
                    capacity=CapacitySpec(tolerance=0.1, max_steps=7, repeats=2, min_step_s=3,
                                          max_step_s=8))
SLOS = {"e2el_p95_ms": 2500.0}  # cpu-smoke's: 800 ms left no rate feasible on a slow host
BENCH = WorkloadSpec(kind="random", num_requests=384, input_len=512, output_len=256,
                     max_concurrency=64, warmup_requests=16, mode="fixed")


@dataclass
class Run:
    """One engine start: seconds, the path it took, its phases, and what it then measured
    (a capacity search's record, or a fixed benchmark's summary)."""

    startup_s: float
    path: str
    phases: dict[str, float]
    capacity: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None

    @property
    def rate(self) -> float:
        return (self.capacity or {}).get("request_throughput") or math.nan

    @property
    def throughput(self) -> float:
        return (self.bench or {}).get("output_throughput") or math.nan

    def line(self) -> str:
        text = f"start-up {self.startup_s:.1f} s (path {self.path}): {_phases(self.phases)}"
        if self.capacity is not None:
            low, high = capacityrecord.interval(CapacityRecord.from_dict(self.capacity))
            limit = (self.capacity.get("bottleneck") or {}).get("kind", "-")
            text += (f"; capacity {self.rate:.1f} req/s (interval {low:.1f}-{high:.1f},"
                     f" stopped: {self.capacity.get('stopped') or '-'}, limited by: {limit})")
        if self.bench is not None:
            text += (f"; output {self.throughput:.0f} tok/s, TTFT p50 "
                     f"{self.bench.get('median_ttft_ms', math.nan):.1f} ms, TPOT p50 "
                     f"{self.bench.get('median_tpot_ms', math.nan):.2f} ms, failed "
                     f"{self.bench.get('failed', 0)}")
        return text


@dataclass
class Plan:
    """What every start does: the engine, and what it measures once up."""

    model: str
    flags: dict[str, Any]
    measure: str | None  # None, "capacity" or "bench"
    bench_requests: int
    capacity_spec: WorkloadSpec = field(default_factory=lambda: SPEC)
    slos: dict[str, float] = field(default_factory=lambda: dict(SLOS))


def start(plan: Plan, log: Path, *, next_warm: bool) -> Run:
    """One start-up, and what `plan` measures on the engine it started. Its stop prepares
    a spare when the next start is warm (`next_warm`), as a study's trial does for the
    next one; a warm start takes the spare the previous stop prepared."""
    with Server(plan.model, plan.flags, log_path=log) as srv:
        srv.prepare_next = next_warm
        run = Run(srv.startup_s or math.nan, srv.launch_path, srv.phases)
        target = Target(srv.url, plan.model, srv.headers)
        pids = lambda: [p.pid for p in srv.processes()]  # noqa: E731
        if plan.measure == "capacity":
            run.capacity = serversearch.search(
                bench.Load(target, plan.capacity_spec, plan.model, pids=pids),
                plan.slos).as_dict()["capacity"]  # as a trial stores it
        elif plan.measure == "bench":
            spec = BENCH.model_copy(update={"num_requests": plan.bench_requests})
            run.bench = bench.benchmark(bench.Load(target, spec, plan.model,
                                                   pids=pids)).as_dict()
        return run


def _ratio_line(what: str, warm_values: list[float], cold_values: list[float],
                unit: str) -> str:
    """Medians and the paired warm/cold ratio; a pair with no figure on either side (a
    search where no rate met the SLO) is left out, and said so."""
    pairs = [(w, c) for w, c in zip(warm_values, cold_values, strict=True)
             if math.isfinite(w) and math.isfinite(c) and c > 0 and w > 0]
    left_out = len(warm_values) - len(pairs)
    if not pairs:
        return f"{what}: no pair has both figures"
    ratios = [w / c for w, c in pairs]
    iv = pairstats.log_interval([math.log(r) for r in ratios])
    ci = "-" if iv.low is None else f"{math.exp(iv.low):.2f}-{math.exp(iv.high):.2f}"
    return (f"median cold {statistics.median(c for _, c in pairs):.1f} {unit}, warm "
            f"{statistics.median(w for w, _ in pairs):.1f} {unit}; {what} warm/cold per pair "
            f"{', '.join(f'{r:.2f}' for r in ratios)}; geometric mean {math.exp(iv.mean):.2f} "
            f"(95% CI {ci})" + (f"; {left_out} pair(s) left out: no figure" if left_out else ""))


def _phases(phases: dict[str, float]) -> str:
    return ", ".join(f"{name} {s:.1f} s" for name, s in phases.items())


def order(pairs: int) -> list[bool]:
    """Warm (True) or cold, start by start: cold-warm, warm-cold, cold-warm, ... The first
    is cold, so every warm start has a previous stop to prepare its spare."""
    return [w for pair in range(pairs) for w in ((False, True) if pair % 2 == 0
                                                 else (True, False))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--model", default=None, help="default: the tiny test model")
    parser.add_argument("--gap", type=float, default=20.0,
                        help="seconds between one engine's stop and the next start")
    parser.add_argument("--flags", type=json.loads, default=FLAGS,
                        help="vllm serve flags as a JSON object (default: %(default)s)")
    parser.add_argument("--fill", action="store_true",
                        help="start one engine first to fill the caches, reported apart")
    measure = parser.add_mutually_exclusive_group()
    measure.add_argument("--capacity", action="store_true",
                         help="also search each engine's capacity at the SLO")
    measure.add_argument("--bench", action="store_true",
                         help="also send each engine one fixed workload")
    parser.add_argument("--bench-requests", type=int, default=BENCH.num_requests)
    parser.add_argument("--scenario", type=Path, default=None,
                        help="--capacity: a scenario file whose capacity workload and SLOs "
                        "replace the CPU ones (e.g. sustained 20-s steps on a GPU)")
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep every engine's log in this folder (default: discarded)")
    args = parser.parse_args()
    os.environ["AUTOTUNE_WARM_START"] = "1"  # whatever the host's default: both paths here
    plan = Plan(args.model or str(tinymodel.build(preset="tiny").path), dict(args.flags),
                "capacity" if args.capacity else "bench" if args.bench else None,
                args.bench_requests)
    if args.scenario is not None:
        scenario = config.load(args.scenario)
        if scenario.workload.mode != "capacity":
            parser.error(f"--scenario {args.scenario}: workload.mode must be capacity")
        plan.capacity_spec, plan.slos = scenario.workload, dict(scenario.objective.slos)
    print(f"flags {json.dumps(plan.flags)}; gap {args.gap:.0f} s; measure: "
          f"{plan.measure or 'start-up only'}"
          + (f" ({args.scenario}'s workload and SLOs)" if args.scenario else ""), flush=True)
    paths = order(args.pairs)
    runs: dict[bool, list[Run]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as scratch:
        logdir = args.logs or Path(scratch)
        logdir.mkdir(parents=True, exist_ok=True)
        if args.fill:
            fill = start(plan, logdir / "fill.log", next_warm=paths[0])
            print(f"fill (cold caches): {fill.line()}", flush=True)
            time.sleep(args.gap)
        for i, warm_start in enumerate(paths):
            asked = warm.WARM if warm_start else warm.COLD
            nxt = i + 1 < len(paths) and paths[i + 1]
            run = start(plan, logdir / f"{i}-{asked}.log", next_warm=nxt)
            if run.path != asked:  # a spare that failed: said; the start stays in its pair
                print(f"start {i}: asked {asked}, took {run.path}")
            runs[warm_start].append(run)
            print(f"pair {i // 2}: {asked} {run.line()}", flush=True)
            time.sleep(args.gap)
        warm.discard_all()
    cold, hot = runs[False], runs[True]
    print(_ratio_line("start-up", [r.startup_s for r in hot], [r.startup_s for r in cold], "s"))
    if plan.measure == "capacity":
        print(_ratio_line("capacity", [r.rate for r in hot], [r.rate for r in cold], "req/s"))
    if plan.measure == "bench":
        print(_ratio_line("output throughput", [r.throughput for r in hot],
                          [r.throughput for r in cold], "tok/s"))
    for warm_start, group in runs.items():
        names = dict.fromkeys(name for run in group for name in run.phases)
        medians = {n: statistics.median(run.phases.get(n, 0.0) for run in group)
                   for n in names}
        print(f"median phases, {'warm' if warm_start else 'cold'}: {_phases(medians)}")


if __name__ == "__main__":
    main()
