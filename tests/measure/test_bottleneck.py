"""Bottleneck attribution and the per-process probe figures it reads (no engine)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import optuna
import pytest

from autotune.engine import prometheus
from autotune.measure import bottleneck, probes, searchresult
from autotune.measure.loadgen import LagMonitor, SseBuffer
from autotune.tuning.records.snapshot import records
from tests.paths import ROOT


@pytest.mark.parametrize("figures, lag, kind", [
    ({"client_cpu": 97.0, "api_server_cpu": 99.0}, {}, "client"),
    ({"client_cpu": 20.0}, {"lag_p99_ms": 45.0}, "client"),
    ({"preemptions": 12, "api_server_cpu": 99.0}, {}, "kv_cache"),
    ({"kv_cache_usage_max": 0.99, "requests_waiting_max": 3}, {}, "kv_cache"),
    ({"kv_cache_usage_max": 0.99, "requests_waiting_max": 0}, {}, "none"),
    ({"api_server_cpu": 98.0, "api_servers": 1, "gpu_util_mean": 70.0}, {}, "front_end"),
    ({"api_server_cpu": 60.0, "engine_core_cpu": 99.0}, {}, "engine_core"),
    ({"api_server_cpu": 60.0, "engine_core_cpu": 50.0, "gpu_util_mean": 97.0}, {}, "gpu"),
    ({"api_server_cpu": 40.0, "gpu_util_mean": 60.0}, {"lag_p99_ms": 1.0}, "none"),
    ({"api_server_cpu": 40.0, "worker_cpu": 180.0}, {}, "worker"),
    ({"api_server_cpu": 40.0, "worker_cpu": 99.0, "gpu_util_mean": 95.0}, {}, "gpu"),
    # one pinned core shared by the client, API server, engine core and worker (CPU build)
    ({"client_cpu": 17.0, "api_server_cpu": 33.0, "engine_core_cpu": 11.0, "worker_cpu": 34.0,
      "cores_busy": 96.0, "cores": 1}, {}, "host_cpu"),
    ({"api_server_cpu": 95.0, "cores_busy": 97.0, "cores": 2}, {}, "front_end"),  # one process
    ({"api_server_cpu": 40.0, "cores_busy": 60.0, "cores": 2}, {}, "none"),
    ({}, {}, "none"),
])
def test_attribution_order(figures, lag, kind):
    got = bottleneck.attribute(figures, lag)
    assert got.kind == kind
    assert got.valid == (kind != "client")


def test_a_lagging_client_at_low_cpu_is_starved_not_saturated():
    """A process at 5 % of a core is not saturated: its loop woke late because the
    machine's cores were busy elsewhere (the engine, on 2 shared cores)."""
    starved = bottleneck.attribute({"client_cpu": 5.0}, {"lag_p99_ms": 68.0})
    assert starved.kind == "client" and not starved.valid
    assert starved.text.startswith("client starved: its event loop woke 68 ms late (p99) "
                                   "with its process at 5 % of a core")
    busy = bottleneck.attribute({"client_cpu": 97.0}, {"lag_p99_ms": 68.0})
    assert busy.text.startswith("client saturated: its process 97 % of a core")


def test_full_host_cores_name_every_process_sharing_them():
    """The README's CPU study, pinned to one core: no process near a core, the core full.
    Its steps had read "no resource saturated ... the SLO binds first"."""
    figures = {"client_cpu": 17.0, "api_server_cpu": 33.4, "engine_core_cpu": 11.3,
               "worker_cpu": 34.0, "cores_busy": 96.4, "cores": 1, "gpu_util_mean": None}
    assert bottleneck.attribute(figures).text == (
        "host CPU: the 1 core the engine and the client may use 96 % busy, shared: API server "
        "33 %, engine core 11 %, model worker 34 %, client 17 %")
    idle = bottleneck.attribute({**figures, "cores_busy": 55.0, "cores": 2})
    assert idle.kind == "none" and idle.text == (
        "no resource saturated (GPU busy -, API server 33 %, engine core 11 %, model worker "
        "34 %, client 17 %, host cores 55 %, KV max 0%): the SLO binds first")
    # a record made before the host's cores were read words "none" as it did
    assert bottleneck.attribute({"api_server_cpu": 40.0}).text == (
        "no resource saturated (GPU busy -, API server 40 %, engine core -, KV max 0%): the "
        "SLO binds first")


