"""The study loop on a real SQLite study, with `trial.run_trial` replaced by canned outcomes.

Seam tests: everything between Optuna and the engine (baselines first, duplicate copying,
named constraints, the reference a score is relative to, Ctrl-C re-queueing, recovery of
trials a killed tuner left RUNNING, the time box) runs in milliseconds here; the engine
tests check the same loop once with real engines.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune.config import Scenario
from autotune.measure.measurement import Measurement
from autotune.stored import json_data
from autotune.tuning import interrupts, ranking, study
from autotune.tuning import trial as trial_mod
from autotune.tuning.records import studyrecord, writers
from autotune.tuning.records.progress import Progress
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import (
    DEFAULTS,
    ERROR,
    INTERRUPTED,
    VERSION,
    WRITABLE,
    TrialRecord,
)
from autotune.tuning.sharing import heartbeat
from tests import canned


def _scenario(**changes: Any) -> Scenario:
    """The canned scenario of tests/canned.py, made this module's: a grid over max-num-seqs
    alone, and a baseline that `Canned` below refuses as the engine would."""
    return canned.scenario(**{"name": "seam", "space": {"max-num-seqs": {"choices": [2, 8, 32]}},
                              "baselines": [{"name": "refused", "flags": {"max-num-seqs": 4}}],
                              "sampler": {"name": "grid", "seed": 0}, **changes})


class Canned:
    """A stand-in for `trial.run_trial`: throughput grows with max-num-seqs, TTFT too; the
    `refused` baseline's flags are pruned as the engine would refuse them."""

    def __init__(self, ttft_per_seq: float = 10.0, sleep_s: float = 0.0,
                 interrupt_at: int | None = None):
        self.calls: list[dict[str, Any]] = []
        self.ttft_per_seq, self.sleep_s, self.interrupt_at = ttft_per_seq, sleep_s, interrupt_at

    def __call__(self, scenario: Scenario, model: str, flags: dict[str, Any], trial_dir: Path,
                 **_: Any) -> trial_mod.Outcome:
        self.calls.append(dict(flags))
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        time.sleep(self.sleep_s)
        facts = trial_mod.EngineRun(flags, trial_mod.command_line(model, flags), "vllm-test",
                                {"name": "cpu"}, timings={"startup_s": 1.0})
        seqs = flags.get("max-num-seqs", 16)  # the defaults: between 8 and 32
        if seqs == 4:
            facts.detail = "refused"
            return trial_mod.Outcome(trial_mod.PRUNED, "invalid_flag", facts=facts)
        summary = {"completed": 16, "failed": 0, "output_throughput": 100.0 + seqs,
                   "p95_ttft_ms": self.ttft_per_seq * seqs}
        return trial_mod.Outcome(trial_mod.COMPLETE, "", Measurement.of(summary), facts)


def _context(shared: heartbeat.SharedStudy, scenario: Scenario, runner: Any,
             tmp_path: Path, model: str = "/m") -> study.RunContext:
    """The loop's run context for the seam study, its folder `seam/` under `tmp_path`."""
    return study.RunContext(shared, scenario, model, tmp_path / "seam", runner=runner)


def _run(tmp_path: Path, scenario: Scenario, runner: Canned, trials: int,
         timeout_s: float | None = None) -> optuna.Study:
    shared = study.open_study(scenario, f"sqlite:///{tmp_path / 'seam.db'}")
    study.loop(_context(shared, scenario, runner, tmp_path, "/models/tiny"), trials=trials,
               timeout_s=timeout_s)
    return shared.study


def test_baselines_first_then_the_search_with_one_record_each(tmp_path):
    runner = Canned()
    st = _run(tmp_path, _scenario(), runner, trials=5)
    recs = records(st)
    assert [r.name for r in recs[:2]] == [DEFAULTS, "refused"]
    assert runner.calls[0] == {"enforce-eager": True}  # fixed flags hold for baselines too
    assert recs[0].values == (0.0,) and recs[0].feasible and recs[0].gain == 0.0
    assert recs[1].state == TrialState.PRUNED and recs[1].reason == "invalid_flag"
    assert not recs[1].feasible and recs[1].detail == "refused"
    # Named constraints, the same names on every trial; the refused one breaks all of them.
    names = {"slo:ttft_p95_ms", "failed_requests", "quality", "completed"}
    assert all(set(r.constraints) == names for r in recs)
    assert all(v > 0 for v in recs[1].constraints.values())
    assert all(r.version == VERSION and r.outcome for r in recs)
    # max-num-seqs 32: TTFT 320 ms, within the 500-ms SLO; scores relative to the defaults.
    by_seqs = {r.flags.get("max-num-seqs"): r for r in recs[2:]}
    assert set(by_seqs) == {2, 8, 32}
    assert by_seqs[32].gain > by_seqs[8].gain > by_seqs[2].gain
    assert ranking.feasible_best(st).number == by_seqs[32].number


