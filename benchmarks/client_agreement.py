"""Does autotune's load generator measure what `vllm bench serve` measures, on the same server?

Runs the same random workload (lengths, rate, request count) alternately with autotune's
client (`autotune.measure.bench`) and with vLLM's own (`vllm bench serve`, in the long-lived helper
of `autotune.measure.vllmbench`), `--pairs` times, the order swapped every pair so that a drift of
the machine hits both alike. For each run it prints output throughput and median TTFT,
TPOT and ITL, and autotune's event-loop lag; then the ratio autotune/vLLM of each figure
per pair with the mean. Agreement means ratios within 5 % of 1.

    .venv/bin/python benchmarks/client_agreement.py                 # CPU engine, tiny model
    .venv/bin/python benchmarks/client_agreement.py --url URL --api-key KEY --model PATH

Without `--url` it starts the tiny model on the installed engine (on this 2-core machine
the engine, the client and the helper share two cores: a loaded host, on purpose).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from autotune import tinymodel
from autotune.engine.server import Server
from autotune.measure import bench, vllmbench
from autotune.measure.loadgen import Target
from autotune.traffic import WorkloadSpec

FIGURES = (("output tok/s", "output_throughput"), ("median TTFT ms", "median_ttft_ms"),
           ("median TPOT ms", "median_tpot_ms"), ("median ITL ms", "median_itl_ms"))


def ours(target: Target, spec: WorkloadSpec, tokenizer: str, seed: int) -> dict:
    summary = bench.benchmark(bench.Load(target, spec.model_copy(update={"seed": seed}),
                                         tokenizer))
    return {**{key: summary.value(key) for _, key in FIGURES},
            "lag_p99_ms": summary.client.lag_p99_ms,
            "completed": summary.completed, "failed": summary.failed}


def theirs(helper: vllmbench.Helper, target: Target, spec: WorkloadSpec, tokenizer: str,
           seed: int) -> dict:
    key = target.headers.get("Authorization", "").removeprefix("Bearer ") or None
    argv = vllmbench.step_args(spec, vllmbench.Endpoint(target.url, target.model, tokenizer),
                               vllmbench.Invocation(spec.request_rate, spec.num_requests, seed))
    result = helper.step(argv, api_key=key)
    return {**{k: result.value(k) for _, k in FIGURES}, "lag_p99_ms": None,
            "completed": result.completed, "failed": result.failed}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running server (default: start the tiny model)")
    p.add_argument("--api-key")
    p.add_argument("--model", help="served model name and tokenizer (default: tiny model)")
    p.add_argument("--rate", type=float, default=8.0, help="requests/s (inf: all at once)")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--prefix-len", type=int, default=0)
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--json", type=Path, help="write every run and the ratios here")
    args = p.parse_args(argv)
    model = args.model or str(tinymodel.build(preset="tiny").path)
    spec = WorkloadSpec(kind="random", num_requests=args.requests, input_len=args.input_len,
                        output_len=args.output_len, prefix_len=args.prefix_len,
                        request_rate=args.rate, warmup_requests=0)
    tmp = Path(tempfile.mkdtemp(prefix="agreement-"))
    server = None
    if args.url:
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        target = Target(args.url.rstrip("/"), model, headers)
    else:
        server = Server(model, {"enforce-eager": True}, log_path=tmp / "engine.log")
        server.start()
        target = Target(server.url, model, server.headers)
    runs: list[dict] = []
    try:
        with vllmbench.Helper(tmp / "vllm-bench.log") as helper:
            print(f"vllm bench serve helper ready in {helper.start_s:.1f} s "
                  f"(vLLM {helper.version}); {args.requests} requests at {args.rate:g} req/s, "
                  f"{args.input_len} in / {args.output_len} out", flush=True)
            # one uncounted run each: the first requests of a fresh engine are slow
            ours(target, spec.model_copy(update={"num_requests": 16}), model, 99)
            theirs(helper, target, spec.model_copy(update={"num_requests": 16}), model, 99)
            for pair in range(args.pairs):
                order = ("autotune", "vllm") if pair % 2 == 0 else ("vllm", "autotune")
                for client in order:
                    t0 = time.monotonic()
                    fig = ours(target, spec, model, pair) if client == "autotune" else \
                        theirs(helper, target, spec, model, pair)
                    runs.append({"pair": pair, "client": client, **fig,
                                 "seconds": round(time.monotonic() - t0, 1)})
                    print(f"pair {pair} {client:8s} " + "  ".join(
                        f"{label} {fig[key]:.2f}" for label, key in FIGURES
                        if fig.get(key) is not None)
                        + (f"  lag p99 {fig['lag_p99_ms']:.1f} ms" if fig["lag_p99_ms"]
                           is not None else "") + f"  ({runs[-1]['seconds']} s)", flush=True)
    finally:
        if server is not None:
            server.stop()
    ratios = {}
    for label, key in FIGURES:
        per_pair = []
        for pair in range(args.pairs):
            a = next(r[key] for r in runs if r["pair"] == pair and r["client"] == "autotune")
            b = next(r[key] for r in runs if r["pair"] == pair and r["client"] == "vllm")
            if a and b:
                per_pair.append(a / b)
        if per_pair:
            ratios[label] = per_pair
            mean = statistics.fmean(per_pair)
            print(f"autotune / vllm bench serve, {label}: "
                  + ", ".join(f"{r:.3f}" for r in per_pair)
                  + f"  mean {mean:.3f}  {'within' if abs(mean - 1) <= 0.05 else 'OUTSIDE'} 5 %")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "runs": runs, "ratios": ratios}, indent=2,
                                        default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
