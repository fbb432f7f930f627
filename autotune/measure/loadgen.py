"""Streaming load generator for vLLM's OpenAI endpoints, timed like `vllm bench serve`.

`send` makes one streaming request and never raises: HTTP errors, timeouts,
broken streams and empty outputs become a `RequestResult` with `success=False`
and an error string. `send_workload` sends a workload's sessions with Poisson or gamma
arrivals under a concurrency cap, through one aiohttp session.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp
import numpy as np

from autotune.measure._request import RequestResult
from autotune.measure.probesummary import ClientLag
from autotune.measure.workloads import Session, Turn
from autotune.traffic import WorkloadSpec

KEEPALIVE_S = 2.0


@dataclass(frozen=True)
class Target:
    """Where to send: base URL, served model name, auth headers."""

    url: str
    model: str
    headers: dict[str, str]


@dataclass
class RunResult:
    results: list[RequestResult]
    duration_s: float
    truncated: bool = False  # the duration cap stopped new requests
    t0: float = 0.0  # perf_counter when the first measured request was due
    send_s: float = 0.0  # when the last request was due, from t0 (the arrival schedule)
    lag: ClientLag = field(default_factory=ClientLag)  # LagMonitor.figures()


async def send(http: aiohttp.ClientSession, target: Target, spec: WorkloadSpec, turn: Turn,
               session: Session | None = None) -> RequestResult:
    """One streaming request; the result records TTFT, ITLs and E2EL from perf_counter."""
    body: dict[str, object] = {
        "model": target.model, "max_tokens": turn.max_tokens, "temperature": spec.temperature,
        "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": spec.ignore_eos,
    }
    if spec.api == "chat":
        messages = []
        if session is not None and session.system:
            messages.append({"role": "system", "content": session.system})
        messages += (session.history if session is not None else [])
        messages.append({"role": "user", "content": turn.content})
        body["messages"] = messages
        path = "/v1/chat/completions"
    else:
        body["prompt"] = list(turn.token_ids) if turn.token_ids is not None else turn.content
        path = "/v1/completions"
    result = RequestResult(success=False, prompt_len=turn.prompt_len or 0, output_tokens=0,
                           ttft=0.0, latency=0.0, start_time=time.perf_counter())
    st = result.start_time
    last = st
    text: list[str] = []
    done = False
    try:
        async with http.post(target.url + path, json=body, headers=target.headers) as resp:
            if resp.status != 200:
                detail = (await resp.text())[:200].replace("\n", " ")
                result.error = f"HTTP {resp.status}: {detail}"
                return result
            events = SseBuffer()
            # Whatever the socket has, at once (as vLLM's client reads): line-by-line reads
            # cost an await per line and let events queue up behind each other.
            async for raw in resp.content.iter_any():
                for data in events.add(raw):
                    if data == "[DONE]":
                        done = True
                        continue  # read to the end, so the connection can be reused
                    chunk = json.loads(data)
                    now = time.perf_counter()
                    if choices := chunk.get("choices"):
                        first = choices[0]
                        piece = first.get("text") if spec.api != "chat" else (
                            (first.get("delta") or {}).get("content"))
                        if result.ttft == 0.0:
                            result.ttft = now - st
                        else:
                            result.itl.append(now - last)
                        last = now
                        text.append(piece or "")
                    if usage := chunk.get("usage"):
                        result.output_tokens = int(usage.get("completion_tokens") or 0)
                        result.prompt_len = int(usage.get("prompt_tokens") or result.prompt_len)
        result.generated_text = "".join(text)
        if not done:  # vLLM always ends a stream with [DONE]; without it the reply is cut
            result.error = "stream ended before [DONE]"
        elif result.ttft == 0.0:
            result.error = "no content received"
        else:
            result.success = True
            result.latency = last - st
    except asyncio.TimeoutError:
        result.error = f"timeout after {spec.timeout_s:g} s"
    except aiohttp.ClientPayloadError as err:
        result.error = f"stream broken: {err}"
    except (aiohttp.ClientError, OSError, ValueError) as err:
        result.error = f"{type(err).__name__}: {err}"
    return result


class SseBuffer:
    """Splits a byte stream into server-sent events' `data:` payloads as they complete."""

    def __init__(self) -> None:
        self.buffer = b""

    def add(self, raw: bytes) -> list[str]:
        self.buffer += raw
        out = []
        while True:
            end = self.buffer.find(b"\n\n")
            if end < 0:
                break
            event, self.buffer = self.buffer[:end], self.buffer[end + 2:]
            for line in event.split(b"\n"):
                line = line.strip()
                if line.startswith(b"data:"):  # ":" starts a comment (keep-alive)
                    out.append(line[5:].strip().decode())
        return out


class LagMonitor:
    """How late the event loop wakes up: a client that falls behind stamps events late
    and bunched, and its latencies are then its own, not the server's.

    A task sleeps `period` s at a time and records how much longer each sleep took.
    """

    def __init__(self, period: float = 0.005):
        self.period = period
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.period)
            self.lags.append(time.perf_counter() - t - self.period)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def figures(self) -> ClientLag:
        """p50/p99/max of the wake-up lag in ms (none when nothing was measured)."""
        if not self.lags:
            return ClientLag()
        ms = np.array(self.lags) * 1000
        return ClientLag(float(np.percentile(ms, 50)), float(np.percentile(ms, 99)),
                         float(ms.max()))


