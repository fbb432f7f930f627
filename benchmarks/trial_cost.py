"""Benchmark: what a trial costs in GPU time, read from any study.

    .venv/bin/python benchmarks/trial_cost.py STUDY_OR_DB [STUDY_OR_DB ...] [--study NAME]
        [--studies-dir studies] [--json]

For each study (a .db file, a study name under `--studies-dir`, or a storage URL; every
study of a database that holds several) it prints where the GPU time went, as `autotune
show` ends (`autotune.results.gputime`): trials per GPU-hour on the study's own clock
(each worker's trials from the first start to the last end, a study resumed more than
10 minutes later counted without the pause), and for the launched trials alone beside
it; the seconds and share of each activity (start-up, bursts, sustained steps, idle waits
before steps, the quality check, teardown, idle between trials); the start-up of the first
trial apart from the median of the later ones, phase by phase, with the compile cache's
hits and misses; then one row a trial. `--json` prints the same figures as JSON data.

Nothing is measured: the trial records alone are read, so it runs on any machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import optuna

from autotune.errors import ConfigError
from autotune.results import show
from autotune.results.gputime import GpuTime, TrialTime
from autotune.stored import json_data
from autotune.tuning.records.snapshot import records
from autotune.tuning.sharing import storage

COLUMNS = ("#", "counts", "ended", "start-up s", "launch", "compile", "burst s",
           "sustained s", "quality s", "wall s")


def studies(target: str, name: str | None, root: Path) -> list[optuna.Study]:
    """The studies `target` names: one, or each study of a database that holds several."""
    url, name = storage.locate(target, name, root)
    storage.check(url, create=False, write=False)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = [name] if name else optuna.get_all_study_names(storage=url)
    return [show.open_existing(url, n, root) for n in names]


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def row(t: TrialTime) -> list[str]:
    """One trial as the table prints it (`COLUMNS`)."""
    ended = " ".join(x for x in (t.outcome, t.reason) if x)
    compiled = "-" if t.compile_cache is None else t.compile_cache + (
        f" {t.compile_s:.1f} s" if t.compile_s else "")
    quality = t.spent.quality if t.spent.quality else None
    return [str(t.number), t.counts, ended, _secs(t.startup_s), t.launch or "-", compiled,
            _secs(t.spent.burst), _secs(t.spent.sustained), _secs(quality), _secs(t.wall_s)]


def table(rows: list[list[str]]) -> list[str]:
    """Plain columns, numbers right-aligned, for a terminal or a Markdown code block."""
    cells = [list(COLUMNS), *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    words = (1, 2, 4, 5)  # counts, ended, launch, compile: left-aligned

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in words else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()

    return [line(r) for r in cells]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("study_or_db", nargs="+", help="a .db file, a study name, or a URL")
    p.add_argument("--study", help="the study's name inside a storage that holds several")
    p.add_argument("--studies-dir", default="studies", type=Path)
    p.add_argument("--json", action="store_true", help="the figures as JSON data")
    args = p.parse_args(argv)
    out = []
    try:
        found = [s for target in args.study_or_db
                 for s in studies(target, args.study, args.studies_dir)]
    except ConfigError as err:
        print(f"trial_cost.py: {err}", file=sys.stderr)
        return 2
    for study in found:
        cost = GpuTime.of(records(study))
        if args.json:
            out.append({"study": study.study_name, "gpu_time": json_data(cost)})
            continue
        print(f"study {study.study_name}")
        for line in cost.lines():
            print(f"  {line}")
        for line in table([row(t) for t in cost.rows]):
            print(f"  {line}")
        print()
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
