"""Watch the engine while a load runs: `/metrics`, GPU memory, resident memory.

The parsing functions are pure; `Sampler` polls in the background of a run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp
import psutil
from prometheus_client.parser import text_string_to_metric_families

from . import gpu


def scrape(text: str) -> dict[str, float]:
    """`vllm:` samples summed over label sets (one engine, several model labels)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith("vllm:") or sample.name.endswith("_created"):
                continue
            if sample.name.endswith("_info"):
                continue
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    return values


def cache_config(text: str) -> dict[str, str]:
    """Labels of `vllm:cache_config_info`: block size, block count, KV dtype, capacity."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:cache_config_info":
                return dict(sample.labels)
    return {}


def as_int(value: str | None) -> int | None:
    """A label value as an int; vLLM writes "None" for unset ones."""
    try:
        return int(float(value)) if value not in (None, "None", "") else None
    except ValueError:
        return None


@dataclass
class ProbeSummary:
    """What the engine and the machine did while a load ran."""

    samples: int = 0
    preemptions: float = 0.0
    kv_cache_usage_max: float = 0.0
    kv_cache_usage_mean: float = 0.0
    requests_waiting_max: float = 0.0
    requests_running_max: float = 0.0
    prefix_cache_hit_rate: float | None = None
    gpu_memory_used_mib_max: float | None = None  # the whole device
    gpu_memory_engine_mib_max: float | None = None  # the engine's processes
    rss_mib_max: float | None = None  # the engine's process tree (CPU engine)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Sampler:
    """Samples `/metrics`, NVML and the engine's resident memory every `interval` s.

    One small GET per interval on its own connection, and NVML/psutil reads in
    this process: nothing that competes with the engine for measurable time.
    """

    def __init__(self, url: str, pids: Callable[[], list[int]] | None = None,
                 interval: float = 1.0):
        self.url = url.rstrip("/") + "/metrics"
        self.pids = pids or (lambda: [])
        self.interval = interval
        self.first: dict[str, float] | None = None
        self.last: dict[str, float] = {}
        self.kv: list[float] = []
        self.waiting_max = self.running_max = 0.0
        self.gpu = gpu.Monitor()
        self.gpu_used_max: float | None = None
        self.gpu_engine_max: float | None = None
        self.rss_max: float | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Sampler:
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        await self.sample()
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.sample()
        await self._http.close()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.sample()

    async def sample(self) -> None:
        try:
            async with self._http.get(self.url) as resp:
                values = scrape(await resp.text()) if resp.status == 200 else None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError):
            values = None
        if values:
            self.first = self.first or values
            self.last = values
            self.kv.append(values.get("vllm:kv_cache_usage_perc", 0.0))
            self.waiting_max = max(self.waiting_max, values.get("vllm:num_requests_waiting", 0))
            self.running_max = max(self.running_max, values.get("vllm:num_requests_running", 0))
        pids = self.pids()
        used, engine = self.gpu.memory_mib(pids)
        self.gpu_used_max = _max(self.gpu_used_max, used)
        self.gpu_engine_max = _max(self.gpu_engine_max, engine)
        self.rss_max = _max(self.rss_max, _rss_mib(pids))

    def summary(self) -> ProbeSummary:
        first, last = self.first or {}, self.last

        def delta(name: str) -> float:
            return last.get(name, 0.0) - first.get(name, 0.0)

        queries = delta("vllm:prefix_cache_queries_total")
        return ProbeSummary(
            samples=len(self.kv),
            preemptions=delta("vllm:num_preemptions_total"),
            kv_cache_usage_max=max(self.kv, default=0.0),
            kv_cache_usage_mean=sum(self.kv) / len(self.kv) if self.kv else 0.0,
            requests_waiting_max=self.waiting_max,
            requests_running_max=self.running_max,
            prefix_cache_hit_rate=delta("vllm:prefix_cache_hits_total") / queries
            if queries > 0 else None,
            gpu_memory_used_mib_max=self.gpu_used_max,
            gpu_memory_engine_mib_max=self.gpu_engine_max,
            rss_mib_max=self.rss_max,
        )


def merge(parts: list[ProbeSummary]) -> ProbeSummary:
    """One summary for consecutive phases: counts add, peaks take the max."""
    if len(parts) == 1:
        return parts[0]
    n = sum(p.samples for p in parts)
    rates = [p.prefix_cache_hit_rate for p in parts if p.prefix_cache_hit_rate is not None]
    peaks = {}
    for key in ("gpu_memory_used_mib_max", "gpu_memory_engine_mib_max", "rss_mib_max"):
        values = [getattr(p, key) for p in parts if getattr(p, key) is not None]
        peaks[key] = max(values) if values else None
    return ProbeSummary(
        samples=n,
        preemptions=sum(p.preemptions for p in parts),
        kv_cache_usage_max=max(p.kv_cache_usage_max for p in parts),
        kv_cache_usage_mean=sum(p.kv_cache_usage_mean * p.samples for p in parts) / n if n
        else 0.0,
        requests_waiting_max=max(p.requests_waiting_max for p in parts),
        requests_running_max=max(p.requests_running_max for p in parts),
        prefix_cache_hit_rate=sum(rates) / len(rates) if rates else None,
        **peaks,
    )


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _rss_mib(pids: list[int]) -> float | None:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20 if pids else None