def arrival_offsets(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Send times (s from the start), as `vllm bench serve` computes them.

    Gamma intervals with shape `burstiness` (1 = Poisson), rescaled so the last
    one falls at n / rate, which steadies throughput across seeds.
    """
    if math.isinf(rate):
        return [0.0] * n
    rng = np.random.default_rng(seed)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    offsets = np.cumsum(gaps)
    if offsets[-1] > 0:
        offsets *= (n / rate) / offsets[-1]
    return [float(x) for x in offsets]


def due_times(sessions: Sequence[Session], spec: WorkloadSpec) -> list[float]:
    """When each session is due (s from the start): its recorded time where every session
    has one (a trace), else `arrival_offsets` at the spec's rate."""
    recorded = [s.at for s in sessions if s.at is not None]
    if sessions and len(recorded) == len(sessions):
        return recorded
    return arrival_offsets(len(sessions), spec.request_rate, spec.burstiness, spec.seed)


def engine_connector(limit: int = 0) -> aiohttp.TCPConnector:
    """Connections for talking to a vLLM server, up to `limit` at once (0: no limit).

    vLLM's server closes idle keep-alive connections after 5 s
    (VLLM_HTTP_TIMEOUT_KEEP_ALIVE); a client that reuses one just then fails with "Can not
    write request body" or a disconnect (seen on a queueing CPU engine, and as a guardrail
    error on a busy CI machine). These are dropped after KEEPALIVE_S instead."""
    return aiohttp.TCPConnector(limit=limit, limit_per_host=0, force_close=False,
                                keepalive_timeout=KEEPALIVE_S, enable_cleanup_closed=True)


async def send_workload(target: Target, spec: WorkloadSpec, sessions: Sequence[Session],
                        warmup: Sequence[Session] = (),
                        on_result: Callable[[RequestResult], None] | None = None) -> RunResult:
    """Send the warm-up sessions (not counted), then the measured ones on schedule."""
    connector = engine_connector(spec.max_concurrency or 0)  # 0: no limit, as vLLM's client
    timeout = aiohttp.ClientTimeout(total=spec.timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     trust_env=False) as http:
        sem = asyncio.Semaphore(spec.max_concurrency or 1 << 30)
        if warmup:
            warming = Sender(http, target, spec, sem)
            await asyncio.gather(*(warming.session(s) for s in warmup))
        results: list[RequestResult] = []
        offsets = due_times(sessions, spec)
        lag = LagMonitor()
        lag.start()
        t0 = time.perf_counter()
        deadline = t0 + spec.max_duration_s if spec.max_duration_s else None
        sender = Sender(http, target, spec, sem, results, deadline, on_result)
        tasks: list[asyncio.Task[bool]] = []
        truncated = False
        try:
            for session, offset in zip(sessions, offsets, strict=True):
                if deadline is not None and t0 + offset >= deadline:
                    truncated = True
                    break
                delay = t0 + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(sender.session(session, due=t0 + offset)))
            truncated = any(await asyncio.gather(*tasks)) or truncated
        except BaseException:
            # Cancelled (the engine died, Ctrl-C): no request may outlive its session.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await lag.stop()
            raise
        duration = time.perf_counter() - t0
        await lag.stop()
    return RunResult(results, duration, truncated=truncated, t0=t0,
                     send_s=offsets[len(tasks) - 1] if tasks else 0.0, lag=lag.figures())


@dataclass(frozen=True)
class Sender:
    """One run's client: its HTTP session, where and what it sends (`target`, `spec`), the
    concurrency cap every request waits on (`sem`), when new requests stop (`deadline`,
    perf_counter; None: never), and where each result goes (appended to `results`, then
    passed to `on_result`). A warm-up's sender keeps its results apart and has no
    deadline."""

    http: aiohttp.ClientSession
    target: Target
    spec: WorkloadSpec
    sem: asyncio.Semaphore
    results: list[RequestResult] = field(default_factory=list)
    deadline: float | None = None
    on_result: Callable[[RequestResult], None] | None = None

    async def session(self, session: Session, due: float | None = None) -> bool:
        """Send a session's turns in order; chat turns carry the replies received so far.
        The first turn's result keeps `due`, when the schedule had it sent (perf_counter).

        True when the deadline stopped it before its last turn.
        """
        history = list(session.history)
        for turn in session.turns:
            async with self.sem:  # checked after the wait: queued requests must not start late
                if self.deadline is not None and time.perf_counter() >= self.deadline:
                    return True
                res = await send(self.http, self.target, self.spec,
                                 turn, Session([turn], session.system, history))
            res.due, due = due, None
            self.results.append(res)
            if self.on_result is not None:
                self.on_result(res)
            if not res.success:
                return False  # a conversation cannot go on without the reply
            history += [{"role": "user", "content": turn.content},
                        {"role": "assistant", "content": res.generated_text}]
        return False
