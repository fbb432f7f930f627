"""`autotune tune SCENARIO --gpus 0,1`: one worker process per GPU on one study.

Each worker is a process of its own (`python -m autotune.cli.worker`: `tune` for one
worker, with a small parser of its own for what only a worker is told), pinned to its GPU with
`CUDA_VISIBLE_DEVICES` (so the memory emulation, the memory model's pruning and the wait
for released memory all read that GPU; on the CPU build, to a share of the cores with
`engine.cpuplace`), with its own id (`HOST-gpuN`), its own log
(`studies/NAME/workers/gpuN.log`) and its lines in `tune.log` tagged with its id. They
share the study through its storage (`autotune.tuning.sharing.heartbeat` keeps them in
order) and the run's trials through a counter file (`Tickets`): `--trials N` is N trials in
all, taken by whichever worker is free. The storage URL reaches the workers through their
environment, never their command line (which every local user can read).

This process starts them, prints one progress line per finished trial of the study, and on
Ctrl-C (or SIGTERM) passes the interrupt to every worker and waits until all have stopped:
each marks its running trial interrupted, queues it again and stops its engine (a second
Ctrl-C skips the engines' grace period, as in a single tuner). A worker that has not
stopped a minute later gets a second interrupt, and a minute after that SIGKILL. A worker
whose parent is gone stops the same way (`watch_parent`), so killing this process leaves no
worker behind.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import optuna
from optuna.trial import TrialState

from autotune.config import Scenario
from autotune.engine import cpuplace
from autotune.errors import ConfigError
from autotune.tuning import interrupts, ranking
from autotune.tuning.records.progress import Progress
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import TrialRecord

log = logging.getLogger("autotune")
# How a worker is started: the worker's own entry point, never the user's `autotune` command
# (the tests run a stand-in with canned trials).
ENTRY = [sys.executable, "-m", "autotune.cli.worker"]
STORAGE_ENV = "AUTOTUNE_STORAGE"
# How often the parent prints the trials its workers finished (it wakes at once when one
# of them exits).
POLL_S = 1.0
# How long a worker gets to stop after each interrupt: its engine's grace period (20 s) and
# the writes that queue its trial again take well under this.
STOP_WAIT_S = 60.0
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def parse_gpus(text: str, what: str = "tune", *, allow_all: bool = True) -> list[str]:
    """`--gpus 0,1` (distinct device indices) or `--gpus all` (every visible GPU; not for
    `validate`, `allow_all=False`), for every command that takes `--gpus`."""
    if allow_all and text.strip() == "all":
        found = visible_gpus()
        if not found:
            raise ConfigError(f"{what}: --gpus all: no NVIDIA GPU is visible; name the devices "
                              "instead, e.g. --gpus 0,1 (on the CPU engine each worker's "
                              "engines get a share of the cores)")
        return found
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise ConfigError(f"{what}: --gpus {text!r}: expected distinct device indices such as "
                          + ("0,1, or all" if allow_all else "0 or 0,1"))
    return [str(int(p)) for p in parts]


def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES if set, else every NVML device."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [v.strip() for v in visible.split(",") if v.strip().isdigit()]
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no GPU
        return []


class Tickets:
    """The trials of one run, taken one at a time by its workers: a counter in a file,
    changed under an exclusive lock, so N trials are N, whichever worker takes them."""

    def __init__(self, path: Path, total: int | None = None):
        self.path = path
        if total is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"total": total, "taken": 0}))

    def take(self) -> bool:
        with self.path.open("r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            state = json.loads(f.read() or "{}")
            if state.get("taken", 0) >= state.get("total", 0):
                return False
            state["taken"] = state.get("taken", 0) + 1
            f.seek(0)
            f.truncate()
            f.write(json.dumps(state))
            return True

    def taken(self) -> int:
        return int(json.loads(self.path.read_text()).get("taken", 0))


def watch_parent(parent: int, interval_s: float = 1.0, again_s: float = 15.0) -> None:
    """In a worker: once the process that started it is gone, stop as on SIGTERM (the
    trial is marked interrupted and queued again, the engine stopped). The signal is sent
    again every `again_s` while the worker lives: a clean stop takes seconds, and one
    SIGTERM that came at an unlucky moment once left a CI worker sleeping in its trial
    after its parent was killed."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        while True:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(again_s)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


@dataclass
class _Child:
    gpu: str
    id: str
    log_path: Path
    proc: subprocess.Popen
    log_file: IO[bytes]
    code: int | None = None


@dataclass
class Result:
    """How a run of workers ended: each worker's exit code, and the trials they finished."""

    codes: dict[str, int] = field(default_factory=dict)
    finished: list[TrialRecord] = field(default_factory=list)

    @property
    def code(self) -> int:
        """0 when every worker ended well; else 2 if one stopped on a bad input, 130 if
        one was interrupted, 1 otherwise (a worker died or failed)."""
        codes = set(self.codes.values()) - {0}
        return next((c for c in (2, 130) if c in codes), 1) if codes else 0


def worker_id(gpu: str) -> str:
    return f"{socket.gethostname()}-gpu{gpu}"


@dataclass(frozen=True)
class SharedRun:
    """One `tune --gpus` run as each of its workers is told it: the scenario file, the
    study's storage (`url`, passed in the environment, never on a command line), the studies
    directory, and the run's trials (in all, whichever worker takes them) and time."""

    scenario_path: str | Path
    url: str
    studies_dir: Path
    trials: int
    timeout_s: float | None


