"""Benchmark: two CPU engines side by side, vLLM's own thread binding against autotune's.

    .venv/bin/python benchmarks/side_by_side.py [--pairs 3] [--requests 256] [--logs DIR]

Each round starts two CPU engines at once (as `tune --gpus 0,1` or `validate --gpus 0,1`
run them), waits until both serve, then sends each the same fixed workload at the same time.
Two kinds of round alternate (default-placed, placed-default, ...), so a drift of the
machine hits both:

- default: `VLLM_CPU_OMP_THREADS_BIND` unset, vLLM's `auto`, which binds every engine's
  model worker as if it were alone (on 2 cores: both on core 0);
- placed: `autotune.engine.cpuplace.placement`, a share of the cores for each.

Prints each round (both start-ups, both engines' output throughput) and, per pair of
rounds, placed/default for the slower start-up and for the pair's throughput (both engines'
output tokens over the time until the slower one finished: what a side-by-side pair costs),
with a 95 % interval of the mean log-ratio: a difference only when the interval excludes 1.
The balance (the slower engine's throughput over the faster one's) says whether the two
engines of a round were measured on equal terms, which `validate --gpus` relies on.
Run it on an otherwise idle machine; the figures are ratios of rounds made side by side.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autotune import tinymodel
from autotune.engine import cpuplace
from autotune.engine.server import Server
from autotune.measure import bench
from autotune.measure.loadgen import Target
from autotune.traffic import WorkloadSpec
from autotune.verify import pairstats

FLAGS = {"enforce-eager": True}
WORKLOAD = WorkloadSpec(kind="random", num_requests=256, input_len=64, output_len=128,
                        max_concurrency=16, warmup_requests=4, mode="fixed")


def _engine(model: str, slot: int, placed: bool, log: Path, spec: WorkloadSpec,
            barrier: threading.Barrier) -> tuple[float, float, float]:
    """Start one engine, wait for its twin, send the workload: start-up s, output tokens
    and the seconds from the common start to the last one."""
    env = cpuplace.placement(slot, 2) if placed else {}
    with Server(model, FLAGS, env=env, log_path=log) as srv:
        startup = srv.startup_s or math.nan
        barrier.wait()  # both up: the workloads start together
        t0 = time.monotonic()
        result = bench.benchmark(bench.Load(Target(srv.url, model, srv.headers), spec, model,
                                            pids=lambda: [p.pid for p in srv.processes()]))
        took = time.monotonic() - t0
        barrier.wait()  # neither engine stops while the other is still measured
        return startup, result.total_output_tokens, took


def round_(model: str, placed: bool, logdir: Path, index: int,
           spec: WorkloadSpec) -> list[tuple[float, float, float]]:
    """Two engines at once, both placed or neither: what `_engine` says of each."""
    barrier = threading.Barrier(2)
    kind = "placed" if placed else "default"
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(_engine, model, slot, placed,
                               logdir / f"{index:02d}-{kind}-{slot}.log", spec, barrier)
                   for slot in (0, 1)]
        return [f.result() for f in futures]


def _ratio(what: str, placed: list[float], default: list[float]) -> str:
    logs = [math.log(p / d) for p, d in zip(placed, default, strict=True)]
    iv = pairstats.log_interval(logs)
    ci = "-" if iv.low is None else f"{math.exp(iv.low):.2f}-{math.exp(iv.high):.2f}"
    return (f"{what}: placed/default per pair {', '.join(f'{math.exp(x):.2f}' for x in logs)};"
            f" geometric mean {math.exp(iv.mean):.2f} (95% CI {ci})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=WORKLOAD.num_requests)
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep every engine's log in this folder (default: discarded)")
    args = parser.parse_args()
    os.environ.pop(cpuplace.VAR, None)
    model = str(tinymodel.build(preset="tiny").path)
    spec = WORKLOAD.model_copy(update={"num_requests": args.requests})
    print(f"cores {cpuplace.physical_cores()}; placed: "
          f"{[cpuplace.bind(s, 2, cpuplace.physical_cores()) for s in (0, 1)]}; "
          f"{spec.num_requests} requests of {spec.input_len}+{spec.output_len} tokens, "
          f"{spec.max_concurrency} at a time, to each engine", flush=True)
    figures: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    with tempfile.TemporaryDirectory() as scratch:
        logdir = args.logs or Path(scratch)
        logdir.mkdir(parents=True, exist_ok=True)
        index = 0
        for pair in range(args.pairs):
            for placed in ((False, True) if pair % 2 == 0 else (True, False)):
                index += 1
                (s0, n0, t0), (s1, n1, t1) = round_(model, placed, logdir, index, spec)
                figures[placed][0].append(max(s0, s1))
                figures[placed][1].append((n0 + n1) / max(t0, t1))
                r0, r1 = n0 / t0, n1 / t1
                print(f"round {index} ({'placed' if placed else 'default'}): start-ups "
                      f"{s0:.1f} and {s1:.1f} s; output {r0:.0f} and {r1:.0f} tok/s (balance "
                      f"{min(r0, r1) / max(r0, r1):.2f}); pair {figures[placed][1][-1]:.0f} "
                      "tok/s", flush=True)
                time.sleep(3)
    for what, i in (("slower start-up", 0), ("pair throughput", 1)):
        print(f"median default {statistics.median(figures[False][i]):.1f}, placed "
              f"{statistics.median(figures[True][i]):.1f}; "
              + _ratio(what, figures[True][i], figures[False][i]))


if __name__ == "__main__":
    main()
