"""Several workers on one study, on real SQLite and a real PostgreSQL, with canned trials.

Seam tests in the style of test_study_loop.py: the real study loop and the real storage,
engines replaced by `canned.Canned`. Workers are threads (each with its own storage
connection, its own Study and worker id) where the order of events is what matters, and
processes where one must die (`kill -9`) or where `autotune tune --gpus` itself runs.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import canned
import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotune._flags import flags_key
from autotune.engine import cpuplace
from autotune.tuning import ranking, study
from autotune.tuning.quality.guard import make_guard
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import DEFAULTS, INTERRUPTED, TrialRecord
from autotune.tuning.sharing import heartbeat, workers
from autotune.tuning.sharing.storage import masked
from tests.conftest import MULTIPROCESSING, SCENARIO

CANNED = str(Path(canned.__file__).resolve())


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    """A fresh storage: a SQLite file, or a database of its own on a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    return request.getfixturevalue("postgres_db")


def _threads(n: int, target, *args: Any) -> list[Any]:
    """Run `target(i, *args)` in n threads started together; their results (or errors).

    transformers resolves its names lazily, and two threads resolving `AutoTokenizer` at
    once can make one of them fail with an ImportError (seen here): the names are
    resolved once first. Workers are processes in autotune, so only these threads race."""
    from transformers import AutoTokenizer  # noqa: F401
    results: list[Any] = [None] * n
    start = threading.Barrier(n)

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = target(i, *args)
        except BaseException as err:  # noqa: BLE001 - reported below
            results[i] = err

    threads = [threading.Thread(target=run, args=(i,), name=f"w{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    return results


def _worker(i: int) -> heartbeat.Worker:
    return heartbeat.Worker.here(f"w{i}")


def test_workers_opening_a_new_study_together_queue_the_defaults_once(url):
    sc = canned.scenario()
    _threads(4, lambda i: study.open_study(sc, url, worker=_worker(i)))
    st = optuna.load_study(study_name="shared", storage=url)
    recs = records(st)
    assert [(r.baseline, r.state) for r in recs] == [(DEFAULTS, TrialState.WAITING)]
    assert set(heartbeat.workers(st)) == {"w0", "w1", "w2", "w3"}


POPPER = """
import sys, warnings
import optuna
from autotune.tuning.sharing import heartbeat
warnings.simplefilter("ignore")
st = optuna.load_study(study_name="queue", storage=heartbeat.storage(sys.argv[1]))
while st.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
    t = st.ask()
    print(t.number, flush=True)
    st.tell(t, state=optuna.trial.TrialState.FAIL)
"""


def test_two_processes_never_pop_the_same_queued_trial(url):
    """Optuna pops a queued trial by reading WAITING, then writing RUNNING under a row
    lock that SQLite lacks: without `heartbeat.serialize_sqlite` two processes popped 15 of
    150 queued trials twice (seen once as two `--gpus` workers running trial 0)."""
    st = optuna.create_study(study_name="queue", storage=heartbeat.storage(url))
    n = 120
    for i in range(n):
        st.enqueue_trial({"x": i}, skip_if_exists=False)
    procs = [subprocess.Popen([sys.executable, "-c", POPPER, url], stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    popped = [int(line) for p in procs for line in p.communicate(timeout=120)[0].split()]
    assert all(p.returncode == 0 for p in procs)
    queued = [k for k in popped if k < n]  # a last ask may make a fresh trial: not queued
    assert sorted(queued) == list(range(n)), f"{len(queued) - len(set(queued))} popped twice"


def test_each_worker_samples_with_its_own_seed(tmp_path):
    sc = canned.scenario()
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first = study.open_study(sc, url, worker=_worker(0)).study
    assert heartbeat.register(first, _worker(0), 7) == 7  # alone: the scenario's seed
    second = study.open_study(sc, url, worker=_worker(1)).study
    seeds = {heartbeat.register(first, _worker(0), 7), heartbeat.register(second, _worker(1), 7)}
    assert len(seeds) == 2 and seeds == {heartbeat.derived_seed(7, "w0"),
                                         heartbeat.derived_seed(7, "w1")}
    # The samplers differ: two workers asking at once propose different points.
    points = []
    for st in (first, second):
        t = st.ask(fixed_distributions={"x": optuna.distributions.IntDistribution(0, 10**6)})
        points.append(t.params["x"])
    assert points[0] != points[1]


def _work(i: int, sc, url: str, study_dir: Path, runner: canned.Canned, trials: int) -> None:
    shared = study.open_study(sc, url, worker=_worker(i))
    study.loop(study.RunContext(shared, sc, "/m", study_dir, make_guard(sc, study_dir),
                                runner), trials=trials)


def test_two_workers_share_a_study_in_order_without_launching_a_twin(url, tmp_path):
    sc = canned.scenario()
    runner = canned.Canned(sleep_s=0.1)
    _threads(2, _work, sc, url, tmp_path / "shared", runner, 6)

    st = optuna.load_study(study_name="shared", storage=url)
    recs = records(st)
    assert len(recs) == 12 and all(r.state == TrialState.COMPLETE for r in recs)
    launches = [c for c in runner.calls if c["event"] == "launch"]
    ends = {c["trial"]: c["end"] for c in runner.calls if c["event"] == "end"}
    keys = [flags_key(c["flags"]) for c in launches]
    assert len(keys) == len(set(keys)), "a configuration was launched twice"
    # The rest are copies of a finished twin, never a second engine.
    copies = [r for r in recs if r.duplicate_of is not None]
    assert len(copies) == len(recs) - len(launches)
    assert all(recs[r.duplicate_of].flags == r.flags for r in copies)
    # vLLM's defaults once, first, and nothing launched before they ended; the named
    # baseline once.
    (defaults,) = [r for r in recs if r.is_defaults]
    assert launches[0]["trial"] == defaults.number == 0
    assert all(c["start"] >= ends[defaults.number] for c in launches[1:])
    # The named baseline once, queued when the defaults ended: it is #1 unless the other
    # worker asked its first trial while the defaults ran (then that trial is #1 and ran
    # after them, and the baseline is #2; about half the runs here, on both storages).
    half = [r.number for r in recs if r.baseline == "half"]
    assert len(half) == 1 and half[0] in (1, 2), half
    # The reference is the defaults', and every other trial was checked against it.
    assert st.user_attrs["reference"]["trial"] == defaults.number
    # its contents too, as the file holds them, for workers on other hosts
    saved = json.loads((tmp_path / "shared" / "reference.json").read_text())
    assert st.user_attrs["reference_data"] == saved
    assert [c["trial"] for c in launches if c["made_reference"]] == [defaults.number]
    checked = {c["trial"]: c["checked_against"] for c in runner.calls if c["event"] == "end"}
    assert all(checked[r.number] == defaults.number
               for r in recs if r.number != defaults.number and r.duplicate_of is None)
    # Scores are relative to the defaults.
    base = canned.throughput(defaults.flags)
    for r in recs:
        assert r.values[0] == pytest.approx(math.log(canned.throughput(r.flags) / base))
    assert ranking.reference_trial(st).number == defaults.number
    # Both workers ran trials, and each trial names its worker.
    assert {r.worker.id for r in recs} == {"w0", "w1"}


def test_a_worker_waits_for_the_same_configuration_running_elsewhere(tmp_path):
    sc = canned.scenario(baselines=[])
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    shared = study.open_study(sc, url, worker=_worker(0))
    st = shared.study
    study.loop(study.RunContext(shared, sc, "/m", tmp_path / "shared", runner=canned.Canned()),
               trials=1)
    flags = {"enforce-eager": True, "max-num-seqs": 8, "block-size": 32}
    for _ in range(2):
        st.enqueue_trial({"max-num-seqs": 8, "block-size": 32}, skip_if_exists=False)
    other = study.open_study(sc, url, worker=_worker(1))
    slow, fast = canned.Canned(sleep_s=1.0), canned.Canned()
    t = threading.Thread(target=study.loop, args=(
        study.RunContext(shared, sc, "/m", tmp_path / "shared", runner=slow),),
        kwargs={"trials": 1})
    t.start()
    while not slow.calls:  # trial 1 is running the flags
        time.sleep(0.01)
    heartbeat.POLL_S, old = 0.05, heartbeat.POLL_S
    try:
        study.loop(study.RunContext(other, sc, "/m", tmp_path / "shared", runner=fast),
                   trials=1)
    finally:
        heartbeat.POLL_S = old
        t.join()
    recs = records(st)
    assert fast.calls == []  # trial 2 waited for trial 1 and copied its result
    assert recs[2].duplicate_of == 1 and recs[2].flags == flags == recs[1].flags
    assert recs[2].datetime_complete >= recs[1].datetime_complete


def _wait_for(predicate, timeout_s: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _launches(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()
            if line.strip() and json.loads(line)["event"] == "launch"]


@pytest.mark.parametrize("host", ["this", "elsewhere"])
def test_a_killed_workers_trial_is_queued_again_and_finished_by_the_other(url, tmp_path, host):
    """Worker A (a process) runs vLLM's defaults and is killed with SIGKILL; worker B, which
    waited for the defaults, queues them again and runs them and the rest. On this host B
    sees the process gone at once; elsewhere only the heartbeat (grace 2 s) tells."""
    log_path = tmp_path / "launches.jsonl"
    sc = canned.scenario()
    study.open_study(sc, url, register=False)  # created, the defaults queued
    a_host = socket.gethostname() if host == "this" else "elsewhere.example"
    env = {**os.environ, "CANNED_LOG": str(log_path), "CANNED_SLEEP": "600"}
    a = subprocess.Popen([sys.executable, CANNED, "loop", url, str(tmp_path / "shared"), "A",
                          a_host], env=env)
    try:
        (first,) = _wait_for(lambda: _launches(log_path), what="worker A's launch")
        assert first["trial"] == 0
        a.kill()
        a.wait()
        t0 = time.monotonic()
        b = canned.Canned(log_path=str(log_path))
        shared = study.open_study(sc, url, worker=_worker(1), heartbeat_s=1, grace_s=2)
        st = shared.study
        heartbeat.POLL_S, old = 0.1, heartbeat.POLL_S
        try:
            study.loop(study.RunContext(shared, sc, "/m", tmp_path / "shared",
                                        make_guard(sc, tmp_path / "shared"), b),
                       trials=3)
        finally:
            heartbeat.POLL_S = old
    finally:
        a.kill()
        a.wait()
    waited = time.monotonic() - t0
    recs = records(st)
    assert recs[0].state == TrialState.FAIL and recs[0].worker.id == "A"
    defaults = [r for r in recs if r.is_defaults]
    assert [(r.number, r.state) for r in defaults] == [(0, TrialState.FAIL),
                                                       (1, TrialState.COMPLETE)]
    assert defaults[1].worker.id == "w1"
    assert [c["trial"] for c in b.calls if c["event"] == "launch"][0] == 1
    assert st.user_attrs["reference"]["trial"] == 1
    assert [r.number for r in recs if r.baseline == "half"] == [2]
    assert not records(st, (TrialState.RUNNING,))
    if host == "this":
        assert waited < 10
    else:
        assert waited >= 1  # the heartbeat (every second) had to go stale (2 s)


def _canned_tune(args: list[str], env: dict[str, str], **kw: Any) -> subprocess.Popen:
    env = {"AUTOTUNE_POLL_S": "0.1", **env}  # workers look at each other every 0.1 s
    return subprocess.Popen([sys.executable, CANNED, "tune", *args], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "shared.yaml"
    path.write_text(canned.SCENARIO)
    return path


def test_tune_gpus_runs_one_worker_per_gpu_with_one_progress_line_per_trial(tmp_path):
    log_path = tmp_path / "launches.jsonl"
    proc = _canned_tune([str(_scenario_file(tmp_path)), "--gpus", "0,1", "--trials", "5",
                         "--studies-dir", str(tmp_path)],
                        {"CANNED_LOG": str(log_path), "CANNED_SLEEP": "0.3"})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    st = optuna.load_study(study_name="shared", storage=f"sqlite:///{tmp_path / 'shared.db'}")
    recs = records(st)
    assert len(recs) == 5 and all(r.state == TrialState.COMPLETE for r in recs)
    host = socket.gethostname()
    assert {r.worker.id for r in recs} == {f"{host}-gpu0", f"{host}-gpu1"}
    # Each worker pinned to its GPU, and its own log.
    launches = _launches(log_path)
    assert {c["gpu"] for c in launches} == {"0", "1"}
    assert all(r.worker.gpu == r.worker.id[-1] for r in recs)
    for g in "01":
        assert (tmp_path / "shared" / "workers" / f"gpu{g}.log").exists()
    tune_log = (tmp_path / "shared" / "tune.log").read_text()
    assert f"[{host}-gpu0]" in tune_log and f"[{host}-gpu1]" in tune_log
    # One progress line per trial of the study, from the parent only (in tune.log too).
    assert [n for n in range(1, 6) if f"trial {n}/5" in out] == [1, 2, 3, 4, 5]
    assert out.count("trial 5/5") == 1
    assert len(re.findall(r"INFO trial \d/5 \|", tune_log)) == 5
    assert not re.search(r"\] INFO trial \d/", tune_log)  # no worker's own count


def _children(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def test_ctrl_c_stops_every_worker_and_queues_their_trials_again(tmp_path):
    log_path = tmp_path / "launches.jsonl"
    proc = _canned_tune([str(_scenario_file(tmp_path)), "--gpus", "0,1", "--trials", "5",
                         "--studies-dir", str(tmp_path)],
                        {"CANNED_LOG": str(log_path), "CANNED_SLEEP": "600"})
    _wait_for(lambda: _launches(log_path), what="the first launch")
    kids = _wait_for(lambda: len(_children(proc.pid)) >= 2 and _children(proc.pid),
                     what="two workers")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    import psutil

    assert not [k for k in kids if psutil.pid_exists(k)
                and psutil.Process(k).status() != psutil.STATUS_ZOMBIE]
    st = optuna.load_study(study_name="shared", storage=f"sqlite:///{tmp_path / 'shared.db'}")
    recs = records(st)
    assert not [r for r in recs if r.state == TrialState.RUNNING]
    # Every trial a worker held (the defaults; maybe one asked by the other worker, which
    # waited for them, or the defaults' copy, asked by a worker that started late) is FAIL
    # `interrupted`, and each configuration they ran is queued again, once.
    held = [r for r in recs if r.state == TrialState.FAIL]
    assert held[0].is_defaults and all(r.outcome == INTERRUPTED for r in held)
    waiting = [r for r in recs if r.state == TrialState.WAITING]

    def configuration(r: TrialRecord) -> tuple[Any, ...]:
        return r.baseline, tuple(sorted(r.params.items()))

    assert sorted(map(configuration, waiting)) == sorted(set(map(configuration, held)))
    assert DEFAULTS in [r.baseline for r in waiting]


def test_workers_whose_parent_is_killed_stop_cleanly(tmp_path):
    import psutil

    log_path = tmp_path / "launches.jsonl"
    proc = _canned_tune([str(_scenario_file(tmp_path)), "--gpus", "0,1", "--studies-dir",
                         str(tmp_path)], {"CANNED_LOG": str(log_path), "CANNED_SLEEP": "600"})
    _wait_for(lambda: _launches(log_path), what="the first launch")
    kids = [psutil.Process(k) for k in _wait_for(
        lambda: len(_children(proc.pid)) >= 2 and _children(proc.pid), what="two workers")]
    proc.kill()
    proc.communicate()
    gone, alive = psutil.wait_procs(kids, timeout=30)
    assert not alive
    st = optuna.load_study(study_name="shared", storage=f"sqlite:///{tmp_path / 'shared.db'}")
    recs = records(st)
    assert not [r for r in recs if r.state == TrialState.RUNNING]
    assert recs[0].outcome == INTERRUPTED


def test_a_dead_gpu_worker_leaves_its_trial_to_the_others_on_postgresql(postgres_db, tmp_path):
    """`tune --gpus 0,1 --storage postgresql://...`: the worker on GPU 1 is killed in the
    middle of a trial; the one on GPU 0 queues that trial again and finishes the run."""
    log_path = tmp_path / "launches.jsonl"
    secret = postgres_db.replace("autotune@", "autotune:s3cret-pw@")  # trust auth ignores it
    proc = _canned_tune([str(_scenario_file(tmp_path)), "--gpus", "0,1", "--trials", "4",
                         "--studies-dir", str(tmp_path), "--storage", secret],
                        {"CANNED_LOG": str(log_path), "CANNED_SLEEP": "0.2",
                         "CANNED_HANG": "600", "CANNED_HANG_GPU": "1"})
    hung = _wait_for(lambda: [c for c in _launches(log_path) if c["gpu"] == "1"],
                     what="the launch on GPU 1")[0]
    os.kill(hung["pid"], signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err  # a worker died: said, and the exit code says so
    assert "gpu1 died (SIGKILL)" in out
    assert "s3cret-pw" not in out + err
    assert "s3cret-pw" not in (tmp_path / "shared" / "tune.log").read_text()
    st = optuna.load_study(study_name="shared", storage=postgres_db)
    recs = records(st)
    lost = recs[hung["trial"]]
    assert lost.state == TrialState.FAIL and lost.worker.id.endswith("gpu1")
    again = [r for r in recs if r.number > lost.number and r.flags == lost.flags
             and r.baseline == lost.baseline]
    assert again and again[0].state == TrialState.COMPLETE
    assert again[0].worker.id.endswith("gpu0")
    assert not [r for r in recs if r.state == TrialState.RUNNING]
    assert len([r for r in recs if r.is_defaults and r.state == TrialState.COMPLETE]) == 1
    assert st.user_attrs["reference"]["trial"] == next(
        r.number for r in recs if r.is_defaults and r.state == TrialState.COMPLETE)
    launched = [flags_key(c["flags"]) for c in _launches(log_path)
                if c["trial"] != hung["trial"]]
    assert len(launched) == len(set(launched))


def test_gpus_options_are_checked_before_anything_starts(tmp_path):
    path = _scenario_file(tmp_path)
    for args, says in ((["--gpus", "0,0"], "distinct device indices"),
                       (["--gpus", "one"], "distinct device indices"),
                       (["--gpus", "0", "--worker-id", "x"], "give one or the other")):
        proc = _canned_tune([str(path), "--studies-dir", str(tmp_path), *args], {})
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and says in err, err
    assert not (tmp_path / "shared.db").exists()


def test_gpus_all_without_a_gpu_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if workers.visible_gpus():
        pytest.skip("this machine has a GPU")
    from autotune.errors import ConfigError

    with pytest.raises(ConfigError, match="no NVIDIA GPU is visible"):
        workers.parse_gpus("all")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert workers.parse_gpus("all") == ["2", "3"]


def test_tickets_share_a_runs_trials(tmp_path):
    tickets = workers.Tickets(tmp_path / "t.json", total=5)
    took = _threads(4, lambda i: sum(workers.Tickets(tmp_path / "t.json").take()
                                     for _ in range(5)))
    assert sum(took) == 5 and tickets.taken() == 5 and not tickets.take()


def test_passwords_in_urls_are_masked():
    assert masked("results in postgresql+psycopg://me:s3cr%40t@db:5432/x") == \
        "results in postgresql+psycopg://me:***@db:5432/x"
    assert masked("sqlite:///studies/a.db and mysql://u@h/d") == \
        "sqlite:///studies/a.db and mysql://u@h/d"


def test_tune_prints_the_storage_without_its_password(postgres_db, tmp_path):
    secret = postgres_db.replace("autotune@", "autotune:s3cret-pw@")
    proc = _canned_tune([str(_scenario_file(tmp_path)), "--trials", "1", "--studies-dir",
                         str(tmp_path), "--storage", secret], {})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert "autotune:***@" in out and "s3cret-pw" not in out + err
    assert "s3cret-pw" not in (tmp_path / "shared" / "tune.log").read_text()


def _engine_scenario() -> str:
    """The session study's scenario (conftest), two trials over max-num-seqs alone and no
    named baselines: the defaults and one searched trial."""
    raw = yaml.safe_load(SCENARIO)
    raw.update(name="two-workers", space={"max-num-seqs": {"choices": [2, 8]}},
               budget={"trials": 2, "trial_timeout": "5m"})
    for key in ("baselines", "prune"):
        raw.pop(key)
    return yaml.safe_dump(raw)


@pytest.mark.engine
def test_tune_gpus_on_the_cpu_engine(tmp_path, no_leftover_engine):
    """Two workers sharing the CPU engine: the defaults on one while the other waits, then a
    trial checked against the defaults' reference; both workers' engines gone."""
    path = tmp_path / "two-workers.yaml"
    path.write_text(_engine_scenario())
    # vLLM's own process layout (conftest runs the suite's model workers in the engine
    # core): the binding below is the model worker's, and no binding of the person running
    # the tests: the workers place their engines themselves.
    env = {k: v for k, v in os.environ.items() if k != cpuplace.VAR}
    proc = subprocess.run([sys.executable, "-m", "autotune", "tune", str(path), "--gpus", "0,1",
                           "--studies-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=900, env={**env, "AUTOTUNE_POLL_S": "0.5",
                                            MULTIPROCESSING: "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    st = optuna.load_study(study_name="two-workers",
                           storage=f"sqlite:///{tmp_path / 'two-workers.db'}")
    # the two trials run (a relief move may be queued after them, for a later run)
    defaults, searched = records(st, (TrialState.COMPLETE, TrialState.PRUNED))
    assert defaults.is_defaults and defaults.state == TrialState.COMPLETE
    assert defaults.quality.made_reference
    # Its start-up shows the engine core spawning the worker, as a phase of its own.
    assert "worker" in defaults.startup.phases, defaults.startup.phases
    assert searched.state in (TrialState.COMPLETE, TrialState.PRUNED)
    assert searched.worker.id.rsplit("-", 1)[1] in ("gpu0", "gpu1")
    if searched.quality:
        assert searched.quality.made_reference is None
    assert st.user_attrs["reference"]["trial"] == 0
    for g in "01":
        assert (tmp_path / "two-workers" / "workers" / f"gpu{g}.log").exists()
    assert [n for n in (1, 2) if f"trial {n}/2" in proc.stdout] == [1, 2]
    # Each worker's engine computed on cores of its own, as vLLM's log says.
    for rec in (defaults, searched):
        log = tmp_path / "two-workers" / "trials" / str(rec.number) / "engine.log"
        if rec.state == TrialState.PRUNED and not log.exists():
            continue  # pruned before its launch
        slot = int(rec.worker.id.rsplit("gpu", 1)[1])
        cores = [int(c) for c in cpuplace.bind(slot, 2, cpuplace.physical_cores()).split(",")]
        assert f"local_rank=0, core ids={cores}" in log.read_text(), (rec.number, cores)


def test_stop_does_not_wait_without_end_for_a_worker_that_ignores_the_interrupt(tmp_path):
    """The parent passes one SIGINT to each worker; one that does not stop gets a second
    after `wait_s`, then SIGKILL, and the parent returns."""
    code = {"obeys": "import time; time.sleep(60)",
            "ignores": "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN);"
                       " print('ready', flush=True); time.sleep(60)"}
    children = []
    for name, src in code.items():
        log_path = tmp_path / f"{name}.log"
        proc = subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.PIPE,
                                text=True)
        children.append(workers._Child(name, name, log_path, proc, log_path.open("ab")))
    assert children[1].proc.stdout.readline() == "ready\n"
    said: list[str] = []
    t0 = time.monotonic()
    workers._stop(children, said.append, wait_s=1.0)
    assert time.monotonic() - t0 < 10
    assert children[0].proc.returncode != 0 and children[1].proc.returncode == -signal.SIGKILL
    assert said[1:] == ["worker(s) ignores still running 1 s after the interrupt: SIGINT",
                        "worker(s) ignores still running 1 s after the interrupt: SIGKILL"]
    for c in children:
        c.log_file.close()
