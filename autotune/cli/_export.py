"""`autotune export`: one feasible configuration as a deployment artifact."""

from __future__ import annotations

import argparse
import sys

from autotune.cli._options import cost_arguments, load_study, study_arguments, whole
from autotune.errors import ConfigError

HELP = "a feasible configuration as a deployment artifact"


def add_arguments(p: argparse.ArgumentParser) -> None:
    study_arguments(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--trial", type=whole(0), help="this trial (must be feasible)")
    which.add_argument("--policy", default="balanced",
                       choices=["max-throughput", "min-latency", "balanced"],
                       help="balanced (default): the decision; max-throughput: the same where "
                       "the study measures capacity, else the highest throughput; "
                       "min-latency: the lowest latency")
    p.add_argument("--slo", action="append", default=[], metavar="KEY=MS",
                   help="only trials meeting it, e.g. ttft_p95_ms=500 (repeatable)")
    p.add_argument("--format", default="cli",
                   choices=["cli", "vllm-yaml", "compose", "k8s", "json"])
    p.add_argument("--model", help="model path or id in the artifact (default: as measured)")
    p.add_argument("--image", help="container image (default: vllm/vllm-openai of the "
                   "measured engine version)")
    p.add_argument("--max-replicas", type=whole(1), default=None,
                   help="k8s: the autoscaler's largest number of replicas (default: those "
                   "--load needs, else 4)")
    cost_arguments(p)
    p.add_argument("-o", "--output", help="write here instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune import _slo as slo

    try:
        slos = slo.parse_all(args.slo)
    except ValueError as err:
        raise ConfigError(f"export: --slo: {err}") from None
    study = load_study(args)  # a missing or foreign study is one line, before the rest loads
    from autotune.results import cost
    from autotune.results.export import formats
    from autotune.tuning import ranking
    from autotune.tuning.records.snapshot import Snapshot

    st = Snapshot.of(study)  # read once: chosen, then rendered
    trial = ranking.choose(st, trial=args.trial, policy=args.policy, slos=slos)
    model = args.model or (trial.command or ["", "", "MODEL"])[2]
    price = cost.price_of(ranking.stored_scenario(st), args.gpu_hour, args.gpus)
    sizing = cost.trial_cost(trial, price, args.load)
    text = formats.render(st, trial, args.format, model, image=args.image,
                          max_replicas=args.max_replicas, sizing=sizing)
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as err:
            raise ConfigError(f"export: cannot write {args.output}: "
                              f"{err.strerror or err}") from None
        print(f"trial #{trial.number} written to {args.output} ({args.format})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
