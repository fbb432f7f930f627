"""`autotune tune`: run (or resume) the study of a scenario, here or on one worker per GPU.

The command line becomes a `TuneCommand` (also what a `--gpus` worker builds from its own
options, `autotune.cli.worker`); `tune_here` checks everything before anything is written,
resolves the study's place, time and worker once, and hands `study.tune` one
`study.Request`, which resolves nothing itself.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.cli import _init as init
from autotune.cli import _options as options
from autotune.cli._options import duration, study_name, whole
from autotune.errors import ConfigError

if TYPE_CHECKING:
    import optuna
    from rich.console import Console

    from autotune.config import Scenario
    from autotune.results.summary import Summary
    from autotune.tuning.records.progress import Progress
    from autotune.tuning.sharing.storage import StudyLocation
    from autotune.tuning.sharing.workers import SharedRun

HELP = "run (or resume) the study of a scenario"


@dataclass(frozen=True)
class TuneCommand:
    """`autotune tune` as its command line asks it (a `--gpus` worker builds one from its
    own options): what is given, nothing resolved yet."""

    scenario: str
    study: str | None = None
    studies_dir: str = "studies"
    storage: str | None = None
    trials: int | None = None
    timeout: float | None = None
    gpus: str | None = None
    worker_id: str | None = None
    json: bool = False

    @classmethod
    def of(cls, args: argparse.Namespace) -> TuneCommand:
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


def add_arguments(p: argparse.ArgumentParser) -> None:
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if (args.scenario is None) == (args.model is None):
        raise ConfigError("tune: give a scenario file or --model with --slo (not both)")
    if args.model is None and (args.slo or args.memory_gib is not None
                               or args.workload != "random"):
        raise ConfigError("tune: --slo, --workload and --memory-gib go with --model; a "
                          "scenario file sets them itself")
    if args.model is not None:  # the scenario from the command line, written for next time
        args.scenario = str(init.started(args)[0])
    return tune_here(TuneCommand.of(args))


@dataclass(frozen=True)
class _Prepared:
    """A `tune` whose every input has passed its checks: the scenario (renamed by
    `--study`), the GPUs of `--gpus`, the time budget and where the study lives."""

    scenario: Scenario
    gpus: list[str] | None
    timeout: float | None
    where: StudyLocation
    root: Path


def tune_here(cmd: TuneCommand, *, run_tickets: Path | None = None,
              parent_pid: int | None = None) -> int:
    """`tune` in this process.

    Args:
        cmd: the command as given, nothing resolved yet.
        run_tickets: a `--gpus` worker's shared trial counter (`autotune.cli.worker`).
        parent_pid: a `--gpus` worker's parent: the worker stops once it is gone.

    Returns:
        0 when the study has an answer (a worker of a shared study: always 0, the answer
        is the whole run's), else `NO_ANSWER`; a `--gpus` run also a worker's failure code.
    """
    if parent_pid is not None:  # a worker: from its first second, stop once the parent is gone
        from autotune.tuning.sharing.workers import watch_parent

        watch_parent(parent_pid)
    ready = _prepare(cmd)
    _log_to(ready.where.folder, ready.root, cmd.worker_id)
    console = options.console(stderr=cmd.json)  # --json: stdout carries the summary alone
    from autotune.results import views
    from autotune.results.summary import Summary
    from autotune.tuning import study
    from autotune.tuning.sharing import heartbeat, storage, workers

    console.print(f"tuning {ready.scenario.name}: results in {storage.masked(ready.where.url)}")
    on_progress = _progress_printer(console, to_log=run_tickets is None)
    started = time.monotonic()  # the time budget covers the last phases too
    trials = cmd.trials if cmd.trials is not None else ready.scenario.budget.trials
    if ready.gpus is not None:
        code, shared_study = _tune_on_gpus(
            workers.SharedRun(cmd.scenario, ready.where.url, ready.root, trials, ready.timeout),
            ready.scenario, ready.gpus, console, on_progress)
        if code == 0:
            _last_phases(shared_study, ready, started, console)
        summary = Summary.of(shared_study)
        _print_summary(cmd, summary, console)
        return code or _answered(summary)
    request = study.Request(
        ready.scenario, ready.where, trials, ready.timeout,
        heartbeat.Worker.here(cmd.worker_id, os.environ.get("CUDA_VISIBLE_DEVICES")),
        claim=workers.Tickets(run_tickets).take if run_tickets is not None else None)
    with views.live(console, "Ctrl-C stops cleanly; run again to resume"):
        result = study.tune(request, on_progress=on_progress)
    shared = run_tickets is not None or cmd.worker_id is not None
    if not shared:  # one of several workers: the last phases are not its to run
        _last_phases(result, ready, started, console)
    summary = Summary.of(result)
    _print_summary(cmd, summary, console)
    return 0 if shared else _answered(summary)


def _prepare(cmd: TuneCommand) -> _Prepared:
    """Everything that can be checked, checked before anything is written or launched: a
    refused scenario or storage leaves no study folder and no database behind. The
    study's own modules (the measuring client, the views) load only once the scenario has
    passed, so a refusal is one line in about half a second instead of nearly one."""
    from autotune import config
    from autotune.engine.info import engine_info
    from autotune.tuning.policy import space

    if cmd.gpus is not None and cmd.worker_id is not None:
        raise ConfigError("tune: --gpus starts one worker per GPU; --worker-id names one "
                          "worker (give one or the other)")
    gpus = None
    if cmd.gpus is not None:
        from autotune.tuning.sharing.workers import parse_gpus

        gpus = parse_gpus(cmd.gpus)
    scenario = config.load(cmd.scenario)
    if cmd.study:
        scenario.name = cmd.study
    timeout = cmd.timeout if cmd.timeout is not None else (
        config.parse_duration(scenario.budget.timeout) if scenario.budget.timeout else None)
    space.check_against_engine(scenario, engine_info(), cmd.scenario)
    from autotune.tuning.sharing import workers

    # `--storage`, else the environment (how `--gpus` hands its workers the URL: a command
    # line is readable by every local user, and a password must not be).
    storage_arg = cmd.storage or os.environ.get(workers.STORAGE_ENV) or None
    root = Path(cmd.studies_dir)
    where = _checked_location(scenario, storage_arg, root)  # resolved once, handed down
    return _Prepared(scenario, gpus, timeout, where, root)


def _log_to(study_dir: Path, root: Path, worker_id: str | None) -> None:
    """autotune's log lines into the study's `tune.log` (made here); workers sharing the
    study write one file, so each line names its worker."""
    import logging

    try:
        study_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(study_dir / "tune.log")
    except OSError as err:
        raise ConfigError(f"--studies-dir {root}: cannot write {study_dir}: "
                          f"{err.strerror or err}") from None
    tag = f" [{worker_id}]" if worker_id else ""
    handler.setFormatter(logging.Formatter(f"%(asctime)s{tag} %(levelname)s %(message)s"))
    logging.getLogger("autotune").addHandler(handler)
    logging.getLogger("autotune").setLevel(logging.INFO)


def _progress_printer(console: Console, *, to_log: bool) -> Callable[[Progress], None]:
    """One line per trial on the terminal, however narrow it is; also in tune.log unless
    this is a `--gpus` worker (its own count goes to its log, not the study's)."""
    import logging

    from autotune.results import views

    def on_progress(p: Progress) -> None:
        line = views.progress_line(p)
        # An engine's error quoted in the line is text, not markup (`[Errno 111]`).
        console.print(line, soft_wrap=True, markup=False)
        if to_log:
            logging.getLogger("autotune").info(line, extra={views.PRINTED: True})

    return on_progress


def _last_phases(st: optuna.Study, ready: _Prepared, started: float, console: Console
                 ) -> None:
    """`budget.explain` and `budget.validate`, once per run (not per worker), within
    what is left of the run's time budget."""
    from autotune.results import views
    from autotune.verify import finish

    budget = ready.scenario.budget
    if not (budget.explain or budget.validate_):
        return
    with views.live(console, "last phases; Ctrl-C stops cleanly"):
        finish.explain_and_recheck(
            st, ready.scenario, ready.where.folder,
            left_s=finish.deadline(ready.timeout, started),
            say=lambda text: console.print(text, soft_wrap=True, markup=False,
                                           highlight=False))


# `tune`'s exit code when the study ends with no feasible trial: it ran, but has no answer.
NO_ANSWER = 4


def _answered(data: Summary) -> int:
    """0 when the study has an answer (a decision, or a feasible Pareto front), else
    NO_ANSWER; its last printed line said why."""
    found = data.decision is not None if data.weighted else bool(data.pareto)
    return 0 if found else NO_ANSWER


def _tune_on_gpus(run: SharedRun, scenario: Scenario, gpus: list[str], console: Console,
                  on_progress: Callable) -> tuple[int, optuna.Study]:
    """`tune --gpus`: one worker process per GPU on the study, one progress line for all."""
    import logging

    from autotune.tuning import study
    from autotune.tuning.sharing import workers

    st = study.open_study(scenario, run.url, register=False).study  # created here, once
    console.print(f"{len(gpus)} workers (GPUs {','.join(gpus)}) share the study's "
                  f"{run.trials} trials")

    def on_event(text: str) -> None:
        console.print(text, soft_wrap=True)
        logging.getLogger("autotune").info(text)

    with console.status("running trials on every GPU (Ctrl-C stops all of them cleanly; "
                        "run again to resume)"):
        result = workers.run_workers(st, scenario, run, gpus, on_progress=on_progress,
                                     on_event=on_event)
    return result.code, st


def _print_summary(cmd: TuneCommand, data: Summary, console: Console) -> None:
    """The study's summary: as JSON on stdout with --json (as `show --json`), else tables."""
    from autotune.results import views

    if cmd.json:
        print(json.dumps(data.as_json(), indent=2, default=str))
        if data.no_answer is not None:  # the last line of the terminal (stderr) says why
            console.print(data.no_answer.line(), soft_wrap=True, markup=False,
                          highlight=False)
    else:
        views.print_summary(data, console, decision_last=True)


def _checked_location(scenario: Scenario, storage_url: str | None, root: Path
                      ) -> StudyLocation:
    """Where the study lives, its storage checked for `tune` (it may create the database)."""
    from autotune.tuning.sharing import storage

    try:  # the default database lives in the studies directory, made here if needed
        where = storage.StudyLocation.resolve(scenario.name, storage_url, root)
    except OSError as err:
        raise ConfigError(f"--studies-dir {root}: cannot create it: "
                          f"{err.strerror or err}") from None
    storage.check(where.url, create=True)
    return where
