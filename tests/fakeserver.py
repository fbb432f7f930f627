"""A fake of vLLM's OpenAI streaming endpoints, for what the real engine cannot do on demand.

The real engine (tests marked `engine`) is the reference for normal serving. This fake exists
only for behaviour that a real vLLM server cannot be made to show when a test asks for it:
faults (a connection dropped midway, HTTP 500, a stall past the client's timeout, a 200 stream
without content events, a stream that ends without `[DONE]`), and exactly known timing and
bookkeeping (a set delay before the first event and between events, each request's body, the
peak number of requests in flight), which the engine's scheduling makes unpredictable.

Normal replies use vLLM's wire format: `data: {json}\\n\\n` events with `choices[0].text`
(completions) or `choices[0].delta.content` (chat, after a role-only first delta), a usage
event with empty `choices` when `stream_options.include_usage` is set, then `data: [DONE]\\n\\n`.
A request asks for a fault by putting `fault:<name>` in its prompt (or last message); the
server-level `fault` applies to requests that name none. Faults: see `FAULTS`.

    with FakeServer(interval=0.01) as url:   # http://127.0.0.1:<port>
        ...

Run as a script (`python tests/fakeserver.py [--stamp]`) it prints its URL on one line and
serves until its standard input closes, for benchmarks that keep the server out of their process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sys
import threading
import time
from typing import Any

from aiohttp import web

FAULTS = {
    "close": "send two content events, then abort the TCP connection",
    "500": "answer HTTP 500 with a JSON error body",
    "stall": "send one content event, then nothing until the server stops",
    "stall-first": "send nothing at all (no headers) until the server stops",
    "empty": "a 200 stream with only the usage event and [DONE]",
    "nodone": "content and usage events, then end the body without [DONE]",
}
_FAULT = re.compile(r"fault:([\w-]+)")


def free_port() -> int:
    """A port that was free a moment ago (nothing listens on it once this returns)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeServer:
    """OpenAI-compatible streaming server on 127.0.0.1, in a thread with its own event loop.

    `events`: content events per reply (None: the request's `max_tokens`); `first_delay` and
    `interval`: seconds before the first content event and between later ones; `stamp`: each
    event's text is the server's `time.time()` at sending, then a space. `requests` holds each
    request's JSON body, `peers` each request's client port (which connection it came on),
    `peak` the most requests in flight at once.
    """

    def __init__(self, *, events: int | None = None, first_delay: float = 0.0,
                 interval: float = 0.0, fault: str | None = None, stamp: bool = False):
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        self.events, self.first_delay, self.interval = events, first_delay, interval
        self.fault, self.stamp = fault, stamp
        self.requests: list[dict[str, Any]] = []
        self.peers: list[int | None] = []  # each request's client port: its connection
        self.in_flight = 0
        self.peak = 0
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> str:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fakeserver",
                                        daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self.url

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/completions", self._handle)
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(self._runner, sock)
        await site.start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def _stop(self) -> None:
        assert self._stopping is not None and self._runner is not None
        self._stopping.set()  # wakes stalled handlers
        await self._runner.cleanup()

    # -- requests --------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.peers.append(peer[1] if peer else None)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await self._reply(request, body)
        finally:
            self.in_flight -= 1

    async def _reply(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        chat = request.path.endswith("/chat/completions")
        text = body["messages"][-1]["content"] if chat else body["prompt"]
        found = _FAULT.search(text)
        fault = found.group(1) if found else self.fault
        if fault == "500":
            return web.json_response({"object": "error", "message": "engine died",
                                      "type": "InternalServerError", "code": 500}, status=500)
        if fault == "stall-first":
            await self._stall()
            return web.Response(status=503)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = self.events if self.events is not None else int(body.get("max_tokens") or 16)
        if fault == "empty":
            n = 0
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{len(self.requests)}"
        head = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": body.get("model", "")}
        for i in range(n):
            await asyncio.sleep(self.first_delay if i == 0 else self.interval)
            piece = f"{time.time():.6f} " if self.stamp else f"tok{i} "
            last = "length" if i == n - 1 else None
            if chat:
                if i == 0:  # vLLM's first chat event carries the role only
                    await _event(resp, {**head, "choices": [{
                        "index": 0, "delta": {"role": "assistant", "content": ""},
                        "logprobs": None, "finish_reason": None}]})
                choice = {"index": 0, "delta": {"content": piece}, "logprobs": None,
                          "finish_reason": last}
            else:
                choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": last,
                          "stop_reason": None}
            await _event(resp, {**head, "choices": [choice]})
            if fault == "close" and i == 1:
                assert request.transport is not None
                request.transport.abort()
                return resp
            if fault == "stall":
                await self._stall()
                return resp
        if (body.get("stream_options") or {}).get("include_usage"):
            prompt = len(text.split())
            await _event(resp, {**head, "choices": [], "usage": {
                "prompt_tokens": prompt, "total_tokens": prompt + n, "completion_tokens": n}})
        if fault != "nodone":
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _stall(self) -> None:
        assert self._stopping is not None
        await self._stopping.wait()


async def _event(resp: web.StreamResponse, payload: dict[str, Any]) -> None:
    await resp.write(b"data: " + json.dumps(payload).encode() + b"\n\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--interval", type=float, default=0.0)
    parser.add_argument("--stamp", action="store_true", help="events carry send times")
    args = parser.parse_args()
    with FakeServer(events=args.events, interval=args.interval, stamp=args.stamp) as url:
        print(url, flush=True)
        sys.stdin.read()  # until the parent closes the pipe (or dies)


if __name__ == "__main__":
    main()
