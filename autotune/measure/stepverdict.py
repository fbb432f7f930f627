"""A capacity step's verdict: the SLOs on its steady window, the engine keeping pace with
what was offered there, and what limited it (pure: the step's requests and probe series
are in; nothing is sent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune import slo
from autotune.measure import bottleneck, metrics, steady
from autotune.measure.bench import StepRun
from autotune.measure.searchplan import Step
from autotune.stored import json_data
from autotune.traces import Replay
from autotune.traffic import CapacitySpec

# The probe figures a step keeps: what the bottleneck attribution read.
LOAD_FIGURES = ("api_server_cpu", "api_servers", "engine_core_cpu", "worker_cpu",
                "client_cpu", "gpu_util_mean", "kv_cache_usage_max", "requests_waiting_mean",
                "requests_running_max", "preemptions", "samples")


def judge(kind: str, rate: float | None, index: int, sent: StepRun, cap: CapacitySpec,
          slos: Mapping[str, float]) -> Step:
    """Step `index` of the search (`kind`, offered at `rate`) as `sent` went: the SLOs on
    its steady window, and the engine keeping pace there with what was offered (no
    backlog growing through it: `steady.Backlog`).

    The burst (everything at once) has no steady state and is judged whole.
    """
    whole, run, sampler = sent.whole, sent.run, sent.sampler
    if rate is None or run.send_s <= 0:
        summary, win, grew = whole, None, None
    else:
        win = steady.window(run.t0, run.send_s, cap.ramp_fraction, cap.tail_fraction)
        inside = steady.arrived_in(run.results, win)
        summary = metrics.summarize(inside, win.seconds) if inside else dict(whole)
        summary.update(probes=json_data(sampler.summary(win.start, win.end)),
                       client=run.lag, truncated=whole.get("truncated"),
                       workload=whole.get("workload"), whole={
                           k: whole.get(k) for k in ("completed", "failed", "duration",
                                                     "request_throughput",
                                                     "output_throughput")})
        if "replayed" in whole:
            summary["replayed"] = whole["replayed"]
        grew = steady.backlog(run.results, win,
                              running=sampler.series("vllm:num_requests_running"))
    broken = violations(summary, slos, cap.min_success_rate)
    if grew is not None and grew.grows(cap.backlog_limit):
        # One rule, said both ways: the queue grew by more than the limit's share of the
        # arrivals, so the engine achieved more than that share less than was offered.
        broken.append(f"backlog +{grew.growth:.0f} requests ({grew.share:.0%} of arrivals): "
                      f"achieved {grew.achieved_rps:.3g} of {grew.offered_rps:.3g} req/s "
                      "offered")
    replay = whole.get("replayed")
    figures = slo_figures(summary, slos)
    figures["preemptions"] = (summary.get("probes") or {}).get("preemptions", 0)
    seen = summary.get("probes") or {}
    limit = bottleneck.attribute(seen, run.lag)
    read = {k: round(v, 2) if isinstance(v, float) else v for k, v in seen.items()
            if k in LOAD_FIGURES}
    return Step(index, kind, rate, not broken, whole.get("request_throughput", 0.0),
                whole.get("output_throughput", 0.0), broken,
                whole.get("completed", 0) + whole.get("failed", 0), figures,
                summary=summary, whole=slo_figures(whole, slos),
                window_s=round(win.seconds, 3) if win else None,
                backlog=json_data(grew) if grew else {}, bottleneck=json_data(limit),
                probes={**read, **{k: round(v, 2) for k, v in run.lag.items()}},
                latencies=latency_figures(summary),
                window_offered_rps=grew.offered_rps if grew else None,
                window_achieved_rps=grew.achieved_rps if grew else None,
                replayed=Replay.from_dict(replay) if isinstance(replay, Mapping) else None)


def violations(summary: Mapping[str, Any], slos: Mapping[str, float],
               min_success_rate: float) -> list[str]:
    """The SLOs a step broke, e.g. `ttft_p95_ms 812>500`; an empty list is a pass."""
    out = []
    total = summary.get("completed", 0) + summary.get("failed", 0)
    rate = summary.get("completed", 0) / total if total else 0.0
    if rate < min_success_rate:
        out.append(f"success_rate {rate:.3f}<{min_success_rate:g}")
    if summary.get("truncated"):
        out.append("truncated by max_duration_s")
    for goal in slo.of(slos):
        value = summary.get(goal.summary_key)
        if not goal.met(value):
            key, limit = goal.key, goal.limit_ms
            out.append(f"{key} {value if value is None else round(value, 1)}>{limit:g}")
    return out


def latency_figures(summary: Mapping[str, Any]) -> dict[str, float]:
    """Every latency statistic of a summary under its SLO key: {"ttft_p95_ms": 312.5}."""
    return slo_figures(summary, dict.fromkeys(slo.KEYS, 0.0))


def slo_figures(summary: Mapping[str, Any], slos: Mapping[str, float]) -> dict[str, float]:
    """The SLO metrics of a summary, rounded, e.g. {"ttft_p95_ms": 312.5}."""
    return slo.figures(summary, slos)
