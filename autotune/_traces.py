"""Recorded traffic: timestamped requests read from a trace file, replayed at a chosen pace.

Two formats, told apart by the file's suffix (else by its first character):

- CSV with the columns of the public Azure LLM inference traces: `TIMESTAMP` (an ISO
  date-time, or seconds), `ContextTokens`, `GeneratedTokens`;
- JSONL as in the Mooncake traces (and vLLM's `timed_trace` dataset): `timestamp` in
  milliseconds, `input_length`, `output_length` and optional `hash_ids`, one id per block
  of `block_tokens` prompt tokens. Requests that share leading ids share that prompt
  prefix, which is what a prefix cache sees in production.

A trace keeps its arrival gaps. It is replayed `time_scale` times faster than recorded,
so the capacity of a configuration on it is a time-scale factor (`autotune.measure
.capacity`). A step shorter than the trace replays a few stretches of it spread over the
whole trace (`Trace.sample`: each keeps its bursts and lulls, together they keep the day's
shape); a step longer than the trace replays it again. Every run says which part it
replayed (`Replay`, in its summary and each capacity step's record). The blocks become
prompt token ids in `autotune.measure.workloads`.
"""

from __future__ import annotations

import bisect
import csv
import functools
import json
import math
import os
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.stored import Stored
from autotune.traffic import WorkloadSpec

# The Azure traces' columns; matched without regard to case.
CSV_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
JSONL_KEYS = ("timestamp", "input_length", "output_length")
# A step that replays part of a trace takes its requests from this many windows.
WINDOWS = 4


@dataclass(frozen=True)
class TraceRequest:
    """One recorded request: when it arrived (s after the trace's first), how long its
    prompt and reply were (a recorded empty reply is replayed as one token: vLLM asks for
    at least one), and the ids of its prompt's blocks (shared id: shared text)."""

    at_s: float
    input_tokens: int
    output_tokens: int
    blocks: tuple[int, ...]


