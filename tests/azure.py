"""A trace in the Azure LLM inference traces' CSV format, written by the test that reads it:
bursty arrivals (gamma gaps, shape 0.3) and long-tailed prompt and reply lengths, seeded."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import numpy as np


def write(path: Path, requests: int = 360, seconds: float = 136.3, seed: int = 0,
          context: float = 4.0, generated: float = 2.5, longest: int = 1000) -> Path:
    """`requests` rows over `seconds` of recorded time (2.64 requests/s by default, as the
    trace a user replayed at 44.3x); lengths lognormal around e^`context` prompt and
    e^`generated` reply tokens, at most `longest` (a tiny model serves the defaults at tens of
    requests/s)."""
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(0.3, 1.0, requests - 1)
    times = np.concatenate([[0.0], np.cumsum(gaps)]) * seconds / gaps.sum()
    start = datetime(2023, 11, 16, 18, 15, 46)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for at in times:
        stamp = (start + timedelta(seconds=float(at))).isoformat(sep=" ")
        rows.append(f"{stamp},{int(rng.lognormal(context, 0.8)) + 1},"
                    f"{min(longest, int(rng.lognormal(generated, 1.0)))}")
    path.write_text("\n".join(rows) + "\n")
    return path
