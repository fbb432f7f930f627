"""Benchmark: engine start-up, cold against warm (a spare reaper that imported vLLM already).

    .venv/bin/python benchmarks/startup.py [--pairs 4] [--model PATH] [--gap 20]

Each pair starts the same engine twice, one after the other, on this machine: cold (a fresh
`python -m ...` that imports vLLM) and warm (the fork of a spare prepared when the previous
engine stopped, given `--gap` seconds, as a trial's teardown, pre-launch checks and GPU
release give it). The order alternates every pair, so a drift of the machine hits both.
Prints every start (process start to a served completion) with its phases (engine/phases.py),
the medians and their ratio, with the ratio of each pair, a 95 % interval of the mean
log-ratio (a gain only when the whole interval lies below 1), and the median of each phase
for either path: where the seconds that are left go.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

from autotune import tinymodel
from autotune.engine import warm
from autotune.engine.server import Server
from autotune.tuning import paired

FLAGS = {"enforce-eager": True, "max-num-seqs": 4}


def start(model: str, log: Path, *, warm_start: bool, gap: float
          ) -> tuple[float, str, dict[str, float]]:
    """One start-up in seconds, the path it took and its phases. A warm start's spare is prepared by
    a cold engine's stop `gap` seconds earlier; a cold start has no spare to take."""
    warm.discard_all()
    if warm_start:
        with Server(model, FLAGS, log_path=log.with_suffix(".prep.log")) as srv:
            srv.prepare_next = True
        time.sleep(gap)
    with Server(model, FLAGS, log_path=log) as srv:
        srv.prepare_next = False  # nothing after this one
        return srv.startup_s or math.nan, srv.launch_path, srv.phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--model", default=None, help="default: the tiny test model")
    parser.add_argument("--gap", type=float, default=20.0,
                        help="seconds between a spare's preparation and its use")
    args = parser.parse_args()
    model = args.model or str(tinymodel.build(preset="tiny").path)
    cold, hot = [], []
    split: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            for warm_start in order:
                s, path, phases = start(model, Path(tmp) / f"{pair}-{warm_start}.log",
                                        warm_start=warm_start, gap=args.gap)
                (hot if warm_start else cold).append(s)
                split[warm_start].append(phases)
                print(f"pair {pair}: {'warm' if warm_start else 'cold'} start-up {s:.1f} s "
                      f"(path {path}): {_phases(phases)}", flush=True)
    ratios = [h / c for h, c in zip(hot, cold, strict=True)]
    iv = paired.log_interval([math.log(r) for r in ratios])
    print(f"median cold {statistics.median(cold):.1f} s, warm {statistics.median(hot):.1f} s; "
          f"warm/cold per pair {', '.join(f'{r:.2f}' for r in ratios)}; geometric mean "
          f"{math.exp(iv.mean):.2f} (95% CI "
          + ("-" if iv.low is None else f"{math.exp(iv.low):.2f}-{math.exp(iv.high):.2f}")
          + ")")
    for warm_start, runs in split.items():
        names = dict.fromkeys(name for run in runs for name in run)
        medians = {n: statistics.median(run.get(n, 0.0) for run in runs) for n in names}
        print(f"median phases, {'warm' if warm_start else 'cold'}: {_phases(medians)}")


def _phases(phases: dict[str, float]) -> str:
    return ", ".join(f"{name} {s:.1f} s" for name, s in phases.items())


if __name__ == "__main__":
    main()
