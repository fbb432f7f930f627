"""One latency SLO: a metric, a statistic and a limit in milliseconds.

Scenario files and the command line spell an SLO `ttft_p95_ms=500`: the key names the
metric (ttft, tpot, itl, e2el) and the statistic (mean, median, p50, p90, p95, p99), and
the key of the same figure in a `vllm bench serve` summary is `p95_ttft_ms`. Both
spellings and the check `value <= limit` live here, and nowhere else (`summary_key`,
`Slo.met`, `figures`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
LATENCY_STATS = ("mean", "median", "p90", "p95", "p99")
# Every SLO key there is, as scenarios write them: ttft_mean_ms, ..., e2el_p99_ms.
KEYS = tuple(f"{m}_{s}_ms" for m in LATENCY_METRICS for s in LATENCY_STATS)


def latency_key(name: str) -> str:
    """`ttft_p95` -> `p95_ttft_ms` (the `vllm bench serve` key)."""
    m = re.fullmatch(r"([a-z0-9]+)_([a-z0-9]+)", name)
    if not m or m.group(1) not in LATENCY_METRICS or m.group(2) not in LATENCY_STATS:
        raise ValueError(f"unknown latency metric {name!r}; use METRIC_STAT with METRIC in "
                         f"{', '.join(LATENCY_METRICS)} and STAT in {', '.join(LATENCY_STATS)}")
    metric, stat = m.groups()
    return f"{stat}_{metric}_ms"


@dataclass(frozen=True)
class Slo:
    """`ttft_p95_ms <= 500`."""

    key: str  # as scenarios write it: ttft_p95_ms
    limit_ms: float

    @property
    def summary_key(self) -> str:
        """The figure's key in a benchmark summary: p95_ttft_ms."""
        return summary_key(self.key)

    @property
    def metric(self) -> str:
        return self.key.split("_")[0]

    @property
    def stat(self) -> str:
        """The statistic: p95 (of ttft_p95_ms)."""
        return self.key.removesuffix("_ms").partition("_")[2]

    def met(self, value: float | None) -> bool:
        """A figure that was not measured does not meet the SLO."""
        return value is not None and value <= self.limit_ms

    def __str__(self) -> str:
        return f"{self.key}<={self.limit_ms:g}"


def summary_key(key: str) -> str:
    """SLO key `ttft_p95_ms` as a benchmark summary's key, `p95_ttft_ms`; ValueError for a
    key that names no latency figure."""
    return latency_key(key.removesuffix("_ms"))


def figures(summary: Mapping[str, Any], keys: Iterable[str]) -> dict[str, float]:
    """The figures of a summary that SLO keys name, under those keys and rounded:
    {"ttft_p95_ms": 312.5}; keys the summary has no figure for are left out."""
    return {k: round(summary[summary_key(k)], 3) for k in keys
            if summary.get(summary_key(k)) is not None}


def check_key(key: str) -> str:
    """`key` if it names a latency figure (METRIC_STAT_ms), else ValueError saying which
    part is wrong and what is allowed."""
    if not key.endswith("_ms"):
        raise ValueError(f"SLO {key!r} must end in _ms (e.g. ttft_p95_ms)")
    latency_key(key[:-3])
    return key


def parse(spec: str) -> Slo:
    """`ttft_p95_ms=300` from the command line; ValueError naming what is wrong."""
    key, sep, value = spec.partition("=")
    if not sep:
        raise ValueError(f"{spec!r} is not KEY=MS (e.g. ttft_p95_ms=500)")
    try:
        limit = float(value)
    except ValueError:
        raise ValueError(f"{spec!r}: {value!r} is not a number") from None
    if not limit > 0:
        raise ValueError(f"{spec!r}: the limit must be more than 0 ms")
    return Slo(check_key(key.strip()), limit)


def parse_all(specs: Iterable[str]) -> dict[str, float]:
    """Several `KEY=MS` specs as the scenario's `slos` mapping."""
    return {s.key: s.limit_ms for s in map(parse, specs)}


def of(slos: Mapping[str, float]) -> list[Slo]:
    """A scenario's `slos` mapping as SLO values."""
    return [Slo(k, float(v)) for k, v in slos.items()]
