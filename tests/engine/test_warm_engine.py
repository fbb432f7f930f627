"""A warm start on the real CPU engine is the same engine, started without its imports.

The first server of the test is started cold and prepares a spare when it stops; the second
is the spare's fork: same command line as `ps` shows it, the same process tree and roles,
a completion served, and nothing left when it stops.
"""

from __future__ import annotations

import json
import time
import urllib.request

import psutil
import pytest

from autotune.engine import warm
from autotune.engine.server import Server
from autotune.measure import probes

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("no_leftover_engine")]


def _complete(srv: Server) -> str:
    body = json.dumps({"model": srv.model, "prompt": "Hello", "max_tokens": 4,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"{srv.url}/v1/completions", data=body, method="POST",
                                 headers={**srv.headers, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["choices"][0]["text"]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_warm_start_is_the_same_engine(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_WARM_START", "1")  # opt-in (warm.enabled says why)
    warm.discard_all()  # a spare another test left: this test starts its own chain
    flags = {"enforce-eager": True, "max-num-seqs": 4}
    with Server(str(tiny_model), flags, log_path=tmp_path / "cold.log") as cold:
        assert cold.launch_path == warm.COLD
        cold_text = _complete(cold)
        cold_imports = cold.phases["imports"]
    # Its stop prepared a spare: the next launch takes it once it has imported vLLM.
    assert cold.spare_ready(120), "the spare did not get ready"
    t0 = time.monotonic()
    with Server(str(tiny_model), flags, log_path=tmp_path / "warm.log") as hot:
        started = time.monotonic() - t0
        assert hot.launch_path == warm.WARM
        hot.prepare_next = False  # no launch follows: its stop prepares no spare
        # The spare had imported vLLM: the API server's import phase all but vanishes.
        assert hot.phases["imports"] < 0.5 * cold_imports, (hot.phases, cold_imports)
        assert _complete(hot) == cold_text  # greedy, same weights: the same tokens
        tree = psutil.Process(hot.proc.pid).children(recursive=True)
        roles = [probes.role(p.cmdline()) for p in tree]
        assert roles[0] == probes.LAUNCHER  # the API server, as `ps` shows it
        assert probes.ENGINE_CORE in roles
        assert "vllm.entrypoints" in " ".join(tree[0].cmdline())
        assert hot.figures.kv_cache_tokens == cold.figures.kv_cache_tokens
        members = [psutil.Process(hot.proc.pid), *tree]
    assert not [p for p in members if _alive(p)]
    spares = [p for p in psutil.Process().children(recursive=True)
              if "--warm" in p.cmdline() and _alive(p)]
    assert not spares, "a spare was prepared with no launch to follow"
    log = (tmp_path / "warm.log").read_text()
    assert log.startswith("$ ") and "engine command" in log  # the command, the reaper's status
    # How much faster is benchmarks/startup.py's question, not a test's.
    print(f"cold {cold.startup_s:.1f} s, warm {hot.startup_s:.1f} s ({started:.1f} s)")
