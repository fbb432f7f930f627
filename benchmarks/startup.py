"""Benchmark: engine start-up, cold against warm (a spare reaper that imported vLLM already).

    .venv/bin/python benchmarks/startup.py [--pairs 4] [--model PATH] [--gap 20] [--capacity]

Each pair starts the same engine twice, one after the other, on this machine: cold (a fresh
`python -m ...` that imports vLLM) and warm (the fork of a spare prepared when the previous
engine stopped, given `--gap` seconds, as a trial's teardown, pre-launch checks and GPU
release give it). The order alternates every pair, so a drift of the machine hits both.
Prints every start (process start to a served completion) with its phases (engine/phases.py),
the medians and their ratio, with the ratio of each pair, a 95 % interval of the mean
log-ratio (a gain only when the whole interval lies below 1), and the median of each phase
for either path: where the seconds that are left go.

`--capacity` also searches each engine's capacity at an SLO (the capacity engine tests'
workload: 64-token prompts, 128-token replies, E2EL p95 <= 800 ms), to show that a warm
start is the same engine: the warm/cold capacity ratio's interval must include 1, and each
search's own interval says how far one run is from the next.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import tinymodel
from autotune.engine import warm
from autotune.engine.server import Server
from autotune.measure import capacity
from autotune.measure.loadgen import Target
from autotune.traffic import CapacitySpec, WorkloadSpec
from autotune.tuning import paired

FLAGS = {"enforce-eager": True, "max-num-seqs": 4}
SPEC = WorkloadSpec(kind="random", num_requests=32, input_len=64, output_len=128,
                    warmup_requests=8, mode="capacity",
                    capacity=CapacitySpec(tolerance=0.1, max_steps=7, repeats=2, min_step_s=3,
                                          max_step_s=8))
SLOS = {"e2el_p95_ms": 800.0}


@dataclass
class Run:
    """One engine start: seconds, the path it took, its phases, and its capacity record."""

    startup_s: float
    path: str
    phases: dict[str, float]
    capacity: dict[str, Any] | None = None

    @property
    def rate(self) -> float:
        return (self.capacity or {}).get("request_throughput") or math.nan


def start(model: str, log: Path, *, warm_start: bool, gap: float, search: bool) -> Run:
    """One start-up (and, with `search`, the capacity of the engine it started). A warm
    start's spare is prepared by a cold engine's stop `gap` seconds earlier; a cold start
    has no spare to take."""
    warm.discard_all()
    if warm_start:
        with Server(model, FLAGS, log_path=log.with_suffix(".prep.log")) as srv:
            srv.prepare_next = True
        time.sleep(gap)
    with Server(model, FLAGS, log_path=log) as srv:
        srv.prepare_next = False  # nothing after this one
        run = Run(srv.startup_s or math.nan, srv.launch_path, srv.phases)
        if search:
            run.capacity = capacity.search(
                Target(srv.url, model, srv.headers), SPEC, tokenizer_model=model, slos=SLOS,
                pids=lambda: [p.pid for p in srv.processes()])["capacity"]
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
    iv = paired.log_interval([math.log(r) for r in ratios])
    ci = "-" if iv.low is None else f"{math.exp(iv.low):.2f}-{math.exp(iv.high):.2f}"
    return (f"median cold {statistics.median(c for _, c in pairs):.1f} {unit}, warm "
            f"{statistics.median(w for w, _ in pairs):.1f} {unit}; {what} warm/cold per pair "
            f"{', '.join(f'{r:.2f}' for r in ratios)}; geometric mean {math.exp(iv.mean):.2f} "
            f"(95% CI {ci})" + (f"; {left_out} pair(s) left out: no figure" if left_out else ""))


def _phases(phases: dict[str, float]) -> str:
    return ", ".join(f"{name} {s:.1f} s" for name, s in phases.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--model", default=None, help="default: the tiny test model")
    parser.add_argument("--gap", type=float, default=20.0,
                        help="seconds between a spare's preparation and its use")
    parser.add_argument("--capacity", action="store_true",
                        help="also search each engine's capacity at the SLO")
    args = parser.parse_args()
    os.environ["AUTOTUNE_WARM_START"] = "1"  # opt-in elsewhere; this compares both paths
    model = args.model or str(tinymodel.build(preset="tiny").path)
    runs: dict[bool, list[Run]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for warm_start in ((False, True) if pair % 2 == 0 else (True, False)):
                run = start(model, Path(tmp) / f"{pair}-{warm_start}.log",
                            warm_start=warm_start, gap=args.gap, search=args.capacity)
                runs[warm_start].append(run)
                line = (f"pair {pair}: {'warm' if warm_start else 'cold'} start-up "
                        f"{run.startup_s:.1f} s (path {run.path}): {_phases(run.phases)}")
                if run.capacity is not None:
                    low, high = capacity.interval(run.capacity)
                    limit = (run.capacity.get("bottleneck") or {}).get("kind", "-")
                    line += (f"; capacity {run.rate:.1f} req/s (interval {low:.1f}-{high:.1f},"
                             f" stopped: {run.capacity.get('stopped') or '-'}, limited by:"
                             f" {limit})")
                print(line, flush=True)
    cold, hot = runs[False], runs[True]
    print(_ratio_line("start-up", [r.startup_s for r in hot], [r.startup_s for r in cold], "s"))
    if args.capacity:
        print(_ratio_line("capacity", [r.rate for r in hot], [r.rate for r in cold], "req/s"))
    for warm_start, group in runs.items():
        names = dict.fromkeys(name for run in group for name in run.phases)
        medians = {n: statistics.median(run.phases.get(n, 0.0) for run in group)
                   for n in names}
        print(f"median phases, {'warm' if warm_start else 'cold'}: {_phases(medians)}")


if __name__ == "__main__":
    main()