def run_workers(study: optuna.Study, scenario: Scenario, run: SharedRun, gpus: list[str], *,
                on_progress: Callable[[Progress], None] | None = None,
                on_event: Callable[[str], None] | None = None) -> Result:
    """Start one worker per GPU on `study` (already open) and wait for all of them."""
    say = on_event or (lambda text: None)
    name = str(scenario.name)
    folder = run.studies_dir / name / "workers"
    folder.mkdir(parents=True, exist_ok=True)
    tickets = Tickets(folder / f"tickets-{os.getpid()}.json", total=run.trials)
    ids = {worker_id(g) for g in gpus}
    seen = {r.number for r in records(study, FINISHED)}
    t0 = time.monotonic()
    children: list[_Child] = []
    result = Result()
    try:
        for slot, g in enumerate(gpus):
            place = cpuplace.placement(slot, len(gpus), scenario.engine.env)
            children.append(_start(g, run, name, folder, tickets, place))
            say(f"worker {children[-1].id} on GPU {g}: log in {children[-1].log_path}")
        while True:
            interrupts.raise_if_dropped()  # a Ctrl-C Python dropped still stops the workers
            _report(study, ids, seen, result, run, t0, on_progress)
            for c in children:
                if c.code is None and (code := c.proc.poll()) is not None:
                    c.code = code
                    result.codes[c.id] = _exit_code(code)
                    say(f"worker {c.id} {_ended(code)}")
            if all(c.code is not None for c in children):
                break
            _nap(children, POLL_S)
        _report(study, ids, seen, result, run, t0, on_progress)
    except KeyboardInterrupt:
        _stop(children, say)
        raise
    finally:
        for c in children:
            c.log_file.close()
        tickets.path.unlink(missing_ok=True)
    return result


def _nap(children: list[_Child], seconds: float) -> None:
    """Sleep up to `seconds`, waking within 0.1 s of a worker's exit: the run ends, and its
    last progress line comes, when the last worker does."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and all(c.code is not None or c.proc.poll() is None
                                         for c in children):
        time.sleep(0.1)


def _start(gpu: str, run: SharedRun, name: str, folder: Path, tickets: Tickets,
           place: dict[str, str]) -> _Child:
    wid = worker_id(gpu)
    log_path = folder / f"gpu{gpu}.log"
    cmd = [*ENTRY, str(run.scenario_path), "--study", name, "--studies-dir",
           str(run.studies_dir), "--worker-id", wid, "--trials", str(run.trials),
           "--tickets", str(tickets.path), "--parent-pid", str(os.getpid())]
    if run.timeout_s is not None:
        cmd += ["--timeout", f"{run.timeout_s:.0f}s"]
    # `place`: on the CPU build, the cores of this worker's model workers (engine.cpuplace).
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, STORAGE_ENV: run.url, **place}
    log_file = log_path.open("ab")
    # A session of its own: a Ctrl-C at the terminal reaches this process only, which
    # passes it on once to each worker (twice would skip the engines' grace period).
    proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    return _Child(gpu, wid, log_path, proc, log_file)


def _report(study: optuna.Study, ids: set[str], seen: set[int], result: Result, run: SharedRun,
            t0: float, on_progress: Callable[[Progress], None] | None) -> None:
    """One progress line per trial of this run's workers that has finished since."""
    new = [r for r in records(study, FINISHED)
           if r.number not in seen and r.worker is not None and r.worker.id in ids]
    new.sort(key=lambda r: (r.datetime_complete or dt.datetime.min, r.number))
    for rec in new:
        seen.add(rec.number)
        result.finished.append(rec)
        if on_progress is not None:
            on_progress(Progress(len(result.finished), run.trials, time.monotonic() - t0,
                                 run.timeout_s, rec, ranking.feasible_best(study),
                                 ranking.reference_trial(study)))


def _stop(children: list[_Child], say: Callable[[str], None],
          wait_s: float = STOP_WAIT_S) -> None:
    """Pass the interrupt to every worker once and wait until all have stopped; another
    Ctrl-C here passes a second one on (the engines skip their grace period). Never
    without end: a worker still running `wait_s` later gets that second SIGINT, and
    `wait_s` after it SIGKILL (its engine's reaper stops the engine, and the next worker
    on the study queues its trial again)."""
    live = [c for c in children if c.proc.poll() is None]
    say(f"stopping {len(live)} worker(s): each queues its trial again")
    for c in live:
        _signal(c, signal.SIGINT)
    for then in (signal.SIGINT, signal.SIGKILL):
        deadline = time.monotonic() + wait_s
        while (left := [c for c in live if c.proc.poll() is None]) \
                and time.monotonic() < deadline:
            try:
                time.sleep(0.1)
            except KeyboardInterrupt:
                for c in left:
                    _signal(c, signal.SIGINT)
        if not left:
            return
        say(f"worker(s) {', '.join(c.id for c in left)} still running {wait_s:.0f} s "
            f"after the interrupt: {signal.Signals(then).name}")
        for c in left:
            _signal(c, then)
    for c in live:
        c.proc.wait()


def _signal(c: _Child, sig: int) -> None:
    try:
        c.proc.send_signal(sig)
    except ProcessLookupError:
        pass


def _exit_code(code: int) -> int:
    return code if code >= 0 else 128 - code


def _ended(code: int) -> str:
    if code == 0:
        return "finished"
    if code < 0:
        return f"died ({signal.Signals(-code).name}); its trial is queued again for the others"
    return {130: "was interrupted", 2: "stopped on a bad input (see its log)"}.get(
        code, f"failed (exit code {code}, see its log)")
