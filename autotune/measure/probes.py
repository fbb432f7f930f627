"""Watch the engine while a load runs: `/metrics`, GPU, and the CPU of every process.

The parsing functions are pure. `Sampler` polls from its own thread, never from the
load generator's event loop: a `/metrics` parse or a scan of the process table takes
tens of milliseconds on a busy host, and done on the loop it delays stream reads, so
events arrive bunched and ITLs read as ~0 (seen on 2 cores: median ITL 0.01 ms against
`vllm bench serve`'s 1.8 ms on the same server). Each sample is timestamped with
`perf_counter`, the request clock, so a steady-state window can be cut from the series.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from autotune.engine import gpu
from autotune.engine.prometheus import PROBED, scrape
from autotune.measure.probesummary import ProbeSummary

# Process roles whose CPU is sampled, as `vllm serve` names its processes.
API_SERVER, ENGINE_CORE, WORKER, OTHER = "api_server", "engine_core", "worker", "other"
# How often the engine's process list is read again (processes appear only at start-up).
PID_REFRESH_S = 5.0
# The launched `vllm serve` process: the API server itself, unless it started several
# (`--api-server-count`), which it then only supervises.
LAUNCHER = "launcher"


def role(cmdline: list[str]) -> str | None:
    """What an engine process does, from its title or command line; None for the reaper.

    vLLM titles its processes `VLLM::EngineCore`, `VLLM::APIServer_0`, `VLLM::Worker...`;
    the launched process keeps its command line (LAUNCHER): it is the API server when it
    is the only one, and only supervises when it started several.
    """
    head = cmdline[0] if cmdline else ""
    text = " ".join(cmdline)
    if "autotune.engine._reaper" in text:
        return None
    if head.startswith("VLLM::APIServer"):
        return API_SERVER
    if "vllm.entrypoints" in text or "autotune.engine.serve" in text \
            or (len(cmdline) > 1 and cmdline[1] == "serve"):
        return LAUNCHER
    if head.startswith("VLLM::EngineCore"):
        return ENGINE_CORE
    if head.startswith("VLLM::"):
        return WORKER
    return OTHER


@dataclass
class ProbeSample:
    """One reading: engine metrics, CPU per role (percent of one core), GPU, memory."""

    t: float  # perf_counter
    values: dict[str, float]  # `vllm:` metrics; empty when /metrics did not answer
    cpu: dict[str, float] = field(default_factory=dict)
    gpu_util: float | None = None
    gpu_used_mib: float | None = None
    gpu_engine_mib: float | None = None
    rss_mib: float | None = None


class _CpuMeter:
    """Percent of one core used by each process since its previous reading."""

    def __init__(self) -> None:
        self.last: dict[int, tuple[float, float]] = {}

    def read(self, proc: psutil.Process, now: float) -> float | None:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            return None
        used = times.user + times.system
        before = self.last.get(proc.pid)
        self.last[proc.pid] = (now, used)
        if before is None or now <= before[0]:
            return None
        return 100.0 * (used - before[1]) / (now - before[0])


def _cpu_times() -> tuple[list[float], list[float]]:
    """Busy and total CPU seconds of every core, as psutil counts them (guest time is
    already in user time on Linux; idle and I/O wait are not busy)."""
    busy, total = [], []
    for t in psutil.cpu_times(percpu=True):
        fields = t._asdict()
        whole = sum(fields.values()) - fields.get("guest", 0.0) - fields.get("guest_nice", 0.0)
        total.append(whole)
        busy.append(whole - fields.get("idle", 0.0) - fields.get("iowait", 0.0))
    return busy, total


class _CoresMeter:
    """Percent busy of a set of cores since the previous reading (every process on them
    counts: the engine's, the client's and anyone else's)."""

    def __init__(self) -> None:
        self.last: tuple[list[float], list[float]] | None = None

    def read(self, cores: set[int]) -> float | None:
        now = _cpu_times()
        before, self.last = self.last, now
        if before is None or not cores:
            return None
        count = min(len(now[1]), len(before[1]))
        known = [c for c in cores if c < count]
        spent = sum(now[1][c] - before[1][c] for c in known)
        return 100.0 * sum(now[0][c] - before[0][c] for c in known) / spent if spent > 0 \
            else None


def _affinity(procs: list[psutil.Process]) -> set[int]:
    """The cores any of `procs` may run on."""
    out: set[int] = set()
    for proc in procs:
        try:
            out.update(proc.cpu_affinity() or [])
        except (psutil.Error, AttributeError):  # no affinity on this platform
            continue
    return out


class Sampler:
    """Samples `/metrics`, NVML and per-process CPU every `interval` s from a thread.

    `pids()` names the engine's processes. Use as `async with Sampler(...)` around a
    load (or `start()`/`stop()`); `summary()` covers every sample, `summary(a, b)` the
    samples taken between perf_counter times a and b.
    """

    def __init__(self, url: str, pids: Callable[[], list[int]] | None = None,
                 interval: float = 1.0, headers: dict[str, str] | None = None):
        self.url = url.rstrip("/") + "/metrics"
        self.pids = pids or (lambda: [])
        self.interval = interval
        self.headers = headers or {}
        self.samples: list[ProbeSample] = []
        self.gpu = gpu.Monitor()
        self._cpu = _CpuMeter()
        self._cores_meter = _CoresMeter()
        self._cores: set[int] = set()
        self._procs: dict[int, tuple[psutil.Process, str | None]] = {}
        self._me = psutil.Process(os.getpid())
        self._pids: list[int] = []
        self._pids_at = -1e9
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    async def __aenter__(self) -> Sampler:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="autotune-probes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def _metrics(self) -> dict[str, float]:
        req = urllib.request.Request(self.url, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return scrape(resp.read().decode(errors="replace"), PROBED)
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def _processes(self, pids: list[int]) -> list[tuple[psutil.Process, str | None]]:
        """The engine's processes with their roles; Process objects are kept so that CPU
        times are compared on the same process, not on a reused pid."""
        out = []
        for pid in pids:
            if pid not in self._procs:
                try:
                    proc = psutil.Process(pid)
                    self._procs[pid] = (proc, role(proc.cmdline()))
                except psutil.Error:
                    continue
            out.append(self._procs[pid])
        return out

    def sample(self) -> None:
        values = self._metrics()
        now = time.perf_counter()
        if now - self._pids_at > PID_REFRESH_S:  # a scan of the process table is costly
            self._pids, self._pids_at = self.pids(), now
            self._cores = _affinity([p for p, _ in self._processes(self._pids)] + [self._me])
        pids = self._pids
        cpu: dict[str, float] = {}
        api: list[float] = []
        workers: list[float] = []
        procs = self._processes(pids)
        several = any(what == API_SERVER for _, what in procs)
        for proc, what in procs:
            pct = self._cpu.read(proc, now)
            if what is None or pct is None:
                continue
            if what == LAUNCHER:
                what = OTHER if several else API_SERVER
            if what == API_SERVER:
                api.append(pct)
            elif what == WORKER:
                workers.append(pct)
            cpu[what] = cpu.get(what, 0.0) + pct
        if api:
            cpu["api_server_max"] = max(api)
            cpu["api_servers"] = float(len(api))
        if workers:
            cpu["worker_max"] = max(workers)
        mine = self._cpu.read(self._me, now)
        if mine is not None:
            cpu["client"] = mine
        busy = self._cores_meter.read(self._cores)
        if busy is not None:
            cpu["cores_busy"], cpu["cores"] = busy, float(len(self._cores))
        used, engine = self.gpu.memory_mib(pids)
        self.samples.append(ProbeSample(now, values, cpu, self.gpu.utilization(), used, engine,
                                   _rss_mib(pids)))

    def series(self, name: str) -> list[tuple[float, float]]:
        """(time, value) of one engine metric over every sample that has it."""
        return [(s.t, s.values[name]) for s in self.samples if name in s.values]

    def summary(self, a: float | None = None, b: float | None = None) -> ProbeSummary:
        """Figures over the samples taken in [a, b] (all when not given); counters are the
        change between the first and the last sample of the window."""
        inside = [s for s in self.samples if (a is None or s.t >= a) and (b is None or s.t <= b)]
        return summarize(inside)


def summarize(samples: list[ProbeSample]) -> ProbeSummary:
    """A ProbeSummary of consecutive samples (pure)."""
    engine = [s.values for s in samples if s.values]
    first, last = (engine[0], engine[-1]) if engine else ({}, {})

    def delta(name: str) -> float:
        return last.get(name, 0.0) - first.get(name, 0.0)

    def series(name: str) -> list[float]:
        return [v[name] for v in engine if name in v]

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    def cpu(name: str) -> float | None:
        return mean([s.cpu[name] for s in samples if name in s.cpu])

    kv, waiting = series("vllm:kv_cache_usage_perc"), series("vllm:num_requests_waiting")
    queries = delta("vllm:prefix_cache_queries_total")
    return ProbeSummary(
        samples=len(samples),
        preemptions=delta("vllm:num_preemptions_total"),
        kv_cache_usage_max=max(kv, default=0.0),
        kv_cache_usage_mean=mean(kv) or 0.0,
        requests_waiting_max=max(waiting, default=0.0),
        requests_waiting_mean=mean(waiting) or 0.0,
        requests_running_max=max(series("vllm:num_requests_running"), default=0.0),
        prefix_cache_hit_rate=delta("vllm:prefix_cache_hits_total") / queries
        if queries > 0 else None,
        gpu_memory_used_mib_max=_peak(s.gpu_used_mib for s in samples),
        gpu_memory_engine_mib_max=_peak(s.gpu_engine_mib for s in samples),
        rss_mib_max=_peak(s.rss_mib for s in samples),
        gpu_util_mean=mean([s.gpu_util for s in samples if s.gpu_util is not None]),
        api_server_cpu=cpu("api_server_max"),
        api_servers=int(max((s.cpu.get("api_servers", 0) for s in samples), default=0)),
        engine_core_cpu=cpu(ENGINE_CORE),
        worker_cpu=cpu("worker_max"),
        client_cpu=cpu("client"),
        cores_busy=cpu("cores_busy"),
        cores=int(max((s.cpu.get("cores", 0) for s in samples), default=0)),
    )


def merge(parts: list[ProbeSummary]) -> ProbeSummary:
    """One summary for consecutive phases: counts add, peaks take the max, means weigh."""
    if len(parts) == 1:
        return parts[0]
    n = sum(p.samples for p in parts)

    def weighted(key: str) -> float | None:
        known = [(getattr(p, key), p.samples) for p in parts if getattr(p, key) is not None]
        weight = sum(w for _, w in known)
        return sum(v * w for v, w in known) / weight if weight else None

    rates = [p.prefix_cache_hit_rate for p in parts if p.prefix_cache_hit_rate is not None]
    return ProbeSummary(
        samples=n,
        preemptions=sum(p.preemptions for p in parts),
        kv_cache_usage_max=max(p.kv_cache_usage_max for p in parts),
        kv_cache_usage_mean=weighted("kv_cache_usage_mean") or 0.0,
        requests_waiting_max=max(p.requests_waiting_max for p in parts),
        requests_waiting_mean=weighted("requests_waiting_mean") or 0.0,
        requests_running_max=max(p.requests_running_max for p in parts),
        prefix_cache_hit_rate=sum(rates) / len(rates) if rates else None,
        gpu_memory_used_mib_max=_peak(p.gpu_memory_used_mib_max for p in parts),
        gpu_memory_engine_mib_max=_peak(p.gpu_memory_engine_mib_max for p in parts),
        rss_mib_max=_peak(p.rss_mib_max for p in parts),
        gpu_util_mean=weighted("gpu_util_mean"),
        api_server_cpu=weighted("api_server_cpu"),
        api_servers=max(p.api_servers for p in parts),
        engine_core_cpu=weighted("engine_core_cpu"),
        worker_cpu=weighted("worker_cpu"),
        client_cpu=weighted("client_cpu"),
        cores_busy=weighted("cores_busy"),
        cores=max(p.cores for p in parts),
    )


def _peak(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _rss_mib(pids: list[int]) -> float | None:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20 if pids else None
