"""Benchmark: a warm restart against vLLM's own derived settings, in pairs of both orders.

    .venv/bin/python benchmarks/warm_restart.py SCENARIO.yaml [--flags JSON] [--pairs 2]
        [--out DIR] [--json FILE] [--cache DIR] [--min-step-s S] [--max-step-s S]
        [--max-steps N]

Launches the configuration `--flags` (a JSON object of `vllm serve` flags, on top of the
scenario's fixed `engine.flags`; default: none, vLLM's defaults) as the scenario's study
would launch it (its compile cache under `--out`, the flags that hold the compile key, a
forked engine core on a GPU) and as vLLM derives it (nothing held, its own cache, a
spawned engine core), `--pairs` times each, vLLM's side first in even pairs and last in
odd ones (`autotune.verify.warmcheck`). Every run searches its capacity at the scenario's
SLOs with the scenario's workload. Prints each run (capacity and bracket, KV cache, TTFT
and TPOT p95 at capacity, start-up and its compile-cache outcome), then warm over vLLM's
for capacity, KV cache tokens and the latencies, with the pairs' 95 % interval: "no change
shown" when it holds 1. The first warm run fills an empty cache (a miss); later ones hit.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from autotune import config
from autotune.stored import json_data
from autotune.tuning import study as study_mod
from autotune.verify import warmcheck


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", type=Path)
    ap.add_argument("--flags", default="{}", help="JSON object of vllm serve flags")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="folder for caches and logs")
    ap.add_argument("--json", type=Path, default=None, help="write every run here")
    ap.add_argument("--cache", type=Path, default=None,
                    help="the warm side's compile cache (default: OUT/compile-cache; a "
                         "study's folder's compile-cache to restart from its cache)")
    ap.add_argument("--min-step-s", type=float, help="the capacity steps' shortest length")
    ap.add_argument("--max-step-s", type=float, help="and their longest")
    ap.add_argument("--max-steps", type=int, help="steps per capacity search")
    args = ap.parse_args(argv)
    scenario = config.load(args.scenario)
    if not scenario.objective.slos:
        ap.error(f"{args.scenario}: objective.slos is empty: the check measures capacity")
    steps = {k: v for k, v in (("min_step_s", args.min_step_s), ("max_step_s", args.max_step_s),
                               ("max_steps", args.max_steps)) if v is not None}
    workload = scenario.workload
    scenario = scenario.model_copy(update={"workload": workload.model_copy(update={
        "mode": "capacity", "capacity": workload.capacity.model_copy(update=steps)})})
    if args.cache is not None:
        scenario = scenario.model_copy(update={"engine": scenario.engine.model_copy(
            update={"compile_cache": str(args.cache.resolve())})})
    flags = {**scenario.engine.flags, **json.loads(args.flags)}
    out = args.out or Path(tempfile.mkdtemp(prefix="warm-restart-"))
    print(f"logs and caches in {out}", file=sys.stderr)

    def show(run: warmcheck.WarmRun) -> None:
        cap = f"{run.capacity:.3g} req/s ({run.low:.3g}-{run.high or run.low:.3g})" \
            if run.capacity and run.low else "no capacity"
        print(f"pair {run.pair} {run.side:4s}: {cap}, KV {run.kv_cache_tokens} tokens, "
              f"TTFT p95 {run.ttft_p95_ms}, TPOT p95 {run.tpot_p95_ms} ms at capacity; "
              f"start-up {run.startup_s or 0:.1f} s, compile {run.compile_cache or '-'}; "
              f"{run.outcome}", flush=True)

    check = warmcheck.run_check(scenario, study_mod.resolve_model(scenario), flags,
                                args.pairs, out, on_run=show)
    for line in check.lines():
        print(line)
    if args.json:
        args.json.write_text(json.dumps(json_data(check), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