@dataclass(frozen=True)
class Trace:
    """A trace file's requests in arrival order, with blocks of `block_tokens` tokens."""

    path: str
    requests: tuple[TraceRequest, ...]
    block_tokens: int

    @property
    def duration_s(self) -> float:
        return self.requests[-1].at_s - self.requests[0].at_s

    @property
    def mean_rate(self) -> float:
        """Requests per second at the recorded pace (time scale 1)."""
        return len(self.requests) / self.duration_s

    def sample(self, n: int, windows: int = WINDOWS) -> list[tuple[float, TraceRequest]]:
        """About `n` requests with their send offsets at the recorded pace (s from the start).

        Fewer than the trace holds: `windows` stretches of recorded time, one centred in
        each equal part of the trace, together as long as `n` requests take at the mean
        rate, played one after the other with every request and silence inside them: a
        stretch keeps its bursts and its lulls (runs of consecutive requests would drop the
        long gaps and play a bursty trace faster than recorded), and the stretches keep the
        day's shape. As many or more: the whole trace, again from the start one mean gap
        after its end, until `n` are sent. The same `n` always gives the same requests, so
        the steps of a capacity search differ only in pace.
        """
        total = len(self.requests)
        if n >= total:
            loop = self.duration_s + 1.0 / self.mean_rate
            return [(k * loop + r.at_s, r) for k in range(math.ceil(n / total))
                    for r in self.requests][:n]
        width, starts = self._stretches(n, windows)
        times = [r.at_s for r in self.requests]
        out: list[tuple[float, TraceRequest]] = []
        for i, start in enumerate(starts):
            first, end = bisect.bisect_left(times, start), bisect.bisect_left(times, start + width)
            out += [(i * width + times[j] - start, self.requests[j]) for j in range(first, end)]
        # Stretches of silence only (a sparse trace, few requests asked): the middle one.
        return out or [(0.0, self.requests[total // 2])]

    def _stretches(self, n: int, windows: int) -> tuple[float, list[float]]:
        """The recorded length of each stretch `sample` takes for `n` requests (fewer than
        the trace holds), and where each begins: together they last as long as `n`
        requests at the mean rate."""
        parts = min(windows, n)
        width = n / self.mean_rate / parts
        return width, [(i + 0.5) * self.duration_s / parts - width / 2 for i in range(parts)]

    def replay(self, n: int, windows: int = WINDOWS) -> Replay:
        """What `sample(n)` replays of the trace: how many requests, from how many
        stretches, and what share of the recorded time."""
        picked = self.sample(n, windows)
        total = len(self.requests)
        if n >= total:  # the whole trace, again from the start for more
            share = picked[-1][0] / self.duration_s
            return Replay(len(picked), total, 0, round(share, 4), round(self.duration_s, 3))
        width, starts = self._stretches(n, windows)
        return Replay(len(picked), total, len(starts),
                      round(width * len(starts) / self.duration_s, 4),
                      round(self.duration_s, 3))


@dataclass(frozen=True)
class Replay(Stored):
    """What a run replayed of its trace: `requests` of the trace's `trace_requests`, from
    `stretches` stretches of it (0: the whole trace, from its start, again for more), which
    cover `share` of its recorded `trace_s` seconds (above 1 when it was replayed again).

    A step shorter than the trace sends part of it, and stretches of bursts send more
    requests than their share of the time (133 of a 360-request trace where 100 were
    asked): a run says which part it measured, and `density` how much busier its
    stretches were than the whole trace, so how much more (or less) a step at a given pace
    offered than the trace's mean rate times the pace."""

    requests: int = 0
    trace_requests: int = 0
    stretches: int = 0
    share: float = 0.0
    trace_s: float = 0.0

    @property
    def density(self) -> float:
        """The replayed requests' rate over the trace's mean rate (1: as busy as the whole)."""
        if not (self.share and self.trace_requests):
            return 1.0
        return self.requests / self.trace_requests / self.share

    def text(self) -> str:
        """One line: `replayed 133 of 360 requests: 4 stretches, 28 % of the trace's
        2m16s, 1.32x its mean rate`."""
        whole = _span(self.trace_s)
        if self.stretches:
            text = (f"replayed {self.requests} of {self.trace_requests} requests: "
                    f"{self.stretches} stretch{'es' if self.stretches != 1 else ''}, "
                    f"{_percent(self.share)} of the trace's {whole}")
        elif self.requests == self.trace_requests:
            text = f"replayed all {self.requests} requests: the whole trace's {whole}"
        else:
            text = (f"replayed {self.requests} requests: the whole trace of "
                    f"{self.trace_requests}, {self.share:.3g} times its {whole}")
        if abs(self.density - 1) > 0.05:
            text += f", {self.density:.2f}x its mean rate"
        return text

    def short(self) -> str:
        """A table cell: `133/360 (28 %)` (requests of the trace's, share of its time),
        `2340 (6.5x)` (the whole trace, again and again)."""
        if self.stretches:
            return f"{self.requests}/{self.trace_requests} ({_percent(self.share)})"
        return f"{self.requests} ({self.share:.2g}x)"


def _percent(share: float) -> str:
    """`37 %`, `1.2 %`: a share as the project writes percentages."""
    return f"{share * 100:.0f} %" if share >= 0.1 else f"{share * 100:.2g} %"


def _span(seconds: float) -> str:
    """A recorded length for people: `45s`, `6m00s`, `2h05m`."""
    whole = round(seconds)
    if seconds < 60:
        return f"{seconds:.3g}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole // 60 % 60:02d}m"


def shipped(name: str) -> Path:
    """A trace shipped with autotune (`dataset: day`), built by scripts/make_trace.py."""
    return Path(str(resources.files("autotune").joinpath(f"data/traces/{name}.jsonl")))


def of(spec: WorkloadSpec) -> Trace:
    """The trace a `kind: trace` workload replays: its `path`, else the shipped `dataset`."""
    return load(spec.path or shipped(spec.dataset or ""), spec.block_tokens)


def is_trace(path: str | os.PathLike[str]) -> bool:
    """Whether a file reads as a trace rather than a file of prompts: a CSV, or JSONL whose
    first line has a `timestamp` (`autotune init --workload FILE` tells them apart)."""
    if Path(path).suffix.lower() == ".csv":
        return True
    try:
        with open(path, encoding="utf-8-sig") as f:
            first = next((line for line in f if line.strip()), "")
        return "timestamp" in json.loads(first)
    except (OSError, UnicodeDecodeError, ValueError, TypeError):
        return False


def load(path: str | os.PathLike[str], block_tokens: int) -> Trace:
    """The trace in `path` (read once per process while the file is unchanged); every
    problem is one ConfigError line naming the file, the line and what is allowed."""
    name = os.fspath(path)
    try:
        stat = os.stat(name)
    except OSError as err:
        raise ConfigError(f"{name}: cannot read the trace: {err.strerror}") from None
    return _load(name, stat.st_mtime_ns, stat.st_size, block_tokens)


@functools.lru_cache(maxsize=8)
def _load(name: str, _mtime: int, _size: int, block_tokens: int) -> Trace:
    try:
        text = Path(name).read_bytes().decode("utf-8-sig")
    except OSError as err:
        raise ConfigError(f"{name}: cannot read the trace: {err.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{name}: not a text file; a trace is CSV ({', '.join(CSV_COLUMNS)}) "
                          f"or JSONL ({', '.join(JSONL_KEYS)}, hash_ids)") from None
    suffix = Path(name).suffix.lower()
    jsonl = suffix in (".jsonl", ".json") or (suffix != ".csv"
                                              and text.lstrip().startswith("{"))
    rows = _jsonl_rows(name, text) if jsonl else _csv_rows(name, text)
    if len(rows) < 2:
        raise ConfigError(f"{name}: a trace needs at least two requests (found {len(rows)})")
    rows.sort(key=lambda row: row[0])  # stable: equal times keep the file's order
    if rows[-1][0] <= rows[0][0]:
        raise ConfigError(f"{name}: every request has the same timestamp; a trace needs "
                          "arrival times to have a pace")
    fresh = max((b for row in rows for b in row[3]), default=-1) + 1
    requests = []
    for at, inp, out, ids in rows:
        need = math.ceil(inp / block_tokens)
        blocks = tuple(ids[:need])
        extra = need - len(blocks)  # the rest of the prompt is this request's own
        blocks += tuple(range(fresh, fresh + extra))
        fresh += extra
        requests.append(TraceRequest(at - rows[0][0], inp, out, blocks))
    return Trace(name, tuple(requests), block_tokens)


Row = tuple[float, int, int, tuple[int, ...]]


def _count(name: str, line: int, key: str, value: Any, least: int = 1) -> int:
    """A token count: a whole number of at least `least`."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (number >= least and number == int(number)):
        raise ConfigError(f"{name}:{line}: {key} must be a whole number of tokens >= {least} "
                          f"(got {value!r})")
    return int(number)


def _csv_rows(name: str, text: str) -> list[Row]:
    reader = csv.DictReader(text.splitlines())
    found = {(h or "").strip().lower(): h for h in reader.fieldnames or []}
    missing = [c for c in CSV_COLUMNS if c.lower() not in found]
    if missing:
        raise ConfigError(f"{name}: a CSV trace needs the columns {', '.join(CSV_COLUMNS)} "
                          f"(missing: {', '.join(missing)}; found: "
                          f"{', '.join(reader.fieldnames or []) or 'none'})")
    ts, inp, out = (found[c.lower()] for c in CSV_COLUMNS)
    rows: list[Row] = []
    for line, row in enumerate(reader, 2):
        if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
            continue
        rows.append((_seconds(name, line, row.get(ts)), _count(name, line, inp, row.get(inp)),
                     _count(name, line, out, row.get(out), 0), ()))
    return rows


def _seconds(name: str, line: int, value: str | None) -> float:
    """A CSV timestamp: seconds, or an ISO date-time (the Azure traces')."""
    text = (value or "").strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ConfigError(f"{name}:{line}: TIMESTAMP {text!r} is neither seconds nor an ISO "
                          "date-time such as 2023-11-16 18:15:46.68") from None


def _jsonl_rows(name: str, text: str) -> list[Row]:
    rows = []
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError as err:
            raise ConfigError(f"{name}:{line}: not JSON ({err})") from None
        if not isinstance(entry, dict):
            raise ConfigError(f"{name}:{line}: a trace line is a JSON object")
        missing = [k for k in JSONL_KEYS if k not in entry]
        if missing:
            raise ConfigError(f"{name}:{line}: needs the keys {', '.join(JSONL_KEYS)} "
                              f"(missing: {', '.join(missing)})")
        stamp = entry["timestamp"]
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) \
                or not math.isfinite(stamp):
            raise ConfigError(f"{name}:{line}: timestamp must be a number of milliseconds "
                              f"(got {stamp!r})")
        ids = entry.get("hash_ids") or []
        if not isinstance(ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise ConfigError(f"{name}:{line}: hash_ids must be a list of whole numbers >= 0")
        rows.append((stamp / 1000, _count(name, line, "input_length", entry["input_length"]),
                     _count(name, line, "output_length", entry["output_length"], 0), tuple(ids)))
    return rows
