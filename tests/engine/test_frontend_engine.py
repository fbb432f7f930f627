"""Front-end flags reach the real engine: `--api-server-count` starts that many API servers.

The launcher runs `vllm serve` (on the CPU build through `autotune.engine.serve`), not the
single-worker `vllm.entrypoints.openai.api_server`, which parses `--api-server-count` and
ignores it. autotune's probes read `/metrics`, so the samples they use must still be there
with several API servers (vLLM then aggregates Prometheus samples across processes).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest

from autotune.engine import prometheus
from autotune.engine.server import Server
from autotune.measure import probes

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("no_leftover_engine")]

# What autotune's probes and start-up read from /metrics.
PROBED = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total",
          "vllm:prefix_cache_hits_total", "vllm:generation_tokens_total")


def _complete(srv: Server, max_tokens: int = 4) -> int:
    """Tokens generated. Not the text: the tiny model's random weights can pick tokens
    that decode to nothing, and one CI run got an empty string for 4 tokens."""
    body = json.dumps({"model": srv.model, "prompt": "Hello", "max_tokens": max_tokens,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"{srv.url}/v1/completions", data=body, method="POST",
                                 headers={**srv.headers, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
        return json.loads(resp.read())["usage"]["completion_tokens"]


def _titles(srv: Server) -> list[str]:
    names = []
    for p in srv.processes():
        try:
            names.append(p.cmdline()[0] if p.cmdline() else p.name())
        except psutil.Error:
            continue
    return names


def _key_is_private_and_required(srv: Server) -> None:
    """The key is on no command line (`ps`) nor in the log, and every API server wants it
    (several tries: the kernel spreads connections over the servers sharing the port)."""
    for p in srv.processes():
        try:
            cmdline = " ".join(p.cmdline())
        except psutil.Error:
            continue
        assert srv.api_key not in cmdline, f"API key on the command line of {p.pid}"
    assert srv.api_key not in srv.read_log()
    for _ in range(6):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(f"{srv.url}/v1/models"), timeout=10)
        assert err.value.code == 401


def test_two_api_servers_serve_and_keep_the_probed_metrics(tiny_model, tmp_path):
    with Server(str(tiny_model), {"api-server-count": 2, "enforce-eager": True},
                log_path=tmp_path / "e.log") as srv:
        titles = _titles(srv)
        # vLLM titles each API server process `VLLM::APIServer_<i>`; the launching process
        # only supervises them.
        assert sorted(t for t in titles if t.startswith("VLLM::APIServer")) == \
            ["VLLM::APIServer_0", "VLLM::APIServer_1"], titles
        assert "VLLM::EngineCore" in titles
        assert "Started 2 API server processes" in srv.read_log()
        _key_is_private_and_required(srv)

        # Requests in flight, so the gauges have something to show; the shared port
        # spreads them over both servers. The load keeps going until a scrape has seen it
        # (or two minutes pass): on a busy 2-core machine a scrape can take longer than a
        # fixed batch of requests, and one CI run saw none answered while they ran.
        peak: dict[str, float] = {}
        stop = threading.Event()
        sent: list[int] = []

        def load() -> None:
            while not stop.is_set():
                try:
                    sent.append(_complete(srv, 256))
                except (urllib.error.URLError, OSError):
                    continue

        workers = [threading.Thread(target=load, daemon=True) for _ in range(8)]
        for w in workers:
            w.start()
        scrapes = answered = 0
        deadline = time.monotonic() + 120
        try:
            while time.monotonic() < deadline and not (
                    peak.get("vllm:num_requests_running", 0) > 0
                    and peak.get("vllm:kv_cache_usage_perc", 0) > 0):
                text = srv.get_text("/metrics", timeout=60)
                scrapes += 1
                answered += text is not None
                for name, value in prometheus.scrape(text or "").items():
                    peak[name] = max(peak.get(name, 0.0), value)
        finally:
            stop.set()
            for w in workers:
                w.join(timeout=90)
        assert _complete(srv) == 4
        values = prometheus.scrape(srv.get_text("/metrics", timeout=60) or "")
        missing = [m for m in PROBED if m not in values]
        assert not missing, f"missing from /metrics with 2 API servers: {missing}"
        assert values["vllm:generation_tokens_total"] >= len(sent) * 256 + 4
        assert peak.get("vllm:num_requests_running", 0) > 0, \
            f"{answered} of {scrapes} scrapes answered under load: {peak}"
        assert peak.get("vllm:kv_cache_usage_perc", 0) > 0, peak
        assert srv.cache_info.get("num_gpu_blocks"), "vllm:cache_config_info is missing"
        assert srv.figures.kv_cache_tokens


def test_one_api_server_keeps_the_key_off_the_command_line(eager_server):
    titles = _titles(eager_server)
    assert not [t for t in titles if t.startswith("VLLM::APIServer")], titles
    assert [p for p in eager_server.processes()
            if probes.role(p.cmdline()) == probes.LAUNCHER]
    assert _complete(eager_server) == 4
    _key_is_private_and_required(eager_server)
