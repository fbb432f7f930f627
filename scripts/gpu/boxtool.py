"""Small helpers of box.sh: the study's name, its trial count, and what one box did.

    boxtool.py name SCENARIO [autotune tune options]   the study name tune will use
    boxtool.py count DB                                trials in a SQLite study (0: none)
    boxtool.py report DB STUDY --since N [--json FILE] [--set KEY=VALUE ...]

`report` prints one line per trial numbered N or above (state, reason, the time
split of each trial record's `timings`, the engine's own start-up figures of its
`startup`, output throughput) and writes them, with the box's
set-up figures given by --set, as JSON. Runs on the device and here.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path


def study_name(argv: list[str]) -> str:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("scenario")
    parser.add_argument("--study")
    args, _ = parser.parse_known_args(argv)
    if args.study:
        return args.study
    from autotune import config

    return str(config.load(args.scenario).name)


def count(db: str) -> int:
    if not Path(db).exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            return con.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    except sqlite3.Error:
        return 0


def _f(value: object, fmt: str = "{:.0f}") -> str:
    return fmt.format(value) if isinstance(value, (int, float)) else "-"


def report(db: str, study: str, since: int, json_path: str | None,
           extra: dict[str, str]) -> None:
    import optuna

    from autotune.tuning.records.snapshot import records

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.load_study(study_name=study, storage=f"sqlite:///{db}")
    rows = []
    for t in records(st):
        if t.number < since:
            continue
        rows.append({
            "number": t.number, "state": t.state.name, "outcome": t.outcome,
            "reason": t.reason, "baseline": t.baseline,
            "duplicate_of": t.duplicate_of, "flags": t.flags,
            "timings": t.timings, "startup": t.startup.as_dict(),
            "output_throughput": t.metrics.value("output_throughput"),
            "wall_s": (t.datetime_complete - t.datetime_start).total_seconds()
            if t.datetime_complete and t.datetime_start else None,
            "device": t.device, "engine_version": t.engine_version,
        })
    print(f"{'#':>3} {'state':8} {'reason':14} {'wall':>5} {'start':>5} {'bench':>5} "
          f"{'guard':>5} {'down':>4} | {'compile':>7} {'graphs':>6} {'init':>5} "
          f"{'kv tokens':>10} | {'out tok/s':>9}  flags")
    for r in rows:
        tm, su = r["timings"] or {}, r["startup"] or {}
        print(f"{r['number']:>3} {r['state']:8} {(r['reason'] or '-')[:14]:14} "
              f"{_f(r['wall_s']):>5} {_f(tm.get('startup_s')):>5} "
              f"{_f(tm.get('benchmark_s')):>5} {_f(tm.get('guardrail_s')):>5} "
              f"{_f(tm.get('teardown_s')):>4} | {_f(su.get('compile_s'), '{:.1f}'):>7} "
              f"{_f(su.get('graph_capture_s'), '{:.1f}'):>6} "
              f"{_f(su.get('engine_init_s'), '{:.1f}'):>5} "
              f"{_f(su.get('kv_cache_tokens')):>10} | {_f(r['output_throughput']):>9}  "
              f"{r['baseline'] or ''} {json.dumps(r['flags'] or {}, sort_keys=True)}")
    print(f"study {study}: {len(st.trials)} trial(s) in {db}, {len(rows)} in this box")
    if json_path:
        box = {k: _number(v) for k, v in extra.items()}
        Path(json_path).write_text(json.dumps(
            {"study": study, "trials_total": len(st.trials), "box": box, "trials": rows},
            indent=2, default=str))


def _number(text: str) -> object:
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        return text


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "name":
        print(study_name(rest))
    elif cmd == "count":
        print(count(rest[0]))
    elif cmd == "report":
        p = argparse.ArgumentParser(prog="boxtool.py report")
        p.add_argument("db")
        p.add_argument("study")
        p.add_argument("--since", type=int, default=0)
        p.add_argument("--json")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
        a = p.parse_args(rest)
        report(a.db, a.study, a.since, a.json,
               dict(kv.split("=", 1) for kv in a.set if "=" in kv))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
