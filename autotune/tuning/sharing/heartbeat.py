"""One study, several workers: heartbeats, dead workers' trials queued again, and the order
every worker keeps.

Any number of `autotune tune` processes can work on one study: one per GPU (`--gpus`), or
several hosts against one PostgreSQL. Optuna's RDB storage is all they share, and only its
public API is used:

- each trial a worker runs has a heartbeat (`RDBStorage(heartbeat_interval=...,
  grace_period=...)`). A trial whose heartbeat stopped for the grace period is failed by
  whichever worker looks first (`optuna.storages.fail_stale_trials`: the state change is
  atomic, so exactly one worker does it; on SQLite only because every transaction takes
  the database's write lock first, see `storage`) and its configuration goes back into the queue
  (`Requeue`, the storage's stale-trial callback). A trial whose process is gone from this
  host is queued again at once, without waiting for the grace period;
- a trial records its flags and then its worker (`TrialRecord.worker`, a `Worker`)
  before its engine starts, so no worker launches a configuration that another is running: the
  higher-numbered twin waits for the lower one and copies its result
  (`SharedStudy.wait_for_twin`);
- vLLM's defaults come first: while they run on one worker, the others wait before asking
  for a trial (`SharedStudy.wait_for_defaults`), since the guardrail's reference and every
  weighted score come from that trial;
- each worker's sampler has its own seed derived from the scenario's (`register`): two TPE
  samplers with one seed propose the same configurations.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import random
import threading
import time
import warnings
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import event

from autotune._flags import flags_key
from autotune.stored import json_data
from autotune.tuning.records import studyrecord, writers
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.studyrecord import StudyRecord
from autotune.tuning.records.trialrecord import ERROR, TrialRecord
from autotune.tuning.records.worker import Worker
from autotune.tuning.sharing.storage import masked

log = logging.getLogger("autotune")


def _env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


# Seconds. Optuna's heartbeat takes whole seconds; the environment overrides are for tests.
HEARTBEAT_S = max(1, int(_env("AUTOTUNE_HEARTBEAT_S", 10)))
GRACE_S = max(1, int(_env("AUTOTUNE_GRACE_S", 60)))
POLL_S = _env("AUTOTUNE_POLL_S", 2.0)
# How long a lower-numbered trial may take between `ask` and announcing its flags.
ANNOUNCE_S = 120.0
# How long after a trial's worker was found dead its copy may take to be queued.
REQUEUE_S = 30.0

QUEUED, RUNNING, DONE = "queued", "running", "done"


class Requeue:
    """The storage's stale-trial callback: the configuration of a trial whose worker stopped
    sending heartbeats goes back into the queue (Optuna has already failed the trial, in one
    worker only). Counts what it queued."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        rec = TrialRecord.of(trial)
        enqueue_again(study, rec)
        self.count += 1
        log.warning("trial %d: no heartbeat from its worker (%s) for the grace period; "
                    "failed, its configuration is queued again", rec.number, _who(rec))


def enqueue_again(study: optuna.Study, rec: TrialRecord) -> None:
    """Queue a trial that did not finish once more: its parameters and baseline."""
    study.enqueue_trial(rec.params, user_attrs=writers.queued_again(rec), skip_if_exists=False)


def _who(rec: TrialRecord) -> str:
    return rec.worker.id if rec.worker is not None and rec.worker.id else "another worker"


