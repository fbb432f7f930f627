#!/usr/bin/env python3
"""Build the shipped trace (autotune/data/traces/day.jsonl): generated, deterministic.

Mooncake-style JSONL (timestamp in ms, input_length, output_length, hash_ids) with blocks of
64 tokens (`block_tokens: 64` in a scenario), made to have what recorded traffic has and
Poisson arrivals lack:

- a day's shape, one recorded minute per hour (1,440 s): the rate follows the hours, about
  five times higher in the afternoon than at night;
- bursts: gamma gaps of shape 0.3 (a coefficient of variation near 1.8, against 1 for
  Poisson) in time scaled by that rate;
- shared prefixes: six applications with system prompts of 2-12 blocks (Zipf popularity),
  and conversations whose next turn repeats the whole earlier prompt (40 % of requests).

Usage: scripts/make_trace.py [--out FILE] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 64
DAY_S = 1440.0  # one recorded minute per hour
MEAN_RATE = 1.5  # requests per second over the day
SHAPE = 0.3  # gamma shape of the gaps in rate-scaled time (1 would be Poisson)
APPS = 6
FOLLOW_UP = 0.4


def rate(t: np.ndarray) -> np.ndarray:
    """Relative load at `t` seconds into the day: low at 3 h, high at 15 h (mean 1)."""
    hour = t / DAY_S * 24
    return 1 + 0.65 * np.sin(2 * math.pi * (hour - 9) / 24)


def arrivals(rng: np.random.Generator) -> np.ndarray:
    """Arrival times: bursty gaps of mean 1 in 'load time', mapped through the day's shape."""
    grid = np.linspace(0, DAY_S, 20_001)
    load = np.concatenate([[0], np.cumsum(rate(grid[1:]) * np.diff(grid))]) * MEAN_RATE
    gaps = rng.gamma(SHAPE, 1 / SHAPE, size=int(load[-1] * 1.2))
    marks = np.cumsum(gaps)
    marks = marks[marks < load[-1]]
    return np.interp(marks, load, grid)


def build(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    fresh = 0

    def new_blocks(n: int) -> list[int]:
        nonlocal fresh
        fresh += n
        return list(range(fresh - n, fresh))

    systems = [new_blocks(int(rng.integers(2, 13))) for _ in range(APPS)]
    popularity = 1 / np.arange(1, APPS + 1)
    popularity /= popularity.sum()
    open_chats: list[list[int]] = []
    rows = []
    for t in arrivals(rng):
        user = int(np.clip(rng.lognormal(math.log(160), 0.8), 16, 1024))
        output = int(np.clip(rng.lognormal(math.log(96), 0.7), 8, 384))
        if open_chats and rng.random() < FOLLOW_UP:
            prefix = open_chats.pop(int(rng.integers(len(open_chats))))
        else:
            prefix = systems[int(rng.choice(APPS, p=popularity))]
        blocks = prefix + new_blocks(math.ceil(user / BLOCK))
        # the prompt fills its blocks but the last, as Mooncake's do
        length = len(prefix) * BLOCK + user
        rows.append({"timestamp": int(round(t * 1000)), "input_length": length,
                     "output_length": output, "hash_ids": blocks})
        if len(blocks) < 40:  # a conversation ends before it outgrows a small context
            open_chats.append(blocks)
            open_chats = open_chats[-64:]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "autotune/data/traces/day.jsonl")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = build(args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
    print(f"{args.out}: {len(rows)} requests over {rows[-1]['timestamp'] / 1000:.0f} s")


if __name__ == "__main__":
    main()
