"""One benchmark of one running server: send a workload, watch the engine, summarise.

The result is a `Measurement`: `vllm bench serve --save-result`'s figures plus autotune's
extras (`probes`, `workload`, `truncated`; for a trace `replayed`, which part of it was
sent: `autotune._traces.Replay`), stored flat as vLLM's own file is, so the two compare.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from autotune.measure import bottleneck, loadgen, metrics, probes, watch, workloads
from autotune.measure.measurement import Measurement, SentWorkload
from autotune.measure.probesummary import ClientLag, ProbeSummary
from autotune.measure.workloads import Session, Tokenizer, build_sessions
from autotune.traffic import WorkloadSpec


@dataclass(frozen=True)
class Load:
    """A workload offered to one running server: where to send it (`target`), what to send
    (`spec`, its prompts built with the tokenizer of `tokenizer_model`, a path or Hugging
    Face id; `tokenizer` when already loaded), the engine's processes to probe (`pids`) and
    the watch on the engine (`alive`: every wait ends with `Halted` once it names a
    reason)."""

    target: loadgen.Target
    spec: WorkloadSpec
    tokenizer_model: str
    tokenizer: Tokenizer | None = None
    pids: Callable[[], list[int]] | None = None
    alive: watch.Alive | None = None


@dataclass(frozen=True)
class ProbePhase:
    """A benchmark's first `sessions` sent and summarised on their own: `verdict` sees that
    summary and may return a reason to stop there (a trial's pruning)."""

    sessions: int
    verdict: Callable[[Measurement], str | None]


@dataclass(frozen=True)
class StepRun:
    """One load step as sent and seen: its whole-step summary (`whole`), its requests
    (`run`) and the probe series (`sampler`), from which a steady window is cut and judged
    (`autotune.measure._stepverdict`)."""

    whole: Measurement
    run: loadgen.RunResult
    sampler: probes.Sampler


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
             slos: Mapping[str, float] | None) -> Measurement:
    results = [r for run, _ in runs for r in run.results]
    summary = metrics.summarize(results, sum(run.duration_s for run, _ in runs), slos)
    lags = [run.lag for run, _ in runs if run.lag]
    seen = probes.merge([s.summary() for _, s in runs])
    client = max(lags, key=lambda lag: lag.lag_p99_ms or 0.0) if lags else ClientLag()
    # What limited the engine over the whole run (a capacity step judges its own window).
    summary = summary.replace(probes=seen, client=client,
                              bottleneck=bottleneck.attribute(seen, client),
                              truncated=any(run.truncated for run, _ in runs),
                              workload=SentWorkload.of(spec))
    if (replay := workloads.replayed(spec)) is not None:
        summary = summary.replace(replayed=replay)  # which part of the trace this run measured
    return summary


def benchmark(load: Load, *, slos: Mapping[str, float] | None = None, offset: int = 0,
              probe_interval: float = 1.0, probe: ProbePhase | None = None) -> Measurement:
    """Send `load` and return the summary with probes.

    With `probe`, its first sessions are a probe phase: its verdict sees their summary
    and may return a reason to stop there (the summary then carries
    `stopped_after_probe`); otherwise the rest is sent and everything is summarised.
    `load.alive` watches the engine throughout (`autotune.measure.watch`): `Halted` once
    it names a reason.
    """
    target, spec = load.target, load.spec
    measured, warmup = prepare(spec, load.tokenizer_model, offset=offset,
                               tokenizer=load.tokenizer)

    async def go() -> Measurement:
        await _warm(target, spec, warmup)
        runs = []
        rest = measured
        if probe is not None and 0 < probe.sessions < len(measured):
            runs.append(await _phase(target, spec, measured[:probe.sessions], load.pids,
                                     probe_interval))
            partial = _summary(runs, spec, slos)
            if reason := probe.verdict(partial):
                return partial.replace(stopped_after_probe=reason)
            rest = measured[probe.sessions:]
        runs.append(await _phase(target, spec, rest, load.pids, probe_interval))
        return _summary(runs, spec, slos)

    return watch.run(go(), load.alive)


def step(load: Load, *, offset: int = 0, probe_interval: float = 0.5) -> StepRun:
    """One load step: its whole-step summary, and the requests and probe series from
    which a steady-state window can be cut (`autotune.measure._steady`). `load.alive`
    watches the engine throughout, as in `benchmark`."""
    target, spec = load.target, load.spec
    measured, warmup = prepare(spec, load.tokenizer_model, offset=offset,
                               tokenizer=load.tokenizer)

    async def go() -> tuple[loadgen.RunResult, probes.Sampler]:
        await _warm(target, spec, warmup)
        return await _phase(target, spec, measured, load.pids, probe_interval)

    run, sampler = watch.run(go(), load.alive)
    return StepRun(_summary([(run, sampler)], spec, None), run, sampler)


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


def summary_rows(summary: Measurement) -> list[tuple[str, str]]:
    """(label, value) rows in `vllm bench serve`'s order, for a terminal table."""
    rows = [(label, fmt.format(value)) for label, key, fmt in _ROWS
            if (value := summary.value(key)) is not None]
    for metric, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        for stat in ("mean", "median", "p95", "p99"):
            key = f"{stat}_{metric}_ms"
            if key in summary.latencies:
                rows.append((f"{stat.capitalize()} {name} (ms)",
                             f"{summary.latencies[key]:.2f}"))
    p = summary.probes or ProbeSummary()
    rows += [("Preemptions", f"{p.preemptions or 0:g}"),
             ("KV cache usage max / mean", f"{p.kv_cache_usage_max or 0:.1%} / "
                                           f"{p.kv_cache_usage_mean or 0:.1%}"),
             ("Waiting requests max", f"{p.requests_waiting_max or 0:g}")]
    if p.prefix_cache_hit_rate is not None:
        rows.append(("Prefix cache hit rate", f"{p.prefix_cache_hit_rate:.1%}"))
    for label, mib in (("GPU memory used max (MiB)", p.gpu_memory_used_mib_max),
                       ("Engine GPU memory max (MiB)", p.gpu_memory_engine_mib_max),
                       ("Engine resident memory max (MiB)", p.rss_mib_max)):
        if mib is not None:
            rows.append((label, f"{mib:.0f}"))
    for error, count in summary.error_counts.items():
        rows.append((f"Error x{count}", error[:80]))
    return rows