def storage(url: str, *, heartbeat_s: int | None = None, grace_s: int | None = None
            ) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage for `url` with heartbeats on. Several workers may create the
    tables of a new database at the same moment; the loser of that race tries again."""
    sqlite = url.startswith("sqlite")
    # SQLite: a writer waits for another's lock instead of failing after 5 s.
    engine = {"connect_args": {"timeout": 60}} if sqlite else {"pool_pre_ping": True}
    for attempt in range(6):
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna 5
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                store = optuna.storages.RDBStorage(
                    url, engine_kwargs=engine,
                    heartbeat_interval=heartbeat_s or HEARTBEAT_S,
                    grace_period=grace_s or GRACE_S,
                    heartbeat_stale_trial_callback=Requeue())
            if sqlite:
                serialize_sqlite(store.engine)
            return store
        except sqlalchemy.exc.SQLAlchemyError as err:
            if attempt == 5 or isinstance(err, sqlalchemy.exc.ArgumentError):
                raise
            time.sleep(0.2 + random.random())
    raise AssertionError("unreachable")


def serialize_sqlite(engine: sqlalchemy.engine.Engine) -> None:
    """Make every transaction on this SQLite engine take the database's write lock first
    (`BEGIN IMMEDIATE`), so that Optuna's read-then-write updates are atomic between processes.

    Optuna pops a queued trial by reading WAITING then writing RUNNING under `SELECT ... FOR
    UPDATE`; SQLite has no row locks and pysqlite opens the transaction only at the write, so
    two workers could run the same trial (docs/architecture.md, "Several workers of one study").
    This is SQLAlchemy's documented recipe for pysqlite: the driver emits no BEGIN of its own,
    and each transaction begins with ours. Reads wait for a writer too (60-s busy timeout)."""

    @event.listens_for(engine, "connect")
    def _no_driver_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(conn: sqlalchemy.engine.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections pooled while Optuna created the tables: without the hooks


def ask(study: optuna.Study) -> optuna.Trial:
    """`study.ask()`, without Optuna's warning that heartbeats are meant for
    `Study.optimize` (this module records them itself); other warnings pass through."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trial = study.ask()
    for w in caught:
        if "Heartbeat of storage" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return trial


