"""Terminal views: the live line of `autotune tune` and the table of `autotune show`."""

from __future__ import annotations

import json
from typing import Any

from optuna.trial import FrozenTrial
from rich.console import Console
from rich.table import Table

from .show import fmt, outcome, reason
from .study import Progress


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def progress_line(p: Progress) -> str:
    """`trial 3/5 | 4m12s elapsed, ~1h left | best #2 +12.3% | last #3 pruned (oom)`."""
    parts = [f"trial {p.done}/{p.planned}", f"{_clock(p.elapsed_s)} elapsed"]
    left = p.elapsed_s / p.done * (p.planned - p.done) if p.done else 0.0
    if p.deadline_s is not None:
        left = min(left, max(0.0, p.deadline_s - p.elapsed_s))
    if p.done < p.planned:
        parts[-1] += f", ~{_clock(left)} left"
    if p.best is not None and p.best.user_attrs.get("gain") is not None:
        parts.append(f"best #{p.best.number} {p.best.user_attrs['gain']:+.1%} vs defaults")
    if p.last is not None:
        why = reason(p.last)
        parts.append(f"last #{p.last.number} {outcome(p.last)}" + (f" ({why})" if why else ""))
    return " | ".join(parts)


def _flags(flags: dict[str, Any]) -> str:
    out = []
    for k, v in flags.items():
        if isinstance(v, dict):
            v = json.dumps(v, separators=(",", ":"))
        out.append(f"{k}={v}" if not isinstance(v, bool) else (k if v else f"no-{k}"))
    return " ".join(out) or "(defaults)"


def print_summary(data: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    weighted = len(data["directions"]) == 1
    table = Table(title=f"study {data['study']}")
    for col in ("#", "baseline", "flags", "outcome", "reason", "tput", "latency ms",
                "mem MiB", "drift", "gain" if weighted else "values"):
        table.add_column(col, overflow="fold")
    for r in data["trials"]:
        last = fmt(r["gain"], "+.1%") if weighted else \
            ", ".join(fmt(v, ".4g") for v in (r["values"] or []))
        table.add_row(str(r["number"]), r["name"], _flags(r["flags"]), r["outcome"],
                      r["reason"], fmt(r["throughput"]), fmt(r["latency_ms"]),
                      fmt(r["memory_mib"], ".0f"), fmt(r["quality"]["drift"], ".3f"), last)
    console.print(table)
    mm = data.get("memory_model") or {}
    if mm.get("trials"):
        console.print(f"memory model: KV capacity predicted within {mm['max_abs_error']:.1%} "
                      f"(median {mm['median_error']:+.1%}) over {mm['trials']} launched trials; "
                      f"{mm['not_launched']} configuration(s) pruned without launching")
    if weighted:
        best = data.get("best")
        if best is None:
            console.print("no feasible completed trial yet")
        else:
            console.print(f"best: trial #{best['number']} {_flags(best['flags'])}: "
                          f"{fmt(data['best_gain'], '+.1%')} over vLLM defaults "
                          f"(score {fmt(best['values'][0], '.4f')})")
    else:
        nums = ", ".join(f"#{r['number']}" for r in data.get("pareto") or [])
        console.print(f"Pareto set (feasible): {nums or 'empty'}")


def print_trial(t: FrozenTrial, console: Console | None = None) -> None:
    """One trial in full: configuration, outcome, key figures, quality and worst prompts."""
    console = console or Console()
    a = t.user_attrs
    console.print(f"trial #{t.number} {a.get('baseline') or ''}: {outcome(t)}"
                  + (f" ({reason(t)})" if reason(t) else ""))
    console.print("command: " + " ".join(str(x) for x in a.get("command") or []))
    if a.get("detail"):
        console.print(f"detail: {a['detail']}")
    console.print(f"engine: {a.get('engine_version', '-')} on {(a.get('device') or {}).get('name')}"
                  f"; log {a.get('log_path', '-')}")
    if a.get("timings"):
        console.print("time: " + ", ".join(f"{k.removesuffix('_s')} {v:.1f} s"
                                           for k, v in a["timings"].items()))
    m = a.get("metrics") or {}
    if m:
        console.print(f"throughput {fmt(m.get('output_throughput'))} tok/s, "
                      f"{fmt(m.get('request_throughput'), '.2f')} req/s; TTFT p50/p95 "
                      f"{fmt(m.get('median_ttft_ms'))}/{fmt(m.get('p95_ttft_ms'))} ms; TPOT p50 "
                      f"{fmt(m.get('median_tpot_ms'), '.2f')} ms; completed {m.get('completed')}"
                      f", failed {m.get('failed')}")
    q = a.get("quality")
    if q and "drift" in q:
        th = q.get("thresholds") or {}
        console.print(f"quality: {'passed' if q.get('passed') else 'REJECTED'}; drift "
                      f"{q['drift']:.4f} nats (max {fmt(th.get('drift'), '.4f')}), agreement "
                      f"{q['agreement']:.3f} (min {fmt(th.get('agreement'), '.3f')}), "
                      f"common prefix {q['prefix_ratio']:.3f}; noise floor drift "
                      f"{(q.get('noise') or {}).get('drift', 0):.4f}")
        for w in q.get("worst") or []:
            console.print(f"  prompt {w['prompt']} ({w['prompt_text']!r}): drift "
                          f"{w['drift']:.4f}, similarity {w['similarity']:.2f}, diverges at "
                          f"token {w['diverges_at']}")
            console.print(f"    reference: {w['reference'][:120]!r}")
            console.print(f"    this run:  {w['output'][:120]!r}")
