"""`autotune report`: one self-contained HTML file of a study."""

from __future__ import annotations

import argparse
import sys

from autotune.cli._options import cost_arguments, load_study, study_arguments, what_if

HELP = ("one self-contained HTML file: Pareto front, history, "
        "importances, guardrail, every trial")


def add_arguments(p: argparse.ArgumentParser) -> None:
    study_arguments(p)
    p.add_argument("-o", "--output", help="the HTML file (default: STUDY-report.html)")
    p.add_argument("--slo", action="append", default=[], metavar="KEY=MS",
                   help="add a section re-ranking the trials under this SLO (repeatable)")
    cost_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    rerank = what_if(args.slo, "report")
    st = load_study(args)  # a missing or foreign study is one line, before the page loads
    from autotune.results.report import page

    out = page.write(st, Path(args.output or f"{st.study_name}-report.html"), rerank,
                     load=args.load, gpu_hour=args.gpu_hour, gpus=args.gpus)
    print(f"report of study {st.study_name} ({len(st.trials)} trials) written to {out}",
          file=sys.stderr)
    return 0
