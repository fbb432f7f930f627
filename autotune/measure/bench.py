"""One benchmark of one running server: send a workload, watch the engine, summarise.

The result is a flat dict with `vllm bench serve --save-result`'s keys plus
autotune's extras (`probes`, `workload`, `truncated`; for a trace `replayed`, which
part of it was sent: `autotune.traces.Replay`), so it can be saved, stored on a trial,
or compared with vLLM's own file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotune.measure import bottleneck, loadgen, metrics, probes, watch, workloads
from autotune.measure.workloads import Session, Tokenizer, build_sessions
from autotune.stored import plain
from autotune.traffic import WorkloadSpec


def prepare(spec: WorkloadSpec, tokenizer_model: str, *, offset: int = 0,
            tokenizer: Tokenizer | None = None) -> tuple[list[Session], list[Session]]:
    """(measured, warm-up) sessions; warm-up prompts differ from the measured ones, and
    are all due at once (a trace's too)."""
    if tokenizer is None and spec.kind in ("random", "chat", "trace"):
        tokenizer = Tokenizer.of(tokenizer_model)
    measured = build_sessions(spec, tokenizer_model, offset=offset, tokenizer=tokenizer)
    warm = spec.model_copy(update={"time_scale": float("inf")})
    warmup = build_sessions(warm, tokenizer_model, count=spec.warmup_requests,
                            offset=offset + 1_000_003, tokenizer=tokenizer) \
        if spec.warmup_requests else []
    return measured, warmup


async def _phase(target: loadgen.Target, spec: WorkloadSpec, sessions: list[Session],
                 pids: Callable[[], list[int]] | None, probe_interval: float
                 ) -> tuple[loadgen.RunResult, probes.Sampler]:
    async with probes.Sampler(target.url, pids, probe_interval) as sampler:
        run = await loadgen.send_workload(target, spec, sessions)
    return run, sampler


def _summary(runs: list[tuple[loadgen.RunResult, probes.Sampler]], spec: WorkloadSpec,
             slos: Mapping[str, float] | None) -> dict[str, Any]:
    results = [r for run, _ in runs for r in run.results]
    summary = metrics.summarize(results, sum(run.duration_s for run, _ in runs), slos)
    lags = [run.lag for run, _ in runs if run.lag]
    seen = plain(probes.merge([s.summary() for _, s in runs]))
    client = max(lags, key=lambda lag: lag["lag_p99_ms"]) if lags else {}
    # What limited the engine over the whole run (a capacity step judges its own window).
    summary.update(probes=seen, client=client,
                   bottleneck=plain(bottleneck.attribute(seen, client)),
                   truncated=any(run.truncated for run, _ in runs),
                   workload=spec.model_dump(mode="json"))
    if (replay := workloads.replayed(spec)) is not None:
        summary["replayed"] = plain(replay)  # which part of the trace this run measured
    return summary


def benchmark(target: loadgen.Target, spec: WorkloadSpec, *, tokenizer_model: str,
              slos: Mapping[str, float] | None = None,
              pids: Callable[[], list[int]] | None = None, offset: int = 0,
              probe_interval: float = 1.0, probe_sessions: int = 0,
              on_probe: Callable[[dict[str, Any]], str | None] | None = None,
              tokenizer: Tokenizer | None = None,
              alive: watch.Alive | None = None) -> dict[str, Any]:
    """Run `spec` against `target` and return the summary with probes.

    With `probe_sessions`, the first sessions are a probe phase: `on_probe` sees its
    summary and may return a reason to stop there (the summary then carries
    `stopped_after_probe`); otherwise the rest is sent and everything is summarised.
    `alive` watches the engine throughout (`autotune.measure.watch`): `Halted` once it
    names a reason.
    """
    measured, warmup = prepare(spec, tokenizer_model, offset=offset, tokenizer=tokenizer)

    async def go() -> dict[str, Any]:
        await _warm(target, spec, warmup)
        runs = []
        rest = measured
        if 0 < probe_sessions < len(measured) and on_probe is not None:
            runs.append(await _phase(target, spec, measured[:probe_sessions], pids,
                                     probe_interval))
            probe = _summary(runs, spec, slos)
            if reason := on_probe(probe):
                return {**probe, "stopped_after_probe": reason}
            rest = measured[probe_sessions:]
        runs.append(await _phase(target, spec, rest, pids, probe_interval))
        return _summary(runs, spec, slos)

    return watch.run(go(), alive)


def step(target: loadgen.Target, spec: WorkloadSpec, *, tokenizer_model: str,
         pids: Callable[[], list[int]] | None = None, offset: int = 0,
         probe_interval: float = 0.5, tokenizer: Tokenizer | None = None,
         alive: watch.Alive | None = None
         ) -> tuple[dict[str, Any], loadgen.RunResult, probes.Sampler]:
    """One load step: its whole-step summary, and the requests and probe series from
    which a steady-state window can be cut (`autotune.measure.steady`). `alive` watches
    the engine throughout, as in `benchmark`."""
    measured, warmup = prepare(spec, tokenizer_model, offset=offset, tokenizer=tokenizer)

    async def go() -> tuple[loadgen.RunResult, probes.Sampler]:
        await _warm(target, spec, warmup)
        return await _phase(target, spec, measured, pids, probe_interval)

    run, sampler = watch.run(go(), alive)
    return _summary([(run, sampler)], spec, None), run, sampler


async def _warm(target: loadgen.Target, spec: WorkloadSpec, warmup: list[Session]) -> None:
    if warmup:
        await loadgen.send_workload(
            target, spec.model_copy(update={"request_rate": float("inf")}), warmup)


_ROWS = [
    ("Successful requests", "completed", "{:d}"),
    ("Failed requests", "failed", "{:d}"),
    ("Benchmark duration (s)", "duration", "{:.2f}"),
    ("Total input tokens", "total_input_tokens", "{:d}"),
    ("Total generated tokens", "total_output_tokens", "{:d}"),
    ("Request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("Request goodput (req/s)", "request_goodput", "{:.2f}"),
    ("Output token throughput (tok/s)", "output_throughput", "{:.2f}"),
    ("Total token throughput (tok/s)", "total_token_throughput", "{:.2f}"),
]


def summary_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows in `vllm bench serve`'s order, for a terminal table."""
    rows = [(label, fmt.format(summary[key])) for label, key, fmt in _ROWS
            if summary.get(key) is not None]
    for metric, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        for stat in ("mean", "median", "p95", "p99"):
            key = f"{stat}_{metric}_ms"
            if key in summary:
                rows.append((f"{stat.capitalize()} {name} (ms)", f"{summary[key]:.2f}"))
    p = summary.get("probes") or {}
    rows += [("Preemptions", f"{p.get('preemptions', 0):g}"),
             ("KV cache usage max / mean", f"{p.get('kv_cache_usage_max', 0):.1%} / "
                                           f"{p.get('kv_cache_usage_mean', 0):.1%}"),
             ("Waiting requests max", f"{p.get('requests_waiting_max', 0):g}")]
    for label, key in (("Prefix cache hit rate", "prefix_cache_hit_rate"),):
        if p.get(key) is not None:
            rows.append((label, f"{p[key]:.1%}"))
    for label, key in (("GPU memory used max (MiB)", "gpu_memory_used_mib_max"),
                       ("Engine GPU memory max (MiB)", "gpu_memory_engine_mib_max"),
                       ("Engine resident memory max (MiB)", "rss_mib_max")):
        if p.get(key) is not None:
            rows.append((label, f"{p[key]:.0f}"))
    for error, count in (summary.get("error_counts") or {}).items():
        rows.append((f"Error x{count}", error[:80]))
    return rows
