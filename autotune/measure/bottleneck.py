"""What limited the engine in a load step: the client, KV memory, the front end, the
engine core, the GPU, a model worker, the host's CPU, or nothing that saturated (the SLO
itself binds first).

Tuning flags that do not touch the limit cannot move capacity. Each step's window figures
(`probesummary.ProbeSummary` and the client's event-loop lag) are read in this order, first match
wins:

1. the client: its process near a full core or its event loop waking late, so its
   timestamps are its own delays (the measurement is then invalid, and says so);
2. the KV cache: preemptions, or a full cache with requests waiting;
3. the front end: the hottest API-server process near a full core;
4. the engine core: its process near a full core (the scheduler on a GPU; the model
   itself on the CPU build, where the engine core computes);
5. the GPU: busy nearly all the time;
6. a model worker process near a full core (on the CPU build the model computes there;
   on a GPU, a worker that cannot launch kernels fast enough);
7. the host's CPU: the cores the engine and the client may run on nearly all busy, though
   no one process is near a core (on one core the client, API server, engine core and
   worker of the CPU build read 17, 33, 11 and 34 %: together the whole core);
8. none of these: no resource saturated before the SLO broke.

A threshold alone misleads where a resource is busy at every load (docs/concepts.md, "The
bottleneck"), so a search's limit is named by contrast (`across`): what rose into near
saturation between the highest passing step and the lowest failing one (by at least `RISE`
points, even from a busy reading), a resource pegged on both sides being no evidence; the
failing step's threshold reading stands only where nothing rose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.measure.probesummary import ClientLag, ProbeSummary
from autotune.stored import Stored

CLIENT, KV_CACHE, FRONT_END, ENGINE_CORE, GPU, WORKER, HOST_CPU, NONE = (
    "client", "kv_cache", "front_end", "engine_core", "gpu", "worker", "host_cpu", "none")

BUSY_CORE = 90.0  # percent of one core (of a set of cores: of all of them)
BUSY_GPU = 90.0  # percent of time a kernel ran
CLIENT_LAG_MS = 20.0  # p99 event-loop wake-up lag


@dataclass(frozen=True)
class Bottleneck(Stored):
    """The limit's kind, a sentence with the figures, and whether the step's latencies
    can be trusted (not when the client was the limit); stored as those three keys."""

    kind: str = ""
    text: str = ""
    valid: bool = True


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} %"


# Across a knee: a resource is a suspect when it reached this share of its busy level at the
# failing step and rose by at least RISE points from the passing one.
NEAR = 0.8
RISE = 5.0
# The resources compared across a knee: kind, probe figure, busy level, how it is named.
_RESOURCES = ((FRONT_END, "api_server_cpu", BUSY_CORE, "API server"),
              (ENGINE_CORE, "engine_core_cpu", BUSY_CORE, "engine core"),
              (GPU, "gpu_util_mean", BUSY_GPU, "GPU busy"),
              (WORKER, "worker_cpu", BUSY_CORE, "model worker"),
              (HOST_CPU, "cores_busy", BUSY_CORE, "host CPU"))


def across(passing: Sequence[Mapping[str, Any]], failing: Mapping[str, Any]
           ) -> Bottleneck | None:
    """The limit by contrast between the steps that passed at capacity (`passing`: their
    probe figures, averaged) and the gentlest failing step above it: the resource that rose
    most into near saturation, with the evidence in words; None where nothing rose (a
    client or a full KV cache at the failing step is named as `attribute` names it)."""
    first = attribute(failing, failing)  # a step's probes carry its client's lag too
    if first.kind in (CLIENT, KV_CACHE):
        return first
    rising: list[tuple[float, str, str, float, float]] = []
    flat: list[str] = []
    for kind, key, busy, name in _RESOURCES:
        seen = [float(p[key]) for p in passing if p.get(key) is not None]
        after = failing.get(key)
        if not seen or after is None:
            continue
        before = sum(seen) / len(seen)
        if after >= NEAR * busy and after - before >= RISE:
            rising.append((after - before, kind, name, before, after))
        elif min(before, after) >= busy:
            flat.append(f"{name} {min(before, after):.0f}-{max(before, after):.0f} % on "
                        "both sides, not what broke")
    if not rising:
        return None
    _, kind, name, before, after = max(rising)
    evidence = "; ".join([f"across the knee {name} {before:.0f} -> {after:.0f} %", *flat])
    return Bottleneck(kind, f"{words(kind, failing)} ({evidence})")


# Across a study: a resource at or above its busy level at this share of the sustained steps
# of its trials, passing or failing, reads the same at an easy load as at a knee. On the H200
# (h200-guided-check) the engine core read >= 90 % at 33 of 35 sustained steps of 7 trials.
EVERYWHERE = 0.85
# ... counted only over at least this many steps of at least two trials.
EVERYWHERE_STEPS = 6


def pegged_everywhere(steps: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, str]:
    """The resources pegged at (nearly) every sustained step of a study's trials (`steps`:
    the probe figures of each trial's sustained steps), each with the evidence in words:
    the contrast across trials that a single knee cannot give. Empty with fewer than two
    trials or `EVERYWHERE_STEPS` steps."""
    flat = [p for trial in steps for p in trial]
    if sum(1 for trial in steps if trial) < 2 or len(flat) < EVERYWHERE_STEPS:
        return {}
    out = {}
    for kind, key, busy, name in _RESOURCES:
        seen = [float(p[key]) for p in flat if p.get(key) is not None]
        high = sum(1 for v in seen if v >= busy)
        if len(seen) >= EVERYWHERE_STEPS and high >= EVERYWHERE * len(seen):
            out[kind] = (f"{name} >= {busy:.0f} % at {high} of the study's {len(seen)} "
                         "sustained steps, passing or failing: not what broke")
    return out


def suspects(passing: Sequence[Mapping[str, Any]], failing: Mapping[str, Any]) -> list[str]:
    """Every resource with evidence against it at a knee, best supported first: those that
    rose into near saturation (by how much they rose), then those saturated at the failing
    step though pegged on both sides. Relief tries the next one when a move ties."""
    rising: list[tuple[float, str]] = []
    pegged: list[str] = []
    for kind, key, busy, _ in _RESOURCES:
        seen = [float(p[key]) for p in passing if p.get(key) is not None]
        after = failing.get(key)
        if after is None:
            continue
        before = sum(seen) / len(seen) if seen else None
        if before is not None and after >= NEAR * busy and after - before >= RISE:
            rising.append((after - before, kind))
        elif after >= busy:
            pegged.append(kind)
    return [k for _, k in sorted(rising, reverse=True)] + pegged


def words(kind: str, probes: Mapping[str, Any]) -> str:
    """How `attribute` names a limit of this kind from a step's figures."""
    gpu = probes.get("gpu_util_mean")
    if kind == FRONT_END:
        n = probes.get("api_servers") or 1
        return (f"front end: API server {_pct(probes.get('api_server_cpu'))} of one core "
                f"({n} API server{'s' if n != 1 else ''})")
    if kind == ENGINE_CORE:
        return (f"engine core: {_pct(probes.get('engine_core_cpu'))} of a core "
                f"(GPU busy {_pct(gpu)})")
    if kind == GPU:
        return f"GPU busy {_pct(gpu)}"
    if kind == HOST_CPU:
        n = int(probes.get("cores") or 0)
        return (f"host CPU: the {n} core{'s' if n != 1 else ''} the engine and the client may "
                f"use {_pct(probes.get('cores_busy'))} busy, shared: {_processes(probes)}")
    where = "no GPU: the model runs on the CPU" if gpu is None else f"GPU busy {_pct(gpu)}"
    return f"model worker: {_pct(probes.get('worker_cpu'))} of a core ({where})"


