"""What the engine, the client and the machine did while a load ran, as stored records: the
probes' figures (`ProbeSummary`) and the client's event-loop lag (`ClientLag`).

A module of its own so that reading a stored measurement (`measurement.Measurement.probes`,
the read commands, the bottleneck table) does not import the sampler's psutil and
Prometheus parser, which only a running load needs (`probes.Sampler`).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.stored import Stored


@dataclass(frozen=True)
class ProbeSummary(Stored):
    """What the engine, the client and the machine did while a load ran: a measurement's
    `probes`, stored as its flat object (a stored one read back keeps its keys: a figure
    it lacks reads as the default here, as a missing key read as nothing).

    CPU figures are percent of one core, averaged over the samples: `api_server_cpu` is
    the hottest API-server process (a single event loop saturates at 100), the others
    the sum over the role's processes; `client_cpu` is the load generator's process.
    """

    samples: int = 0
    preemptions: float = 0.0
    kv_cache_usage_max: float = 0.0
    kv_cache_usage_mean: float = 0.0
    requests_waiting_max: float = 0.0
    requests_waiting_mean: float = 0.0
    requests_running_max: float = 0.0
    prefix_cache_hit_rate: float | None = None
    gpu_memory_used_mib_max: float | None = None  # the whole device
    gpu_memory_engine_mib_max: float | None = None  # the engine's processes
    rss_mib_max: float | None = None  # the engine's process tree (CPU engine)
    gpu_util_mean: float | None = None
    api_server_cpu: float | None = None
    api_servers: int = 0
    engine_core_cpu: float | None = None
    worker_cpu: float | None = None  # the hottest model worker (the model runs there on CPU)
    client_cpu: float | None = None
    # How busy (percent, any process) the cores were that the engine's processes and the
    # client may run on (their CPU affinity), and how many: on a small host or a CPU
    # engine they share few cores, which can be full with no one process near a core.
    cores_busy: float | None = None
    cores: int = 0

    def __bool__(self) -> bool:
        """False for a stored `{}` (nothing was probed); a summary made here is true."""
        return self.read is None or bool(self.read)


@dataclass(frozen=True)
class ClientLag(Stored):
    """How late the load generator's event loop woke over a run (ms, p50/p99/max): a loop
    starved of CPU sends late and reads late, so its latencies are the client's, not the
    engine's (`bottleneck.attribute`). A measurement's `client`; stored `{}` (and made
    with no field) when nothing was measured."""

    lag_p50_ms: float | None = None
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    SPARSE = True

    def __bool__(self) -> bool:
        return self.lag_p99_ms is not None