@dataclass(frozen=True)
class SharedStudy:
    """A study as this process works on it: the study, the worker this process is there
    (`Worker`), and the storage it was opened on with heartbeats on (`storage`; its study id
    and its stale-trial callback, which counts the trials it queued again). `open_study`
    makes one; a study opened elsewhere (`of`) has no storage: no heartbeats, and a dead
    worker's trial is found by its process or the grace period only.

    The heartbeats, the recovery of dead workers' trials and the waits that keep workers in
    order are its methods, so what they need travels with the study, in no module's state."""

    study: optuna.Study
    worker: Worker
    storage: optuna.storages.RDBStorage | None = None
    study_id: int | None = None
    requeue: Requeue | None = None

    @classmethod
    def attach(cls, study: optuna.Study, store: optuna.storages.RDBStorage, worker: Worker
               ) -> SharedStudy:
        """`study` as opened on `store` (for its heartbeats), as `worker`."""
        callback = store.get_heartbeat_stale_trial_callback()
        return cls(study, worker, store, store.get_study_id_from_name(study.study_name),
                   callback if isinstance(callback, Requeue) else Requeue())

    @classmethod
    def of(cls, study: optuna.Study) -> SharedStudy:
        """A study opened elsewhere, as this process."""
        return cls(study, Worker.here())

    @contextlib.contextmanager
    def heartbeat(self, number: int) -> Iterator[None]:
        """Record trial `number`'s heartbeat now and every interval until the block ends."""
        store = self.storage
        interval = store.get_heartbeat_interval() if store is not None else None
        if store is None or interval is None or self.study_id is None:
            yield
            return
        # Heartbeats are kept per trial id; Optuna's public storage API (BaseStorage) maps
        # the trial's number to it, since neither `Trial` nor `FrozenTrial` exposes the id.
        trial_id = store.get_trial_id_from_study_id_trial_number(self.study_id, number)
        store.record_heartbeat(trial_id)  # at once: no moment without a heartbeat
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    store.record_heartbeat(trial_id)
                except Exception as err:  # the next beat tries again
                    log.warning("trial %d: heartbeat not recorded: %s", number,
                                masked(str(err))[:300])

        thread = threading.Thread(target=beat, name=f"heartbeat-{number}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def recover(self, grace_s: float | None = None) -> int:
        """Fail and queue again every trial whose worker is gone; returns how many this call
        queued. Stale heartbeats (any host) go through Optuna; a worker of this host whose
        process is gone is recognised at once; a RUNNING trial with no worker recorded
        (written before workers were, or left between `ask` and its first record) once it
        is older than the grace period."""
        study, store, requeue = self.study, self.storage, self.requeue
        before = requeue.count if requeue is not None else 0
        if store is not None and store.get_heartbeat_interval() is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
        queued = (requeue.count - before) if requeue is not None else 0
        grace = grace_s if grace_s is not None else \
            (store.grace_period if store is not None else None) or GRACE_S
        now = dt.datetime.now()
        for rec in records(study, (TrialState.RUNNING,)):
            if rec.worker is not None:
                gone = self.worker.sees_gone(rec.worker)
            else:
                gone = rec.datetime_start is not None \
                    and (now - rec.datetime_start).total_seconds() > grace
            if gone and fail_and_requeue(study, rec):
                queued += 1
                log.warning("trial %d: its worker (%s) is gone; failed, its configuration "
                            "is queued again", rec.number, _who(rec))
        return queued

    def wait_for_defaults(self, poll_s: float | None = None) -> None:
        """While vLLM's defaults run on another worker, wait (checking that worker's
        heartbeat: if it dies, its trial is queued again and this worker takes it next)."""
        said = False
        while True:
            state, rec = defaults_state(self.study)
            if state != RUNNING or rec is None:
                return
            if not said:
                log.info("waiting for vLLM's defaults (trial %d, on %s): the quality "
                         "reference and every score come from that trial", rec.number,
                         _who(rec))
                said = True
            time.sleep(POLL_S if poll_s is None else poll_s)
            self.recover()

    def wait_for_twin(self, flags: Mapping[str, Any], number: int,
                      defaults: Mapping[str, Any] | None = None,
                      poll_s: float | None = None) -> None:
        """Return once no lower-numbered trial runs these flags (`defaults` filled in, as
        `flags_key`). The lower number launches and the higher one waits, so of two
        workers that picked the same configuration exactly one starts an engine; trials
        that have not yet announced their flags are waited for (at most ANNOUNCE_S)."""
        key = flags_key(flags, defaults)
        t0 = time.monotonic()
        said: set[int] = set()
        while True:
            lower = [r for r in records(self.study, (TrialState.RUNNING,)) if r.number < number]
            twins = [r for r in lower
                     if r.worker is not None and flags_key(r.flags, defaults) == key]
            unannounced = [r for r in lower if r.worker is None]
            if not twins and (not unannounced or time.monotonic() - t0 > ANNOUNCE_S):
                return
            for r in twins:
                if r.number not in said:
                    log.info("trial %d: trial %d (on %s) is running the same flags; waiting "
                             "for its result", number, r.number, _who(r))
                    said.add(r.number)
            time.sleep(POLL_S if poll_s is None else poll_s)
            self.recover()


def fail_and_requeue(study: optuna.Study, rec: TrialRecord) -> bool:
    """FAIL a RUNNING trial and queue its configuration again, unless another worker has
    just finished it (then False): the state change is the storage's, atomic."""
    try:
        study.tell(rec.number, state=TrialState.FAIL)
    except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
        return False
    enqueue_again(study, rec)
    return True


def register(study: optuna.Study, worker: Worker, seed: int) -> int:
    """Note this worker in the study and return its sampler seed: the scenario's own for
    the first worker a study ever had (a lone tuner is reproducible), else one derived from
    the scenario's seed and the worker's id. Each worker writes its key before it reads the
    others', so of two that start together at least one sees the other."""
    studyrecord.set_worker(study, worker.id, {
        **json_data(worker), "since": dt.datetime.now().isoformat(timespec="seconds")})
    others = [w for w in StudyRecord.of(study).workers if w != worker.id]
    return derived_seed(seed, worker.id) if others else seed


def derived_seed(seed: int, worker_id: str) -> int:
    return zlib.crc32(f"{seed}/{worker_id}".encode()) & 0x7FFFFFFF


def workers(study: optuna.Study) -> dict[str, dict[str, Any]]:
    """Every worker that has registered with the study, by id."""
    return dict(StudyRecord.of(study).workers)


def defaults_state(study: optuna.Study) -> tuple[str, TrialRecord | None]:
    """Where vLLM's defaults trial stands: DONE (it finished, or none will run), RUNNING or
    QUEUED, with the trial. One whose worker died a moment ago counts as RUNNING: the worker
    that failed it is queuing it again."""
    recs = [r for r in records(study) if r.is_defaults]
    for state, wanted in ((DONE, (TrialState.COMPLETE, TrialState.PRUNED)),
                          (RUNNING, (TrialState.RUNNING,)), (QUEUED, (TrialState.WAITING,))):
        found = [r for r in recs if r.state in wanted]
        if found:
            return state, found[0]
    now = dt.datetime.now()
    lost = [r for r in recs if r.state == TrialState.FAIL and r.outcome != ERROR
            and r.datetime_complete is not None
            and (now - r.datetime_complete).total_seconds() < REQUEUE_S]
    return (RUNNING, lost[-1]) if lost else (DONE, None)
