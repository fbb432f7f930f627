"""Terminal views: the live line of `autotune tune` and the table of `autotune show`."""

from __future__ import annotations

import json
from typing import Any

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
    if p.deadline_s is not None:
        parts[-1] += f", {_clock(max(0.0, p.deadline_s - p.elapsed_s))} left"
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
                "mem MiB", "gain" if weighted else "values"):
        table.add_column(col, overflow="fold")
    for r in data["trials"]:
        last = fmt(r["gain"], "+.1%") if weighted else \
            ", ".join(fmt(v, ".4g") for v in (r["values"] or []))
        table.add_row(str(r["number"]), r["name"], _flags(r["flags"]), r["outcome"],
                      r["reason"], fmt(r["throughput"]), fmt(r["latency_ms"]),
                      fmt(r["memory_mib"], ".0f"), last)
    console.print(table)
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
