"""The last phases of an overnight run, on a study that has finished its trials: which of
the winner's flags carry its gain, then the final choice re-checked against vLLM's defaults
by vLLM's own client, exactly as `autotune tune` runs them after its trials with
`budget.explain: true` and `budget.validate` (`autotune.verify.finish`).

    python3 scripts/gpu/lastphases.py studies/NAME.db [--repeats 2] [--client vllm]

Used on the lent H200 (`BOX_VERB=job` of box.sh) for a study tuned before these phases
existed; prints each line of both phases and logs to the study's tune.log.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from autotune.cli.main import guarded
from autotune.config import EndValidation
from autotune.results import show
from autotune.tuning.sharing import storage
from autotune.verify import finish, validate


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("db", help="the study's SQLite file")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--client", default="vllm", choices=["vllm", "autotune"])
    p.add_argument("--step-seconds", type=float, default=None)
    args = p.parse_args()
    st = show.open_existing(args.db)
    scenario = validate.scenario_of(st)
    ends = EndValidation(client=args.client, repeats=args.repeats,
                         step_seconds=args.step_seconds)
    scenario = scenario.model_copy(update={"budget": scenario.budget.model_copy(
        update={"explain": True, "validate_": ends})})
    folder = storage.folder(args.db, st.study_name, Path("studies"))
    folder.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(folder / "tune.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    for h in (handler, logging.StreamHandler(sys.stdout)):
        logging.getLogger("autotune").addHandler(h)
    logging.getLogger("autotune").setLevel(logging.INFO)
    done = finish.explain_and_recheck(st, scenario, folder,
                                      say=lambda text: print(text, flush=True))
    return 0 if done.explanation is not None and done.recheck is not None else 1


if __name__ == "__main__":
    sys.exit(guarded(main))  # a bad input is one line, as from `autotune`