def test_an_slo_miss_is_infeasible_and_never_best(tmp_path):
    st = _run(tmp_path, _scenario(), Canned(ttft_per_seq=20.0), trials=5)  # 32 -> 640 ms
    recs = {r.flags.get("max-num-seqs"): r for r in records(st)[2:]}
    assert recs[32].state == TrialState.COMPLETE and not recs[32].feasible
    assert recs[32].constraints["slo:ttft_p95_ms"] == pytest.approx(140.0)
    assert ranking.feasible_best(st).number == 0  # the defaults beat the feasible 2 and 8
    # Optuna's own Pareto front agrees: infeasible trials are not on it.
    assert recs[32].number not in {t.number for t in st.best_trials}


def test_a_repeated_configuration_is_copied_not_launched(tmp_path):
    runner = Canned()
    scenario = _scenario(space={"max-num-seqs": {"choices": [8]}}, sampler={"name": "random"})
    st = _run(tmp_path, scenario, runner, trials=4)
    recs = records(st)
    assert len(runner.calls) == 3  # defaults, refused, one max-num-seqs 8
    copy = recs[3]
    assert copy.duplicate_of == 2 and copy.flags == recs[2].flags
    assert copy.values == recs[2].values and copy.metrics == recs[2].metrics
    assert copy.baseline is None  # the twin's identity is not copied


def test_a_sampled_default_is_the_defaults_engine_copied_not_launched(tmp_path):
    """max-num-seqs 16 is vLLM's default here (as the study recorded it): the searched trial
    that asks for it would start the defaults' engine, so it takes their result."""
    runner = Canned()
    scenario = _scenario(space={"max-num-seqs": {"choices": [16]}}, baselines=[],
                         sampler={"name": "random"})
    shared = study.open_study(scenario, f"sqlite:///{tmp_path / 'seam.db'}")
    st = shared.study
    studyrecord.set_engine_defaults(st, {"max-num-seqs": 16})
    study.loop(_context(shared, scenario, runner, tmp_path, "/models/tiny"), trials=2)
    defaults, searched = records(st)
    assert len(runner.calls) == 1 and defaults.is_defaults  # one engine for both
    assert searched.duplicate_of == defaults.number and searched.values == defaults.values
    fixed = dict(scenario.engine.flags)
    assert searched.flags == {**fixed, "max-num-seqs": 16} and defaults.flags == fixed
    assert searched.params == {"max-num-seqs": 16}


def test_a_searched_trial_starts_at_the_best_trials_rate(tmp_path):
    """In capacity mode every searched trial gets the best feasible trial's lower bound at
    that moment as its first sustained rate and its early-stop floor, after its burst;
    baselines search in full."""
    seen: list[dict[str, Any]] = []

    def measured(scenario: Scenario, model: str, flags: dict[str, Any], trial_dir: Path,
                 **kw: Any) -> trial_mod.Outcome:
        seen.append({"seqs": flags.get("max-num-seqs"), **kw})
        rate = {2: 3.0, 8: 6.0, 32: 12.0}.get(flags.get("max-num-seqs"), 5.0)
        cap = {"request_throughput": rate, "output_throughput": rate * 16, "low": rate,
               "high": rate * 1.1, "bracket": 0.09, "uncertainty": 0.09,
               "steps": [{"index": 0, "kind": "burst", "passed": False}]}
        summary = {"completed": 16, "failed": 0, "request_throughput": rate,
                   "output_throughput": rate * 16, "p95_ttft_ms": 10.0, "capacity": cap}
        return trial_mod.Outcome(trial_mod.COMPLETE, "", Measurement.of(summary),
                                 trial_mod.EngineRun(flags, trial_mod.command_line(model, flags)))

    scenario = _scenario(baselines=[{"name": "eight", "flags": {"max-num-seqs": 8}}],
                         workload={"kind": "random", "num_requests": 16, "mode": "capacity"})
    _run(tmp_path, scenario, measured, trials=5)
    floors = [(c["seqs"], c["anchor"].start, c["anchor"].floor, c["anchor"].ceiling)
              for c in seen]
    # the defaults (5 req/s) and the baseline in full; then the grid 2, 8 (a copy), 32
    assert floors[:2] == [(None, None, None, None), (8, None, None, None)]
    searched = floors[2:]
    assert {f[0] for f in searched} == {2, 32}
    assert all(start == floor for _, start, floor, _ in searched)
    assert all(c["anchor"].burst for c in seen)  # a burst first: it stops clear losers
    # the best's interval when each ran: 6-6.6 req/s (the baseline), 12-13.2 once 32 had run
    assert all((start, ceiling) in ((6.0, pytest.approx(6.6)), (12.0, pytest.approx(13.2)))
               for _, start, _, ceiling in searched)


