"""What limited the engine in a load step: the client, KV memory, the front end, the
engine core, the GPU, or nothing that saturated (the SLO itself binds first).

Tuning flags that do not touch the limit cannot move capacity: on the H200 the chat
study searched memory and batching flags while one API-server process sat at 100 % of
a core and the GPU was 66-75 % busy. Each step's window figures (`probes.ProbeSummary`
and the client's event-loop lag) are read in this order, first match wins:

1. the client: its process near a full core or its event loop waking late, so its
   timestamps are its own delays (the measurement is then invalid, and says so);
2. the KV cache: preemptions, or a full cache with requests waiting;
3. the front end: the hottest API-server process near a full core;
4. the engine core: its process near a full core (the scheduler on a GPU; the model
   itself on the CPU build, where the engine core computes);
5. the GPU: busy nearly all the time;
6. a model worker process near a full core (on the CPU build the model computes there;
   on a GPU, a worker that cannot launch kernels fast enough);
7. none of these: no resource saturated before the SLO broke.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

CLIENT, KV_CACHE, FRONT_END, ENGINE_CORE, GPU, WORKER, NONE = (
    "client", "kv_cache", "front_end", "engine_core", "gpu", "worker", "none")

BUSY_CORE = 90.0  # percent of one core
BUSY_GPU = 90.0  # percent of time a kernel ran
CLIENT_LAG_MS = 20.0  # p99 event-loop wake-up lag


@dataclass(frozen=True)
class Bottleneck:
    """The limit's kind, a sentence with the figures, and whether the step's latencies
    can be trusted (not when the client was the limit)."""

    kind: str
    text: str
    valid: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} %"


def attribute(probes: Mapping[str, Any], lag: Mapping[str, float] | None = None
              ) -> Bottleneck:
    """The bottleneck of one step from its window's probe figures and client lag."""
    lag = lag or {}
    client, lag_p99 = probes.get("client_cpu"), lag.get("lag_p99_ms")
    if (client or 0) >= BUSY_CORE or (lag_p99 or 0) >= CLIENT_LAG_MS:
        return Bottleneck(CLIENT, f"client saturated: its process {_pct(client)} of a core, "
                          f"event loop p99 lag {lag_p99 or 0:.0f} ms; latencies are the "
                          "client's, the step is not a valid measurement", valid=False)
    preempted = probes.get("preemptions") or 0
    kv_max = probes.get("kv_cache_usage_max") or 0
    if preempted > 0 or (kv_max >= 0.98 and (probes.get("requests_waiting_max") or 0) > 0):
        return Bottleneck(KV_CACHE, f"KV cache full: usage max {kv_max:.0%}, "
                          f"{preempted:g} preemptions")
    api = probes.get("api_server_cpu")
    if (api or 0) >= BUSY_CORE:
        n = probes.get("api_servers") or 1
        return Bottleneck(FRONT_END, f"front end: API server {_pct(api)} of one core "
                          f"({n} API server{'s' if n != 1 else ''})")
    core = probes.get("engine_core_cpu")
    if (core or 0) >= BUSY_CORE:
        return Bottleneck(ENGINE_CORE, f"engine core: {_pct(core)} of a core "
                          f"(GPU busy {_pct(probes.get('gpu_util_mean'))})")
    gpu = probes.get("gpu_util_mean")
    if (gpu or 0) >= BUSY_GPU:
        return Bottleneck(GPU, f"GPU busy {_pct(gpu)}")
    worker = probes.get("worker_cpu")
    if (worker or 0) >= BUSY_CORE:
        where = "no GPU: the model runs on the CPU" if gpu is None else \
            f"GPU busy {_pct(gpu)}"
        return Bottleneck(WORKER, f"model worker: {_pct(worker)} of a core ({where})")
    return Bottleneck(NONE, "no resource saturated (GPU busy "
                      f"{_pct(gpu)}, API server {_pct(api)}, engine core {_pct(core)}, "
                      f"KV max {kv_max:.0%}): the SLO binds first")
