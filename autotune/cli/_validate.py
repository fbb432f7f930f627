"""`autotune validate`: the chosen configuration and the baseline re-launched in pairs,
alternating, and the gain with a 95 % interval (`--client vllm`: measured by vLLM's own
client)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from autotune.cli import _options as options
from autotune.cli._options import load_study, positive, study_arguments, whole
from autotune.errors import ConfigError

if TYPE_CHECKING:
    import optuna
    from rich.console import Console

    from autotune.tuning.records.trialrecord import TrialRecord

HELP = ("re-run a configuration and the baseline, alternating, "
        "and report the gain with a 95%% confidence interval")


def add_arguments(p: argparse.ArgumentParser) -> None:
    study_arguments(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--trial", type=whole(0), help="this trial (must be feasible)")
    which.add_argument("--policy", default="balanced",
                       choices=["max-throughput", "min-latency", "balanced"],
                       help="pick the trial as `export` does (default: balanced)")
    p.add_argument("--against", type=whole(0), help="baseline trial (default: vLLM's defaults)")
    p.add_argument("--repeats", type=whole(1), default=3, help="runs of each (default 3)")
    p.add_argument("--client", default="autotune", choices=["autotune", "vllm"],
                   help="measure with autotune's load generator (default), or each run's "
                   "capacity at SLO with `vllm bench serve`, independently of autotune")
    p.add_argument("--gpus", metavar="0,1", help="--client vllm: run on these GPUs; with "
                   "two, each pair's runs go side by side, swapped every pair")
    p.add_argument("--step-seconds", type=positive, default=None, metavar="S",
                   help="--client vllm: length of each sustained step (default 20; every "
                   "step sends at least 20 prompts)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout; "
                   "the runs and tables go to stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.results import views
    from autotune.tuning.sharing import storage
    from autotune.verify import validate

    console = options.console(stderr=args.json)  # --json: stdout carries the result alone
    if args.step_seconds is not None and args.client != "vllm":
        raise ConfigError("validate: --step-seconds sets the steps of --client vllm")
    if args.gpus is not None and args.client != "vllm":
        raise ConfigError("validate: --gpus places the runs of --client vllm")
    _gpus(args.gpus)  # a malformed list fails before the study is opened
    st = load_study(args, write=True)  # the result is stored in the study
    candidate, against = validate.pick(st, trial=args.trial, policy=args.policy,
                                       against=args.against)
    if args.client == "vllm":
        return _with_vllm(args, st, candidate, against, console)
    console.print(f"validating trial #{candidate.number} against #{against.number}: "
                  f"{args.repeats} pair(s) of fresh engine launches, alternating")
    if candidate.number == against.number:
        console.print("the candidate is the baseline itself: an A/A run, it measures the noise")
    with console.status("running (Ctrl-C stops cleanly; nothing is stored until the end)"):
        result = validate.run_validation(
            st, candidate, against, args.repeats,
            storage.folder(args.study_or_db, st.study_name, Path(args.studies_dir)),
            on_run=lambda i, n, r: console.print(views.validation_run(i, n, r)))
    views.print_validation(result, console)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, default=str))
    return 0

def _with_vllm(args: argparse.Namespace, st: optuna.Study, candidate: TrialRecord,
                        against: TrialRecord, console: Console) -> int:
    """`validate --client vllm`: both capacities re-measured with `vllm bench serve`."""
    from pathlib import Path

    from autotune.measure import vllmbench
    from autotune.results import views
    from autotune.tuning.sharing import storage
    from autotune.verify import crosscheck, validate

    step_s = vllmbench.STEP_S if args.step_seconds is None else args.step_seconds
    fixed = validate.scenario_of(st).workload.mode == "fixed"
    console.print(f"re-measuring trial #{candidate.number} against #{against.number} with "
                  f"vllm bench serve: {args.repeats} pair(s) of fresh engine launches, "
                  "alternating, " + ("the study's fixed workload each run" if fixed else
                                     f"capacity at SLO in {step_s:g}-s Poisson steps"))
    with console.status("running (Ctrl-C stops cleanly; nothing is stored until the end)"):
        result = crosscheck.run_crosscheck(
            st, candidate, against, crosscheck.RecheckPlan(args.repeats, step_s, _gpus(args.gpus)),
            storage.folder(args.study_or_db, st.study_name, Path(args.studies_dir)),
            on_run=lambda i, n, r: console.print(views.validation_vllm_run(i, n, r)))
    views.print_validation_vllm(result, console)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, default=str))
    return 0

def _gpus(text: str | None) -> tuple[int, ...] | None:
    """`validate --gpus 0,1` as device indices (None when not given), parsed as `tune
    --gpus` is, without `all`."""
    from autotune.tuning.sharing.workers import parse_gpus

    return None if text is None else tuple(int(g) for g in parse_gpus(text, "validate",
                                                                      allow_all=False))
