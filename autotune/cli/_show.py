"""`autotune show`: every trial of a study, its best or Pareto set, or one trial in full."""

from __future__ import annotations

import argparse
import json

from autotune.cli import _options as options
from autotune.cli._options import cost_arguments, load_study, study_arguments, what_if, whole
from autotune.errors import ConfigError

HELP = "the trials of a study, its best or Pareto set"


def add_arguments(p: argparse.ArgumentParser) -> None:
    study_arguments(p)
    p.add_argument("--trial", type=whole(0), help="one trial in full, with its quality figures")
    p.add_argument("--slo", action="append", default=[], metavar="KEY=MS",
                   help="what if: re-rank the trials under this SLO from their recorded "
                   "capacity steps, e.g. ttft_p95_ms=300 (repeatable)")
    cost_arguments(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    st = load_study(args)  # a missing or foreign study is one line, before the views load
    from autotune.results import views
    from autotune.results.summary import Summary

    if args.trial is not None:
        from autotune.tuning.records.snapshot import records

        trials = records(st)
        if not 0 <= args.trial < len(trials):
            raise ConfigError(f"show: no trial {args.trial} (the study has {len(trials)})")
        if args.load is not None:
            raise ConfigError("show: --load sizes the study's winner and defaults; leave "
                              "out --trial")
        if args.json:
            print(json.dumps(trials[args.trial].as_dict(), indent=2, default=str))
        else:
            views.print_trial(trials[args.trial], options.console())
        return 0
    data = Summary.of(st, what_if(args.slo, "show"), load=args.load, gpu_hour=args.gpu_hour,
                      gpus=args.gpus)
    if args.json:
        print(json.dumps(data.as_json(), indent=2, default=str))
    else:
        views.print_summary(data, options.console())
    return 0
