"""`autotune bench`: its options, read into one `measure.benchrun.BenchRun`; the result
printed and saved."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.cli import _options as options
from autotune.cli._options import positive
from autotune.errors import ConfigError
from autotune.traffic import DATASETS, TRACES, CapacitySpec, WorkloadSpec

if TYPE_CHECKING:
    from autotune.measure.measurement import Measurement

HELP = "benchmark a running server or one it launches"
DESCRIPTION = ("Benchmark a vLLM server like `vllm bench serve`. Pass vLLM flags for a "
               "launched server after `--`.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="base URL of a running server, e.g. http://127.0.0.1:8000")
    where.add_argument("--model", help="model path or Hugging Face id: launch a server for it "
                       "(vLLM flags after `--`)")
    p.add_argument("--served-model-name", help="model name to send (default: --model, or the "
                   "server's first model with --url)")
    p.add_argument("--api-key", help="API key of a running server")
    p.add_argument("--tokenizer", help="tokenizer for building prompts (default: the model)")
    p.add_argument("--workload", default="random",
                   choices=["random", "jsonl", "sharegpt", "chat", "text", "trace"],
                   help="the traffic: random token counts (default), prompts from a JSONL or "
                   "ShareGPT file, chat conversations, shipped real text, or a trace")
    p.add_argument("--path", help="prompt file for jsonl and sharegpt workloads; the trace "
                   "file (CSV or JSONL) for a trace")
    p.add_argument("--dataset", choices=[*DATASETS, *TRACES],
                   help="text workload: the shipped real text (edit: answers copy the prompt; "
                   "chat: open requests); trace: the shipped trace (day)")
    p.add_argument("--time-scale", type=positive, default=1.0,
                   help="trace: replay this many times faster than recorded (with "
                   "--capacity the search finds the largest that meets the SLOs)")
    p.add_argument("--block-tokens", type=int, default=None,
                   help="trace: prompt tokens per hash id (default 512, the Mooncake "
                   "traces'; 64 for the shipped trace)")
    p.add_argument("--api", choices=["completions", "chat"], default="completions",
                   help="the OpenAI endpoint requests go to (default completions)")
    p.add_argument("--input-len", type=int, default=256,
                   help="random: prompt tokens per request (default 256)")
    p.add_argument("--output-len", type=int, default=128,
                   help="tokens generated per request (default 128)")
    p.add_argument("--range-ratio", type=float, default=0.0,
                   help="random: lengths vary uniformly by this share around --input-len "
                   "and --output-len, in [0, 1) (default 0: exact)")
    p.add_argument("--prefix-len", type=int, default=0,
                   help="random: tokens of a prefix every prompt shares (default 0)")
    p.add_argument("--num-requests", type=int, default=100,
                   help="requests to send, warm-up excluded (default 100)")
    p.add_argument("--conversations", type=int, default=8,
                   help="chat workload: conversations sent side by side (default 8)")
    p.add_argument("--turns", type=int, default=4,
                   help="chat workload: turns of each conversation, each with its history "
                   "(default 4)")
    p.add_argument("--system-len", type=int, default=256,
                   help="chat workload: tokens of the system prompt the conversations share "
                   "(default 256)")
    p.add_argument("--concurrency", type=int, default=None, help="max requests in flight")
    p.add_argument("--request-rate", type=float, default=math.inf,
                   help="requests/s (Poisson; default inf: all at once)")
    p.add_argument("--burstiness", type=float, default=1.0,
                   help="shape of the arrival gaps with a finite --request-rate: 1 is "
                   "Poisson, below 1 burstier, above 1 more even (default 1)")
    p.add_argument("--warmup", type=int, default=0, help="uncounted requests sent first")
    p.add_argument("--max-duration", type=float, default=None,
                   help="send no request after this many seconds (default: no limit)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the prompts and the arrival times (default 0)")
    p.add_argument("--slo", action="append", default=[], metavar="KEY=MS",
                   help="e.g. ttft_ms=500 (per request: goodput) or ttft_p95_ms=500 (a percentile: "
                   "with --capacity); repeatable")
    cap = p.add_argument_group("capacity at SLO")
    cap.add_argument("--capacity", action="store_true",
                     help="find the highest request rate that meets the percentile SLOs "
                          "(--slo ttft_p95_ms=500 ...): a burst, then bisection")
    cap.add_argument("--tolerance", type=float, default=0.05,
                     help="stop when the bracket is this narrow (relative)")
    cap.add_argument("--max-steps", type=int, default=8, help="steps in all, burst included")
    cap.add_argument("--repeats", type=int, default=2, help="runs at the final rate (spread)")
    cap.add_argument("--min-step-s", type=float, default=None,
                     help="a Poisson step lasts at least this many seconds (default 20: "
                     "long enough for a steady state)")
    cap.add_argument("--ramp", type=float, default=None,
                     help="share of a step's arrivals left out as ramp-up (default 0.2)")
    cap.add_argument("--backlog-limit", type=float, default=None,
                     help="fail a step whose requests in flight grow by more than this "
                     "share of its arrivals (default 0.05)")
    cap.add_argument("--min-success-rate", type=float, default=1.0,
                     help="fail a step where a smaller share of its requests succeeded "
                     "(default 1.0: all)")
    p.add_argument("--json", action="store_true",
                   help="print the result as JSON on stdout (the tables go to stderr)")
    p.add_argument("-o", "--output", type=Path, help="also write the result (JSON) here")
    p.add_argument("--startup-timeout", type=positive, default=900.0,
                   help="with --model: seconds the engine may take to serve (default 900)")
    p.add_argument("--log", type=Path, default=None,
                   help="with --model: the engine's log (default: beside --output as "
                   "NAME.engine.log, else in a new temporary folder, named on stderr)")
    p.set_defaults(func=run)


def _spec(args: argparse.Namespace) -> WorkloadSpec:
    from pydantic import ValidationError

    try:
        return WorkloadSpec(
            kind=args.workload, api=args.api, num_requests=args.num_requests,
            input_len=args.input_len, output_len=args.output_len, range_ratio=args.range_ratio,
            prefix_len=args.prefix_len, path=args.path, dataset=args.dataset,
            conversations=args.conversations,
            turns=args.turns, system_len=args.system_len, request_rate=args.request_rate,
            burstiness=args.burstiness, max_concurrency=args.concurrency,
            warmup_requests=args.warmup, max_duration_s=args.max_duration, seed=args.seed,
            time_scale=args.time_scale,
            **({"block_tokens": args.block_tokens} if args.block_tokens else {}),
            mode="capacity" if args.capacity else "fixed",
            capacity=CapacitySpec(tolerance=args.tolerance, max_steps=args.max_steps,
                                  repeats=args.repeats, min_success_rate=args.min_success_rate,
                                  **{k: v for k, v in (("min_step_s", args.min_step_s),
                                                       ("ramp_fraction", args.ramp),
                                                       ("backlog_limit", args.backlog_limit))
                                     if v is not None}))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "workload"
        raise ConfigError(f"bench: {where}: {first['msg'].removeprefix('Value error, ')}"
                          ) from None


def _checked(spec: WorkloadSpec) -> WorkloadSpec:
    """The spec, its trace read before any engine starts (a bad line is one error line)."""
    if spec.kind == "trace":
        from autotune import _traces as traces

        try:
            traces.of(spec)
        except ConfigError as err:
            raise ConfigError(f"bench: --path: {err}") from None
    return spec


def _split_slos(specs: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    """(goodput SLOs like ttft_ms=500, percentile SLOs like ttft_p95_ms=500): a key that
    names a statistic is a percentile SLO (`slo.parse`), one without is vLLM's goodput SLO
    (which also takes vLLM's own `ttft:500`)."""
    from autotune import _slo as slo
    from autotune.measure import metrics

    goodput, percentile = [], {}
    for spec in specs:
        spec_eq = spec.replace(":", "=", 1)
        if "_" not in spec_eq.partition("=")[0].strip().removesuffix("_ms"):
            goodput.append(spec)
            continue
        try:
            goal = slo.parse(spec_eq)
        except ValueError as err:
            raise ConfigError(f"bench: --slo {spec}: {err}") from None
        percentile[goal.key] = goal.limit_ms
    try:
        return metrics.goodput_slos(goodput), percentile
    except ValueError as err:
        raise ConfigError(f"bench: --slo: {err}") from None


def run(args: argparse.Namespace) -> int:
    # The measuring layers (aiohttp, numpy, the engine's launcher) are imported here, not
    # at the top: `build_parser` imports every command's module, and these tripled the
    # start-up of every other command (`autotune --help` 0.58 s against 0.19 s).
    from autotune.measure import benchrun

    spec = _checked(_spec(args))
    if args.output is not None and not args.output.parent.is_dir():
        # Found out now, not after the benchmark, whose result would then be lost.
        raise ConfigError(f"bench: --output {args.output}: directory {args.output.parent} "
                          "does not exist")
    slos, percentile = _split_slos(args.slo)
    if percentile and not args.capacity:
        raise ConfigError(f"bench: --slo {next(iter(percentile))}: percentile SLOs need "
                          "--capacity (plain runs take per-request SLOs such as ttft_ms=500)")
    server: benchrun.Remote | benchrun.EngineLaunch
    if args.url:
        if args.engine_args:
            raise ConfigError("bench: vLLM flags after `--` need --model, not --url")
        server = benchrun.Remote(args.url, args.api_key, args.served_model_name)
    else:
        benchrun.check_launch(args.model, args.engine_args)
        log = benchrun.engine_log(args.log, args.output)
        if args.log is None:  # a place autotune chose: say where it is
            print(f"autotune bench: engine log {log}", file=sys.stderr, flush=True)
        server = benchrun.EngineLaunch(args.model, tuple(args.engine_args),
                                       args.served_model_name, log, args.startup_timeout)
    report = benchrun.run(benchrun.BenchRun(spec, server, slos, percentile, args.tokenizer))
    _print(report.measurement, stderr=args.json)
    text = json.dumps(report.as_dict(), indent=2, default=str)
    if args.output:
        try:
            args.output.write_text(text)
        except OSError as err:
            raise ConfigError(f"bench: cannot write {args.output}: "
                              f"{err.strerror or err}") from None
    if args.json:
        print(text)
    return 0


def _print(result: Measurement, stderr: bool = False) -> None:
    from rich.table import Table

    from autotune.measure import capacitytext
    from autotune.measure.bench import summary_rows

    console = options.console(stderr=stderr)

    table = Table(title="autotune bench", show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="right")
    for label, value in summary_rows(result):
        table.add_row(label, value)
    console.print(table)
    if result.replayed is not None:  # a trace: which part of it was measured
        console.print(result.replayed.text())
    if (cap := result.capacity) is not None:
        from autotune.results.views import print_capacity

        print_capacity(cap, capacitytext.slo_keys(cap), console)
