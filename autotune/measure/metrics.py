"""Summaries of benchmark request results, defined exactly as `vllm bench serve` defines them.

Same formulas and the same result-JSON key names as `vllm bench serve --save-result`
(`vllm/benchmarks/serve.py: calculate_metrics, benchmark`), so that a trial's numbers can be
compared one for one with vLLM's own benchmark. Pure functions: no I/O, numpy only.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from autotune._slo import LATENCY_METRICS
from autotune.measure._request import RequestResult
from autotune.measure.measurement import Measurement

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")
"""Goodput SLO names, in milliseconds; vLLM's `--goodput ttft:… tpot:… e2el:…`."""

DEFAULT_PERCENTILES = (50, 90, 95, 99)


def percentile_key(metric: str, p: float) -> str:
    """vLLM's result key for a percentile: `p99_ttft_ms`, `p99.9_ttft_ms` (its `p_word` rule)."""
    p_word = str(int(p)) if int(p) == p else str(p)
    return f"p{p_word}_{metric}_ms"


def _check_slo(key: str, value: Any) -> float:
    """The SLO value as a float; ValueError for an unknown key or a non-positive value."""
    if key not in SLO_KEYS:
        raise ValueError(f"unknown SLO {key!r}; allowed: {', '.join(SLO_KEYS)}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"SLO {key}: {value!r} is not a number (milliseconds)") from None
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"SLO {key}: {value!r} must be a positive number of milliseconds")
    return number


def goodput_slos(specs: Iterable[str]) -> dict[str, float]:
    """Parse `ttft_ms=500` (or vLLM's `ttft:500`) strings into `{"ttft_ms": 500.0, ...}`."""
    slos: dict[str, float] = {}
    for spec in specs:
        sep = "=" if "=" in spec else ":"
        name, found, value = spec.partition(sep)
        if not found:
            raise ValueError(
                f"bad SLO {spec!r}: expected KEY=MILLISECONDS (or KEY:MILLISECONDS) with KEY "
                f"one of {', '.join(SLO_KEYS)}"
            )
        name = name.strip()
        key = name if name.endswith("_ms") else f"{name}_ms"
        if key not in SLO_KEYS:
            raise ValueError(f"unknown SLO {name!r} in {spec!r}; allowed: {', '.join(SLO_KEYS)}")
        if key in slos:
            raise ValueError(f"SLO {key} given twice (in {spec!r})")
        slos[key] = _check_slo(key, value.strip())
    return slos


def _stats(metric: str, values: list[float], percentiles: Sequence[float]) -> dict[str, float]:
    """Mean, median, population std and percentiles in ms; an empty list gives 0.0 (vLLM's
    `values or 0`), without numpy warnings."""
    data: Any = values or 0
    out = {
        f"mean_{metric}_ms": float(np.mean(data) * 1000),
        f"median_{metric}_ms": float(np.median(data) * 1000),
        f"std_{metric}_ms": float(np.std(data) * 1000),
    }
    for p in percentiles:
        out[percentile_key(metric, p)] = float(np.percentile(data, p) * 1000)
    return out


def _peaks(ok: Sequence[RequestResult]) -> tuple[float, int]:
    """vLLM's `max_output_tokens_per_s` and `max_concurrent_requests`: one-second buckets from
    the first send; "tokens" are content events (first event plus one per ITL gap)."""
    if not ok:
        return 0.0, 0
    t0 = min(r.start_time for r in ok)
    t_end = max(r.start_time + r.latency for r in ok)
    n = int(np.ceil(t_end - t0)) + 1
    tokens = np.zeros(n)
    running = np.zeros(n)
    for r in ok:
        t = r.start_time + r.ttft
        times = [t]
        for gap in r.itl:
            t += gap
            times.append(t)
        for t in times:
            bucket = int(t - t0)
            if 0 <= bucket < n:
                tokens[bucket] += 1
        for second in range(int(r.start_time - t0), int((r.start_time + r.latency) - t0) + 1):
            running[second] += 1
    return float(np.max(tokens)), int(np.max(running))


def summarize(
    results: Sequence[RequestResult],
    duration_s: float,
    slos: Mapping[str, float] | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> Measurement:
    """The flat summary `vllm bench serve --save-result` writes, plus autotune's extras.

    Only successful requests enter the latency statistics and the token totals. As in vLLM
    without a tokenizer, a successful request reporting 0 output tokens counts as 1; TPOT
    statistics leave out 1-token outputs, while goodput treats their TPOT as 0. A request is
    good when every given SLO satisfies `slo_ms / 1000 >= value_s` (boundary inclusive).
    `request_goodput` (and `good_completed`) is None when no SLO is given, as in vLLM.
    Extras: `error_counts` (failed requests' error text -> count; vLLM's `errors` is a per-request
    list), `success_rate` (completed / all; 0.0 for no requests), `slos`, `good_completed`.
    """
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s must be a positive number of seconds, got {duration_s!r}")
    slo = {key: _check_slo(key, value) for key, value in (slos or {}).items()}
    ok = [r for r in results if r.success]
    failed = [r for r in results if not r.success]
    out_lens = [r.output_tokens or 1 for r in ok]
    ttfts = [r.ttft for r in ok]
    e2els = [r.latency for r in ok]
    itls = [gap for r in ok for gap in r.itl]
    # vLLM: TPOT is 0 for outputs of <= 1 token; such requests enter goodput, not TPOT stats.
    all_tpots = [
        (r.latency - r.ttft) / (n - 1) if n > 1 else 0.0 for r, n in zip(ok, out_lens, strict=True)
    ]
    tpots = [t for t, n in zip(all_tpots, out_lens, strict=True) if n > 1]
    good: int | None = None
    if slo:
        columns = {"ttft_ms": ttfts, "tpot_ms": all_tpots, "e2el_ms": e2els}
        limits = [slo[k] / 1000 for k in SLO_KEYS if k in slo]
        rows = zip(*(columns[k] for k in SLO_KEYS if k in slo), strict=True)
        good = sum(all(lim >= v for lim, v in zip(limits, row, strict=True)) for row in rows)
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(out_lens)
    peak_tokens, peak_running = _peaks(ok)
    summary: dict[str, object] = {
        "duration": duration_s,
        "completed": len(ok),
        "failed": len(failed),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration_s,
        "request_goodput": None if good is None else good / duration_s,
        "output_throughput": total_out / duration_s,
        "total_token_throughput": (total_in + total_out) / duration_s,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_running,
    }
    for metric, values in zip(LATENCY_METRICS, (ttfts, tpots, itls, e2els), strict=True):
        summary.update(_stats(metric, values, percentiles))
    summary.update(
        error_counts=dict(Counter(r.error for r in failed)),
        success_rate=len(ok) / len(results) if results else 0.0,
        slos=slo,
        good_completed=good,
    )
    return Measurement.of(summary)
