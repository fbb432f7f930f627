"""A capacity step's verdict: the SLOs on its steady window, the engine keeping pace with
what was offered there, and what limited it (pure: the step's requests and probe series
are in; nothing is sent).
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune import _slo as slo
from autotune.measure import _steady as steady
from autotune.measure import bottleneck, metrics
from autotune.measure.bench import StepRun
from autotune.measure.measurement import Measurement, WholeRun
from autotune.measure.searchresult import Step
from autotune.traffic import CapacitySpec

# The probe figures a step keeps: what the bottleneck attribution read.
LOAD_FIGURES = ("api_server_cpu", "api_servers", "engine_core_cpu", "worker_cpu",
                "client_cpu", "cores_busy", "cores", "gpu_util_mean", "kv_cache_usage_max",
                "requests_waiting_mean", "requests_running_max", "preemptions", "samples")


def judge(kind: str, rate: float | None, index: int, sent: StepRun, cap: CapacitySpec,
          slos: Mapping[str, float]) -> Step:
    """Step `index` of the search (`kind`, offered at `rate`) as `sent` went: the SLOs on
    its steady window, and the engine keeping pace there with what was offered (achieved
    within `backlog_limit` of it: `steady.Backlog`), whatever the step's length. A window
    with too few arrivals to tell (`steady.needed`) makes the step invalid where nothing
    else broke: it neither passes nor fails, and the search measures it again longer.

    The burst (everything at once) has no steady state and is judged whole.
    """
    whole, run, sampler = sent.whole, sent.run, sent.sampler
    if rate is None or run.send_s <= 0:
        summary, win, grew = whole, None, None
    else:
        win = steady.window(run.t0, run.send_s, cap.ramp_fraction, cap.tail_fraction)
        inside = steady.arrived_in(run.results, win)
        summary = metrics.summarize(inside, win.seconds) if inside else whole
        summary = summary.replace(
            probes=sampler.summary(win.start, win.end), client=run.lag,
            truncated=whole.truncated, workload=whole.workload,
            whole=WholeRun.of(whole))
        if "replayed" in whole.keys:
            summary = summary.replace(replayed=whole.replayed)
        grew = steady.backlog(run.results, win,
                              running=sampler.series("vllm:num_requests_running"))
    broken = violations(summary, slos, cap.min_success_rate)
    short = None
    if grew is not None and not grew.decides(cap.backlog_limit):
        # Too few arrivals to tell one request left waiting from a backlog: on keeping pace
        # the step says nothing (no pass, and no fail unless something else broke).
        short = None if broken else (
            f"{grew.arrivals} arrivals in its window, fewer than the "
            f"{steady.needed(cap.backlog_limit)} that keeping pace within "
            f"{cap.backlog_limit:.0%} needs")
    elif grew is not None and grew.grows(cap.backlog_limit):
        # One rule, said both ways: the queue grew by more than the limit's share of the
        # arrivals, so the engine achieved more than that share less than was offered.
        broken.append(f"backlog +{grew.growth:.0f} requests ({grew.share:.0%} of arrivals): "
                      f"achieved {grew.achieved_rps:.3g} of {grew.offered_rps:.3g} req/s "
                      "offered")
    figures = slo_figures(summary, slos)
    seen = summary.probes
    figures["preemptions"] = (seen.preemptions if seen else 0) or 0
    limit = bottleneck.attribute(seen or {}, run.lag)
    read = {k: round(v, 2) if isinstance(v, float) else v
            for k, v in (seen.as_dict() if seen else {}).items() if k in LOAD_FIGURES}
    return Step(index, kind, rate, not broken and short is None, whole.request_throughput,
                whole.output_throughput, broken, whole.completed + whole.failed, figures,
                summary=summary, whole=slo_figures(whole, slos),
                window_s=round(win.seconds, 3) if win else None,
                backlog=grew, bottleneck=limit,
                probes={**read, **{k: round(v, 2) for k, v in run.lag.as_dict().items()}},
                latencies=latency_figures(summary),
                window_offered_rps=grew.offered_rps if grew else None,
                window_achieved_rps=grew.achieved_rps if grew else None,
                replayed=whole.replayed, invalid=short,
                total_token_throughput=whole.total_token_throughput)


def violations(summary: Measurement, slos: Mapping[str, float],
               min_success_rate: float) -> list[str]:
    """The SLOs a step broke, e.g. `ttft_p95_ms 812>500`; an empty list is a pass."""
    out = []
    total = summary.completed + summary.failed
    rate = summary.completed / total if total else 0.0
    if rate < min_success_rate:
        out.append(f"success_rate {rate:.3f}<{min_success_rate:g}")
    if summary.truncated:
        out.append("truncated by max_duration_s")
    for goal in slo.of(slos):
        value = summary.value(goal.summary_key)
        if not goal.met(value):
            key, limit = goal.key, goal.limit_ms
            out.append(f"{key} {value if value is None else round(value, 1)}>{limit:g}")
    return out


def latency_figures(summary: Measurement) -> dict[str, float]:
    """Every latency statistic of a summary under its SLO key: {"ttft_p95_ms": 312.5}."""
    return slo_figures(summary, dict.fromkeys(slo.KEYS, 0.0))


def slo_figures(summary: Measurement, slos: Mapping[str, float]) -> dict[str, float]:
    """The SLO metrics of a summary, rounded, e.g. {"ttft_p95_ms": 312.5}."""
    return slo.figures(summary.latencies, slos)
