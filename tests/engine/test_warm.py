"""Warm starts without an engine: the module form of a command, a spare reaper's protocol
(import, `ready`, run in a fork, status line, exit code), and the cold fallback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from autotune.engine import warm
from autotune.engine._reaper import MARK, imported_env
from tests.paths import ROOT


@pytest.fixture(autouse=True)
def warm_on(monkeypatch):
    """Warm starts are opt-in; these tests are about them."""
    monkeypatch.setenv("AUTOTUNE_WARM_START", "1")


def test_commands_have_a_module_form_in_this_interpreter():
    e = warm.entry([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "m"])
    assert (e.module, e.argv) == ("vllm.entrypoints.openai.api_server",
                                  ["vllm.entrypoints.openai.api_server", "--model", "m"])
    assert "vllm.entrypoints" in e.title  # what `ps` and the probes see
    e = warm.entry(["/venv/bin/vllm", "serve", "m", "--port", "1"])
    assert e.module == "vllm.entrypoints.cli.main" and e.argv[1:] == ["serve", "m", "--port", "1"]
    assert warm.entry(["/other/python", "-m", "x"]) is None  # another interpreter: cold
    assert warm.entry(["sh", "-c", "true"]) is None


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


@pytest.mark.parametrize("code", [0, 3])
def test_a_spare_runs_the_command_in_a_fork_and_reports_how_it_ended(tmp_path, code):
    env = _env()
    spare = warm.prepare("tests.warm_echo", env, grace=2.0)
    assert spare is not None and spare.wait_ready(30)
    log = tmp_path / "engine.log"
    entry = warm.entry([sys.executable, "-m", "tests.warm_echo", str(code)])
    spare.start(entry, {**env, "WARM_ECHO": "from the job"}, str(log))
    assert spare.proc.wait(30) == code
    text = log.read_text()
    # Once as __main__, and with what the spare's imports set (tests/warm_echo_dep.py).
    assert f"argv ['{code}'] env from the job dep imported copy False" in text
    assert f"{MARK} engine command" in text and f"exited with code {code}" in text
    with pytest.raises(psutil.NoSuchProcess):
        psutil.Process(spare.proc.pid).status()  # gone, and reaped


def test_a_variable_the_job_sets_itself_wins_over_the_imports(tmp_path):
    env = _env()
    spare = warm.prepare("tests.warm_echo", env, grace=2.0)
    assert spare is not None and spare.wait_ready(30)
    log = tmp_path / "engine.log"
    spare.start(warm.entry([sys.executable, "-m", "tests.warm_echo", "0"]),
                {**env, "WARM_ECHO_DEP": "mine"}, str(log))
    assert spare.proc.wait(30) == 0
    assert "dep mine copy False" in log.read_text()


def test_the_environment_after_a_spares_imports_is_the_cold_starts():
    before = {"KEEP": "1", "GONE": "x", "SAME": "s"}
    after = {"KEEP": "1", "SAME": "s", "NEW": "n"}  # the imports set NEW and removed GONE
    assert imported_env({"KEEP": "1", "GONE": "x", "SAME": "s", "JOB": "j"}, before, after) \
        == {"KEEP": "1", "SAME": "s", "JOB": "j", "NEW": "n"}
    # The job's own value of a variable the imports touched stays.
    assert imported_env({"NEW": "mine", "GONE": "y"}, before, after) == \
        {"NEW": "mine", "GONE": "y"}


def test_lazy_entry_points_preload_the_serve_stack():
    assert warm.preloads("vllm.entrypoints.openai.api_server") == \
        ["vllm.entrypoints.openai.api_server"]
    for lazy in ("vllm.entrypoints.cli.main", "autotune.engine.serve"):
        assert warm.preloads(lazy) == [lazy, warm.SERVE_STACK]


def test_a_spare_that_cannot_import_means_a_cold_start(tmp_path):
    env = _env()
    warm.prepare("no_such_module_for_autotune", env, grace=1.0)
    assert warm.take("no_such_module_for_autotune", env, timeout=30) is None
    assert warm.take("no_such_module_for_autotune", env, timeout=1) is None  # used up


def test_spares_are_matched_by_what_was_imported_with(tmp_path):
    env = _env()
    warm.prepare("tests.warm_echo", env, grace=1.0)
    # Another logging set-up at import time: not this spare.
    assert warm.take("tests.warm_echo", {**env, "VLLM_LOGGING_LEVEL": "DEBUG"}, 1) is None
    spare = warm.take("tests.warm_echo", env, timeout=30)
    assert spare is not None
    spare.discard()


def test_an_idle_spare_leaves_with_its_tuner():
    """SIGKILL of the process that started a spare: the spare exits on its own."""
    script = ("import os, sys, time; from autotune.engine import warm; "
              "s = warm.prepare('tests.warm_echo', dict(os.environ), 1.0); "
              "s.wait_ready(30); print(s.proc.pid, flush=True); time.sleep(600)")
    tuner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             text=True, env=_env(), cwd=ROOT)
    spare_pid = int(tuner.stdout.readline())
    assert psutil.pid_exists(spare_pid)
    tuner.send_signal(signal.SIGKILL)
    tuner.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(spare_pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the spare outlived its tuner")


def test_a_warm_started_command_leaves_with_its_tuner(tmp_path):
    """SIGKILL of the tuner after a spare took a command: the command and its own child
    (an engine core's stand-in) go too, as for a cold start (test_engine.py)."""
    log = tmp_path / "engine.log"
    script = ("import os, sys, time; from autotune.engine import warm; "
              "env = dict(os.environ); s = warm.prepare('tests.warm_echo', env, 1.0); "
              "s.wait_ready(30); "
              "s.start(warm.entry([sys.executable, '-m', 'tests.warm_echo', 'hold']), env, "
              f"{str(log)!r}); print(s.proc.pid, flush=True); time.sleep(600)")
    tuner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             text=True, env=_env(), cwd=ROOT)
    reaper = int(tuner.stdout.readline())
    deadline = time.monotonic() + 30
    while "holding" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the command did not start"
        time.sleep(0.1)
    command, child = (int(x) for x in log.read_text().split("holding")[1].split()[:2])
    tuner.send_signal(signal.SIGKILL)
    tuner.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if not [pid for pid in (reaper, command, child) if _running(pid)]:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the warm-started command outlived its tuner")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(("value", "on"), [("1", True), ("Yes", True), ("on", True),
                                         ("0", False), ("false", False), ("OFF", False)])
def test_the_variable_decides_whatever_the_host(monkeypatch, value, on):
    monkeypatch.setenv("AUTOTUNE_WARM_START", value)
    for cores in (2, 16):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert warm.enabled() is on
    if not on:
        assert warm.prepare("tests.warm_echo", _env(), 1.0) is None
        assert warm.take("tests.warm_echo", _env(), 1.0) is None


@pytest.mark.parametrize(("cores", "on"), [(2, False), (7, False), (8, True), (16, True)])
@pytest.mark.parametrize("value", [None, "", "maybe"])
def test_unset_the_host_decides(monkeypatch, cores, on, value):
    if value is None:
        monkeypatch.delenv("AUTOTUNE_WARM_START", raising=False)
    else:
        monkeypatch.setenv("AUTOTUNE_WARM_START", value)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert warm.enabled() is on