def test_a_core_kept_busy_reads_busy():
    """`_CoresMeter` counts every process on the cores it watches: a child spinning on one
    core keeps it nearly all busy, whoever else runs there."""
    core = min(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(child.pid, {core})
        meter = probes._CoresMeter()
        assert meter.read({core}) is None  # the first reading only starts the count
        time.sleep(1.0)
        busy = meter.read({core})
        assert busy is not None and busy > 80, busy
        sampler = probes.Sampler("http://127.0.0.1:9", pids=lambda: [child.pid])
        sampler.sample()
        time.sleep(0.3)
        sampler.sample()
        s = sampler.summary()
        # the child's core and the client's own (this process's): every core either may use
        assert s.cores == len({core} | os.sched_getaffinity(0))
        assert s.cores_busy is not None and s.cores_busy > 0
    finally:
        child.kill()
        child.wait()


def test_front_end_text_names_the_figures():
    got = bottleneck.attribute({"api_server_cpu": 98.4, "api_servers": 1})
    assert got.text == "front end: API server 98 % of one core (1 API server)"


@pytest.mark.parametrize("cmdline, role", [
    (["VLLM::APIServer_1"], probes.API_SERVER),
    (["/usr/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
     probes.LAUNCHER),
    (["/venv/bin/python", "-m", "autotune.engine.serve", "m"], probes.LAUNCHER),
    (["/venv/bin/vllm", "serve", "m"], probes.LAUNCHER),
    (["VLLM::EngineCore"], probes.ENGINE_CORE),
    (["VLLM::Worker_TP0"], probes.WORKER),
    (["python", "-m", "autotune.engine._reaper", "20", "--", "vllm", "serve"], None),
    (["python", "-c", "from multiprocessing.spawn import spawn_main"], probes.OTHER),
])
def test_process_roles(cmdline, role):
    assert probes.role(cmdline) == role


def test_summary_averages_cpu_and_takes_counter_deltas():
    samples = [
        probes.ProbeSample(0.0, {"vllm:num_preemptions_total": 3, "vllm:kv_cache_usage_perc": 0.1,
                            "vllm:num_requests_waiting": 0}, {}),
        probes.ProbeSample(1.0, {"vllm:num_preemptions_total": 5, "vllm:kv_cache_usage_perc": 0.5,
                            "vllm:num_requests_waiting": 4},
                      {"api_server_max": 90.0, "api_servers": 2.0, "engine_core": 40.0,
                       "client": 10.0}, gpu_util=80.0),
        probes.ProbeSample(2.0, {}, {"api_server_max": 100.0, "api_servers": 2.0, "client": 20.0},
                      gpu_util=60.0),
    ]
    s = probes.summarize(samples)
    assert s.preemptions == 2 and s.kv_cache_usage_max == 0.5
    assert s.requests_waiting_mean == 2 and s.requests_waiting_max == 4
    assert s.api_server_cpu == 95 and s.api_servers == 2 and s.engine_core_cpu == 40
    assert s.client_cpu == 15 and s.gpu_util_mean == 70


def test_sampler_window_selects_by_time():
    sampler = probes.Sampler("http://127.0.0.1:9")
    sampler.samples = [probes.ProbeSample(t, {}, {"client": float(t)}) for t in range(10)]
    assert sampler.summary(2.0, 4.0).client_cpu == 3.0
    assert sampler.summary().samples == 10


def test_sampler_reads_its_own_cpu_from_a_thread():
    sampler = probes.Sampler("http://127.0.0.1:9", interval=0.05)

    async def busy():
        async with sampler:
            end = asyncio.get_running_loop().time() + 0.4
            while asyncio.get_running_loop().time() < end:
                sum(range(10_000))
    asyncio.run(busy())
    s = sampler.summary()
    assert s.samples >= 3
    # a busy loop: a share of a core that only a contended host keeps low
    assert s.client_cpu is not None and s.client_cpu > 5


def test_sse_buffer_splits_events_across_reads():
    buf = SseBuffer()
    assert buf.add(b'data: {"a"') == []
    assert buf.add(b': 1}\n\ndata: {"b": 2}\n\n: keep-alive\n\ndata: [DO') == [
        '{"a": 1}', '{"b": 2}']
    assert buf.add(b"NE]\n\n") == ["[DONE]"]


def test_lag_monitor_sees_a_blocked_loop():
    async def main():
        lag = LagMonitor(period=0.005)
        lag.start()
        await asyncio.sleep(0.05)
        import time
        time.sleep(0.1)  # the loop cannot run: every reading after this is late
        await asyncio.sleep(0.02)
        await lag.stop()
        return lag.figures()
    figures = asyncio.run(main())
    assert (figures.lag_max_ms or 0.0) >= 90


def test_scrape_can_read_only_the_probed_families():
    page = """# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# HELP vllm:num_preemptions_total Preempted.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="m"} 7.0
# HELP vllm:e2e_request_latency_seconds E2E.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_count{model_name="m"} 2.0
vllm:e2e_request_latency_seconds_sum{model_name="m"} 0.5
"""
    assert prometheus.scrape(page, prometheus.PROBED) == {"vllm:num_requests_running": 3.0,
                                                  "vllm:num_preemptions_total": 7.0}
    assert len(prometheus.scrape(page)) == 5


def _guided_steps(number: int):
    """A trial's capacity record from the committed H200 study h200-guided-check."""
    db = ROOT / "studies" / "h200-guided-check.db"
    st = optuna.load_study(study_name="h200-guided-check", storage=f"sqlite:///{db}")
    return records(st)[number].capacity


def test_the_knee_names_what_rose_not_what_was_pegged_everywhere():
    """vLLM's defaults on the H200 (h200-guided-check #0): the engine core read 94-98 % of a
    core at every step, passing or failing, and its threshold named it; across the knee
    (50.1 req/s passing, 54.7 failing) the API server rose 77 -> 88 %."""
    cap = _guided_steps(0)
    assert cap.limit is not None and cap.limit.kind == bottleneck.ENGINE_CORE  # as recorded then
    limit = cap.steps[cap.bottleneck_step]
    found = searchresult.knee(cap.steps, cap.rate, limit)
    assert found is not None and found.kind == bottleneck.FRONT_END
    assert "across the knee API server 77 -> 88 %" in found.text
    assert "engine core 95-98 % on both sides, not what broke" in found.text
    # the winner (#6): nothing rose into saturation; the failing step's reading stands
    won = _guided_steps(6)
    assert searchresult.knee(won.steps, won.rate, won.steps[won.bottleneck_step]) == \
        won.steps[won.bottleneck_step].bottleneck


def test_a_pegged_resource_is_not_named_when_another_rises():
    passing = [{"api_server_cpu": 60.0, "engine_core_cpu": 97.0, "gpu_util_mean": 70.0}]
    failing = {"api_server_cpu": 85.0, "engine_core_cpu": 99.0, "gpu_util_mean": 71.0}
    assert bottleneck.attribute(failing).kind == bottleneck.ENGINE_CORE  # the threshold alone
    found = bottleneck.across(passing, failing)
    assert found is not None and found.kind == bottleneck.FRONT_END
    # nothing rose: no contrast to read, the threshold reading stands
    assert bottleneck.across(passing, {**failing, "api_server_cpu": 62.0}) is None
    # a saturated client or a full KV cache is named as the failing step shows it
    assert bottleneck.across(passing, {**failing, "client_cpu": 99.0}).kind == bottleneck.CLIENT
    assert bottleneck.across(passing, {**failing, "preemptions": 3}).kind == bottleneck.KV_CACHE


def test_a_busy_resource_that_still_rose_across_the_knee_is_named():
    """The GPU at 91 % passing and 100 % failing rose across the knee; the engine core at
    95 % on both sides did not: the GPU is named, not the first busy resource in order."""
    found = bottleneck.across([{"engine_core_cpu": 95.0, "gpu_util_mean": 91.0,
                                "api_server_cpu": 40.0}],
                              {"engine_core_cpu": 95.0, "gpu_util_mean": 100.0,
                               "api_server_cpu": 44.0})
    assert found is not None and found.kind == bottleneck.GPU
    assert "GPU busy 91 -> 100 %" in found.text and "engine core 95-95 %" in found.text
    assert bottleneck.suspects([{"engine_core_cpu": 95.0, "gpu_util_mean": 91.0}],
                               {"engine_core_cpu": 95.0, "gpu_util_mean": 100.0}) == \
        [bottleneck.GPU, bottleneck.ENGINE_CORE]
