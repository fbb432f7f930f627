"""`autotune dashboard`: optuna-dashboard of a study, naming its best as `show` does."""

from __future__ import annotations

import argparse
import sys

from autotune.cli._options import load_study, study_arguments, whole

HELP = ("optuna-dashboard of a study, naming the best trial "
        "as `show` does and showing each trial's key figures")


def add_arguments(p: argparse.ArgumentParser) -> None:
    study_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=whole(0), default=8080, help="port (0: any free one)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.tuning.sharing import storage

    load_study(args)  # a missing or foreign study is one line, before the server starts
    from autotune.results import dashboard

    url, _ = storage.locate(args.study_or_db, args.study, Path(args.studies_dir))

    def ready(address: str) -> None:
        print(f"optuna-dashboard of {url}, best trials as `autotune show` names them: "
              f"{address} (Ctrl-C stops)", file=sys.stderr, flush=True)

    dashboard.serve(url, args.host, args.port, ready)
    return 0