def test_a_trials_engine_run_is_record_fields():
    names = {f.name for f in dataclasses.fields(trial_mod.EngineRun)}
    assert names <= WRITABLE, names - WRITABLE
    facts = trial_mod.EngineRun({"max-num-seqs": 8}, detail="refused")
    assert json_data(facts.fields()) == {"flags": {"max-num-seqs": 8}, "command": [],
                              "engine_version": None, "device": {}, "env": {},
                              "log_path": None, "detail": "refused"}


def test_the_first_completed_trial_stands_in_when_the_defaults_are_pruned(tmp_path):
    class DefaultsRefused(Canned):
        def __call__(self, scenario, model, flags, trial_dir, **kw):
            if "max-num-seqs" not in flags:
                return trial_mod.Outcome(trial_mod.PRUNED, "kv_too_small",
                                         facts=trial_mod.EngineRun(flags))
            return super().__call__(scenario, model, flags, trial_dir, **kw)

    st = _run(tmp_path, _scenario(baselines=[]), DefaultsRefused(), trials=3)
    recs = records(st)
    ref = ranking.reference_trial(st)
    assert recs[0].state == TrialState.PRUNED and ref.number == 1 and ref.values == (0.0,)
    assert ranking.reference_name(st).endswith("(vLLM defaults did not run)")


def test_ctrl_c_marks_the_trial_interrupted_and_queues_it_again(tmp_path):
    scenario = _scenario()
    shared = study.open_study(scenario, f"sqlite:///{tmp_path / 'seam.db'}")
    st = shared.study
    with pytest.raises(KeyboardInterrupt):
        study.loop(_context(shared, scenario, Canned(interrupt_at=2), tmp_path), trials=3)
    recs = records(st)
    assert recs[1].state == TrialState.FAIL and recs[1].outcome == INTERRUPTED
    assert recs[1].flags == {"enforce-eager": True, "max-num-seqs": 4}  # what it was running
    assert recs[2].state == TrialState.WAITING and recs[2].baseline == "refused"
    runner = Canned()
    study.loop(_context(shared, scenario, runner, tmp_path), trials=1)
    assert runner.calls == [{"enforce-eager": True, "max-num-seqs": 4}]


class StorageInterrupted(Canned):
    """A Ctrl-C that came inside a database call and left it as the storage's own error, as
    SQLAlchemy did once in a loaded run ("owning Session been closed?")."""

    def __call__(self, *args: Any, **kw: Any) -> trial_mod.Outcome:
        if len(self.calls) + 1 == self.interrupt_at:
            self.calls.append({})
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as err:
                raise optuna.exceptions.StorageInternalError("during the commit") from err
        return super().__call__(*args, **kw)


def test_a_ctrl_c_reraised_by_the_storage_stops_the_study_as_a_ctrl_c(tmp_path):
    """Not a fault of autotune's (FAIL, and the study goes on): the trial goes back to the
    queue and the command stops as on any Ctrl-C."""
    scenario = _scenario()
    shared = study.open_study(scenario, f"sqlite:///{tmp_path / 'seam.db'}")
    runner = StorageInterrupted(interrupt_at=2)
    with pytest.raises(KeyboardInterrupt):
        study.loop(_context(shared, scenario, runner, tmp_path), trials=3)
    recs = records(shared.study)
    assert len(runner.calls) == 2  # no trial after it
    assert recs[1].state == TrialState.FAIL and recs[1].outcome == INTERRUPTED
    assert recs[2].state == TrialState.WAITING and recs[2].baseline == "refused"


