"""`autotune explain`: which of the winner's flags carry its gain.

Opens the study as `validate` does (the runs are stored in it), runs the ablation
(`autotune.tuning.ablation`) on fresh engines and prints each flag's share of the gain and
the smallest configuration tied with the winner, which `export` and `validate` then choose.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from autotune.cli import _options as options
from autotune.cli._options import whole

HELP = "which of the winner's flags carry its gain: each taken away on a fresh engine; " \
    "the smallest tied configuration becomes export's choice"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("study_or_db", help="a .db file, a study name under studies/, or a URL")
    p.add_argument("--study", help="study name inside the storage")
    p.add_argument("--studies-dir", default="studies")
    p.add_argument("--trial", type=whole(0),
                   help="explain this feasible trial (default: the study's best)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON on "
                   "stdout; progress goes to stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    from autotune.results import show
    from autotune.tuning import ablation
    from autotune.tuning.sharing import storage
    from autotune.verify import validate

    root = Path(args.studies_dir)
    url, name = storage.locate(args.study_or_db, args.study, root)
    storage.check(url, create=False, write=True)  # the runs are stored in the study
    st = show.open_existing(url, name, root)
    # a trial that cannot be explained is refused before a word
    winner = ablation.target(st, args.trial)
    real = ablation.real_overrides(st, winner)
    scenario = validate.scenario_of(st)
    folder = storage.folder(args.study_or_db, st.study_name, root)
    folder.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(folder / "tune.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.getLogger("autotune").addHandler(handler)
    logging.getLogger("autotune").setLevel(logging.INFO)
    console = options.console(stderr=args.json)
    console.print(f"explaining trial #{winner.number} of study {st.study_name}: " + (
        f"{len(real)} real override(s), each taken away on a fresh engine after the winner "
        "again (Ctrl-C stops; runs finished so far stay in the study)" if real else
        "it changes nothing from vLLM's effective defaults, so no engine is launched"))
    with console.status("running"):
        found = ablation.explain(st, scenario, folder, trial=args.trial)
    for line in found.lines():
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if args.json:
        print(json.dumps(found.as_dict(), indent=2, default=str), file=sys.stdout)
    return 0
