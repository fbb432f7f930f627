"""Scores and constraints of a measured trial.

Weighted mode gives one number, 0 for the baseline:

    score = sum_i w_i * ln(r_i) / sum_i w_i

with r = throughput / baseline throughput, baseline latency / latency and
baseline memory / memory, so every ratio is "higher is better". A weight is
the relative importance of its ratio, and exp(score) is the weighted geometric
mean of the gains: score 0.10 reads as "about 10.5 % better overall".
Pareto mode returns the raw (throughput up, latency down, memory down).
SLOs become Optuna constraints (value - limit <= 0 is feasible).
What a trial is scored on (`Measures`) is stored with it and defined beside its record
(`autotune.tuning.records.measures`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from autotune import _slo as slo
from autotune.config import Objective, WeightKey, latency_key
from autotune.measure.measurement import Measurement
from autotune.tuning.records.measures import Measures


def memory_mib(summary: Measurement) -> float | None:
    """The engine's memory: its GPU processes, else the device, else its resident set (CPU)."""
    p = summary.probes
    if p is None:
        return None
    for found in (p.gpu_memory_engine_mib_max, p.gpu_memory_used_mib_max, p.rss_mib_max):
        if found:  # older records may store null
            return float(found)
    return None


def measures(summary: Measurement, objective: Objective) -> Measures:
    """Throughput, latency and memory; in capacity mode the throughput at capacity (the
    latency is read at that rate, since `summary` is the step at capacity)."""
    source = summary.capacity or summary  # both name the throughputs alike
    return Measures(float(getattr(source, objective.throughput)),
                    float(summary.latencies[latency_key(objective.latency)]),
                    memory_mib(summary))


def directions(objective: Objective) -> list[Literal["maximize", "minimize"]]:
    if objective.mode == "weighted":
        return ["maximize"]
    return ["maximize", "minimize", "minimize"]


def _log_ratio(better: float | None, worse: float | None) -> float | None:
    if better is None or worse is None or better <= 0 or worse <= 0:
        return None
    return math.log(better / worse)


def weighted_score(m: Measures, base: Measures, weights: Mapping[WeightKey, float]) -> float:
    """Weighted mean of log-ratios against the baseline; terms without data are left out."""
    terms = {
        "throughput": _log_ratio(m.throughput, base.throughput),
        "latency": _log_ratio(base.latency_ms, m.latency_ms),
        "memory": _log_ratio(base.memory_mib, m.memory_mib),
    }
    used = {k: w for k, w in weights.items() if w > 0 and terms.get(k) is not None}
    if not used:
        return 0.0
    return sum(w * (terms[k] or 0.0) for k, w in used.items()) / sum(used.values())


def values(m: Measures, base: Measures | None, objective: Objective) -> list[float]:
    """The values to tell Optuna."""
    if objective.mode == "weighted":
        return [weighted_score(m, base or m, objective.weights)]
    return [m.throughput, m.latency_ms, m.memory_mib if m.memory_mib is not None else 0.0]


def constraints(summary: Measurement, objective: Objective) -> dict[str, float]:
    """Optuna's named constraints (<= 0 is met): `slo:<key>` per SLO in ms over the limit,
    and `failed_requests`, which any failed request breaks."""
    out = {}
    for key, limit in objective.slos.items():
        value = summary.value(slo.summary_key(key))
        out[f"slo:{key}"] = 1e9 if value is None else float(value) - limit
    # Always present, so every trial has the same constraints (GPSampler requires it).
    out["failed_requests"] = float(summary.failed or 0)
    return out


def constraint_names(objective: Objective) -> list[str]:
    """The names `constraints` gives, for trials that measured nothing (all broken)."""
    return list(constraints(Measurement(), objective))


def gain(score: float) -> float:
    """A weighted score as a relative gain over the baseline (0.1 -> +10.5 %)."""
    return math.exp(score) - 1.0