def attribute(seen: ProbeSummary | Mapping[str, Any],
              lag: ClientLag | Mapping[str, float] | None = None) -> Bottleneck:
    """The bottleneck of one step from its window's probe figures (a measurement's
    `ProbeSummary`, or the figures a capacity step stored) and client lag. The resources
    are a table of figure names (`_RESOURCES`), read the same way from either."""
    probes = seen.as_dict() if isinstance(seen, ProbeSummary) else seen
    lag_p99 = lag.lag_p99_ms if isinstance(lag, ClientLag) else (lag or {}).get("lag_p99_ms")
    client = probes.get("client_cpu")
    if (client or 0) >= BUSY_CORE or (lag_p99 or 0) >= CLIENT_LAG_MS:
        # A busy process is saturated; a lagging loop in an idle process was starved of
        # CPU by others on the machine (on 2 shared cores, the engine): say which.
        why = (f"client saturated: its process {_pct(client)} of a core"
               if (client or 0) >= BUSY_CORE else
               f"client starved: its event loop woke {lag_p99 or 0:.0f} ms late (p99) with "
               f"its process at {_pct(client)} of a core, the machine's cores busy elsewhere")
        return Bottleneck(CLIENT, f"{why}; latencies are the client's, the step is not a "
                          "valid measurement", valid=False)
    preempted = probes.get("preemptions") or 0
    kv_max = probes.get("kv_cache_usage_max") or 0
    if preempted > 0 or (kv_max >= 0.98 and (probes.get("requests_waiting_max") or 0) > 0):
        return Bottleneck(KV_CACHE, f"KV cache full: usage max {kv_max:.0%}, "
                          f"{preempted:g} preemptions")
    for kind, key, busy, _ in _RESOURCES:
        if (probes.get(key) or 0) >= busy:
            return Bottleneck(kind, words(kind, probes))
    host = "" if probes.get("cores_busy") is None else \
        f", host cores {_pct(probes.get('cores_busy'))}"
    return Bottleneck(NONE, f"no resource saturated (GPU busy {_pct(probes.get('gpu_util_mean'))}"
                      f", {_processes(probes)}{host}, KV max {kv_max:.0%}): the SLO binds "
                      "first")


def _processes(probes: Mapping[str, Any]) -> str:
    """`API server 33 %, engine core 11 %, model worker 34 %, client 17 %` (each of a
    core; the worker and the client where read)."""
    named = [("API server", "api_server_cpu", True), ("engine core", "engine_core_cpu", True),
             ("model worker", "worker_cpu", False), ("client", "client_cpu", False)]
    return ", ".join(f"{name} {_pct(probes.get(key))}" for name, key, always in named
                     if always or probes.get(key) is not None)