def test_an_interrupt_is_found_through_the_errors_raised_from_it():
    def raised(inner: BaseException, outer: Exception, *, cause: bool) -> Exception:
        try:
            try:
                raise inner
            except BaseException as e:
                if cause:
                    raise outer from e
                raise outer  # noqa: B904 (raised while handling it: the context)
        except Exception as err:
            return err

    for cause in (True, False):
        err = raised(KeyboardInterrupt(), RuntimeError("x"), cause=cause)
        assert interrupts.interrupted(err)
        assert interrupts.interrupted(raised(err, ValueError(), cause=cause))
        interrupts.release_frames(err)  # every exception of the chain, without error
        assert err.__traceback__ is not None
    assert interrupts.interrupted(KeyboardInterrupt())
    assert not interrupts.interrupted(raised(ValueError(), RuntimeError("x"), cause=True))
    looped = RuntimeError("loop")
    looped.__context__ = ValueError()
    looped.__context__.__context__ = looped  # a cycle ends the walk
    assert not interrupts.interrupted(looped)


def test_defaults_interrupted_run_first_again_under_the_next_number(tmp_path):
    """What the README says of a Ctrl-C during vLLM's defaults: the resumed study runs them
    first again, as trial 1, and every figure is still relative to them."""
    scenario = _scenario()
    shared = study.open_study(scenario, f"sqlite:///{tmp_path / 'seam.db'}")
    st = shared.study
    with pytest.raises(KeyboardInterrupt):
        study.loop(_context(shared, scenario, Canned(interrupt_at=1), tmp_path), trials=3)
    runner = Canned()
    study.loop(_context(shared, scenario, runner, tmp_path), trials=2)
    recs = records(st)
    assert recs[0].state == TrialState.FAIL and recs[0].outcome == INTERRUPTED
    assert recs[1].is_defaults and recs[1].state == TrialState.COMPLETE
    assert runner.calls[0] == {"enforce-eager": True}  # the defaults' engine, first
    assert ranking.reference_trial(st).number == 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_writes_is_held_until_they_are_done(sig):
    """`no_interrupts` holds a signal, never drops it: a `--gpus` worker gets one SIGINT."""
    # SIGTERM turned into Ctrl-C, as `autotune` does: one that escaped the hold would fail
    # the test instead of stopping pytest.
    old = signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT)) \
        if sig == signal.SIGTERM else None
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with study.no_interrupts():
                os.kill(os.getpid(), sig)
                time.sleep(0.2)  # the handler runs here, in the middle of the writes
                done.append("written")
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    assert done == ["written"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# Interrupts `get_trials` on a SQLite study at random moments, as a Ctrl-C interrupts a
# worker waiting for another's trial; then, as the study does before it gives the trial
# back, frees the interrupted frames and checks that another connection can take the write
# lock at once. Prints 1 at the first round that finds it still held, else 0. The garbage
# collector is off: it would otherwise free a leaked connection at a moment of its own.
INTERRUPTED_READS = """
import gc, os, random, signal, sqlite3, sys, threading, warnings
import optuna
from autotune.tuning.interrupts import interrupted, release_frames
from autotune.tuning.sharing import heartbeat
warnings.simplefilter("ignore")
gc.disable()
path, rounds = sys.argv[1], int(sys.argv[2])
st = optuna.create_study(study_name="s", storage=heartbeat.storage(f"sqlite:///{path}"))
for i in range(20):
    st.enqueue_trial({"x": i})
locked = 0
for _ in range(rounds):
    try:  # on a loaded machine the signal can come before start() returns: inside the try
        threading.Timer(random.random() * 0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        while True:
            st.get_trials(deepcopy=False)
    except BaseException as err:  # a Ctrl-C, or one SQLAlchemy re-raised as the storage's
        if not interrupted(err):
            raise
        release_frames(err)
        other = sqlite3.connect(path, timeout=0.2, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        except sqlite3.OperationalError:
            locked += 1  # the next read would wait for it: 60 s
            break
        finally:
            other.close()
print(locked)
"""


def test_an_interrupted_database_read_leaves_no_lock_behind(tmp_path):
    """Without `release_frames`, about one round in twenty left SQLite's write lock held by
    the interrupted read's connection: a `--gpus` worker stopped by its parent's death took
    70 s to give its trial back (its heartbeat failed after the 60-s busy timeout)."""
    proc = subprocess.run([sys.executable, "-c", INTERRUPTED_READS, str(tmp_path / "s.db"),
                           "80"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["0"], proc.stdout


class _Finalized:
    """An object whose finalizer is where a SIGINT arrives: Python raises the
    KeyboardInterrupt there, reports it as "Exception ignored" and drops it."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


@pytest.fixture
def dropped(monkeypatch) -> list[type[BaseException]]:
    """What Python dropped (`sys.unraisablehook`), instead of pytest's warning about it."""
    seen: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))
    return seen


def test_an_interrupt_python_dropped_still_stops_the_study_before_its_next_trial(tmp_path,
                                                                               dropped):
    """Seen in a `--gpus` worker: its one SIGINT landed in a finalizer while it prepared
    its study, and it went on to its next trial. Within a command (`remembered`), the
    interrupt is raised again where the next trial starts, which goes back to the queue."""

    class DropsOne(Canned):
        def __call__(self, *args: Any, **kw: Any) -> trial_mod.Outcome:
            if not self.calls:
                _Finalized()  # during vLLM's defaults, which still complete
            return super().__call__(*args, **kw)

    scenario = _scenario()
    shared = study.open_study(scenario, f"sqlite:///{tmp_path / 'seam.db'}")
    runner = DropsOne()
    with interrupts.remembered(), pytest.raises(KeyboardInterrupt):
        study.loop(_context(shared, scenario, runner, tmp_path), trials=3)
    assert dropped == [KeyboardInterrupt]
    assert len(runner.calls) == 1  # no engine after the interrupt
    recs = records(shared.study)
    assert recs[0].state == TrialState.COMPLETE
    assert recs[1].state == TrialState.FAIL and recs[1].outcome == INTERRUPTED
    assert [r.baseline for r in recs if r.state == TrialState.WAITING] == ["refused"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back


def test_an_interrupt_is_remembered_only_within_a_command(dropped):
    """A caller that never entered `remembered` (a library user, a test) is left as Python
    leaves it, and one command's interrupt does not outlive it."""
    _Finalized()
    interrupts.raise_if_dropped()  # no command: nothing remembered
    hook = sys.unraisablehook
    with interrupts.remembered():
        _Finalized()
        with pytest.raises(KeyboardInterrupt):
            interrupts.raise_if_dropped()
    interrupts.raise_if_dropped()  # that command ended
    assert dropped == [KeyboardInterrupt, KeyboardInterrupt]
    assert sys.unraisablehook is hook
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_every_autotune_command_remembers_a_dropped_interrupt(dropped, capsys):
    """`autotune`'s commands and `--gpus` workers run through `cli.main.guarded`."""
    from autotune.cli.main import guarded

    def command() -> int:
        _Finalized()
        interrupts.raise_if_dropped()
        return 0

    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        assert guarded(command) == 130
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert capsys.readouterr().err == "autotune: interrupted\n" and dropped


def test_a_ctrl_c_reraised_as_another_error_ends_a_command_as_a_ctrl_c(capsys):
    from autotune.cli.main import guarded

    def command() -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as err:
            raise optuna.exceptions.StorageInternalError("during the commit") from err

    def failing() -> int:
        raise optuna.exceptions.StorageInternalError("a real storage fault")

    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        assert guarded(command) == 130
        with pytest.raises(optuna.exceptions.StorageInternalError):
            guarded(failing)
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert capsys.readouterr().err == "autotune: interrupted\n"


def test_a_killed_tuners_running_trial_runs_again(tmp_path):
    scenario = _scenario()
    url = f"sqlite:///{tmp_path / 'seam.db'}"
    shared = study.open_study(scenario, url)
    st = shared.study
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    trial = heartbeat.ask(st)  # the defaults, left RUNNING as a SIGKILL leaves them
    writers.write(trial, flags={}, worker=json_data(heartbeat.Worker(
        "gone", socket.gethostname(), dead.pid, time.time() - 5)))
    assert shared.recover() == 1  # its process is gone: at once
    recs = records(st)
    assert recs[0].state == TrialState.FAIL
    assert [r.baseline for r in recs if r.state == TrialState.WAITING] == [DEFAULTS]
    assert shared.recover() == 0
    # The defaults run again first; the named baseline is queued once they have finished.
    runner = Canned()
    study.loop(_context(shared, scenario, runner, tmp_path), trials=2)
    assert runner.calls == [{"enforce-eager": True}, {"enforce-eager": True, "max-num-seqs": 4}]


def test_a_trial_written_before_workers_were_recorded_runs_again_after_the_grace(tmp_path):
    scenario = _scenario()
    shared = study.open_study(scenario, f"sqlite:///{tmp_path / 'seam.db'}")
    st = shared.study
    heartbeat.ask(st)  # RUNNING, no worker: an older autotune's, or one killed right after `ask`
    assert shared.recover() == 0  # it might be starting right now
    time.sleep(1.1)
    assert shared.recover(grace_s=1) == 1
    assert records(st)[0].state == TrialState.FAIL


def test_the_time_box_never_starts_a_trial_it_cannot_hold(tmp_path):
    now = [0.0]

    class OneSecond(Canned):  # each trial takes one second of the loop's clock
        def __call__(self, *args, **kw):
            now[0] += 1.0
            return super().__call__(*args, **kw)

    runner = OneSecond()
    scenario = _scenario()
    shared = study.open_study(scenario, f"sqlite:///{tmp_path / 'seam.db'}")
    study.loop(_context(shared, scenario, runner, tmp_path), trials=6, timeout_s=2.5,
               clock=lambda: now[0])
    # After two (2 s) a third would end past 2.5 s.
    assert len(runner.calls) == 2


def test_progress_reports_records(tmp_path):
    scenario = _scenario()
    shared = study.open_study(scenario, f"sqlite:///{tmp_path / 'seam.db'}")
    seen: list[Progress] = []
    study.loop(_context(shared, scenario, Canned(), tmp_path), trials=3,
               on_progress=seen.append)
    assert [p.done for p in seen] == [1, 2, 3]
    assert isinstance(seen[-1].last, TrialRecord) and seen[-1].last.number == 2
    assert seen[-1].best.number == 0  # max-num-seqs 2 is slower than the defaults


def test_a_fault_of_autotunes_own_fails_one_trial_and_the_study_goes_on(tmp_path):
    class Faulty(Canned):
        def __call__(self, scenario, model, flags, trial_dir, **kw):
            if "max-num-seqs" not in flags:
                raise RuntimeError("a bug in the load generator")
            return super().__call__(scenario, model, flags, trial_dir, **kw)

    st = _run(tmp_path, _scenario(), Faulty(), trials=3)
    recs = records(st)
    assert recs[0].state == TrialState.FAIL and recs[0].outcome == ERROR
    assert (recs[0].reason, recs[0].detail) == ("RuntimeError", "a bug in the load generator")
    assert recs[0].flags == {"enforce-eager": True}
    assert [r.state for r in recs[1:]] == [TrialState.PRUNED, TrialState.COMPLETE]
    assert not st.get_trials(states=(TrialState.RUNNING,))


def test_a_bad_input_found_mid_trial_stops_the_study_without_a_running_trial(tmp_path):
    from autotune.errors import ConfigError

    class Refusing(Canned):
        def __call__(self, *args, **kw):
            raise ConfigError("guardrail.prompts: cannot read x")

    with pytest.raises(ConfigError):
        _run(tmp_path, _scenario(), Refusing(), trials=3)
    st = optuna.load_study(study_name="seam", storage=f"sqlite:///{tmp_path / 'seam.db'}")
    (only,) = records(st, (TrialState.FAIL, TrialState.RUNNING))
    assert only.state == TrialState.FAIL and only.reason == "ConfigError"


def test_a_trial_asked_before_the_queued_defaults_goes_back_behind_them(tmp_path):
    """A study whose defaults were queued again behind another trial (an older autotune
    queued every baseline at once): that trial is given back, the defaults run first."""
    scenario = _scenario()
    shared = study.open_study(scenario, f"sqlite:///{tmp_path / 'seam.db'}")
    st = shared.study
    first = heartbeat.ask(st)  # the defaults, then lost
    st.enqueue_trial({"max-num-seqs": 8})  # 1, queued before the defaults come back
    heartbeat.fail_and_requeue(st, TrialRecord.of(st.get_trials()[first.number]))
    runner = Canned()
    study.loop(_context(shared, scenario, runner, tmp_path), trials=2)
    assert runner.calls == [{"enforce-eager": True}]
    recs = records(st)
    assert (recs[1].state, recs[1].reason) == (TrialState.FAIL, "defaults_first")
    assert recs[2].is_defaults and recs[2].state == TrialState.COMPLETE
    # It is queued again, behind the defaults and ahead of the named baseline they queued.
    assert [r.baseline for r in recs if r.state == TrialState.WAITING] == [None, "refused"]
    study.loop(_context(shared, scenario, runner, tmp_path), trials=1)
    assert runner.calls[1] == {"enforce-eager": True, "max-num-seqs": 8}
