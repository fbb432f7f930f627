"""One worker of `autotune tune --gpus`: `python -m autotune.cli.worker SCENARIO ...`.

`autotune.tuning.sharing.workers` starts one per GPU; people never run it. It is `autotune
tune` for one worker: the study is the parent's (storage URL via `AUTOTUNE_STORAGE`, never
the command line), trials come from the parent's counter file (`--tickets`), and once the
parent is gone (`--parent-pid`) it stops as on SIGTERM. Its own parser keeps these options
out of `autotune tune`; the rest is `tune.tune_here`, so a worker tunes as a single tuner
does, its `tune.log` lines tagged with its id.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from autotune.cli import main as cli
from autotune.cli._options import Parser, duration, study_name, whole
from autotune.cli._tune import TuneCommand, tune_here


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="autotune worker", description=(
        "One worker of `autotune tune --gpus` (started by it, one per GPU)."))
    p.add_argument("scenario", help="the scenario YAML of the run")
    p.add_argument("--study", type=study_name, required=True, help="the run's study name")
    p.add_argument("--studies-dir", required=True, help="databases and trial logs")
    p.add_argument("--worker-id", type=study_name, required=True, metavar="NAME",
                   help="this worker's name in the trial records and tune.log")
    p.add_argument("--trials", type=whole(1), required=True,
                   help="the run's trials in all (shared through --tickets)")
    p.add_argument("--timeout", type=duration, help="stop starting trials after this long")
    p.add_argument("--tickets", required=True, help="the run's shared trial counter file")
    p.add_argument("--parent-pid", type=int, required=True,
                   help="the `tune --gpus` process: once it is gone, stop")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def work() -> int:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        print(f"autotune tune: checking {args.scenario} against the installed engine",
              flush=True)
        command = TuneCommand(args.scenario, study=args.study, studies_dir=args.studies_dir,
                              trials=args.trials, timeout=args.timeout,
                              worker_id=args.worker_id)
        return tune_here(command, run_tickets=Path(args.tickets), parent_pid=args.parent_pid)

    return cli.guarded(work)


if __name__ == "__main__":
    sys.exit(main())
