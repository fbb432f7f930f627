"""Run a measurement only as long as its engine can serve it.

Every wait on the engine (the idle wait between capacity steps, a load step, the guardrail's
requests) would otherwise learn of a dead engine only from timeouts. So each runs under a
watch: `alive()` is polled every `POLL_S` from a thread (it may read the process table, which
must not stall the event loop that timestamps tokens), and the first reason it names cancels
the measurement with `Halted`. `alive` returns `None` while the engine may be used, else a
reason; `autotune.engine.server.Server.death` is one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from autotune.errors import Halted

Alive = Callable[[], "str | None"]
T = TypeVar("T")
POLL_S = 0.5


def check(alive: Alive | None) -> None:
    """Raise `Halted` now if `alive` names a reason."""
    if alive is not None and (why := alive()):
        raise Halted(why)


def run(coro: Coroutine[Any, Any, T], alive: Alive | None, poll_s: float = POLL_S) -> T:
    """`asyncio.run(coro)`, ended with `Halted` within `poll_s` of `alive` naming a reason."""
    return asyncio.run(watched(coro, alive, poll_s))


async def watched(coro: Coroutine[Any, Any, T], alive: Alive | None,
                  poll_s: float = POLL_S) -> T:
    """Await `coro` while polling `alive`; cancel it and raise `Halted` on a reason.

    `alive` is asked once more when `coro` has finished, even by an exception: requests
    to an engine that just died fail fast, so a measurement can end (e.g. as "every
    request failed") before a poll sees the death, and what it measured is a crash,
    not a result.
    """
    if alive is None:
        return await coro
    try:
        check(alive)
    except Halted:
        coro.close()  # never started: no "coroutine was never awaited" warning
        raise
    task = asyncio.ensure_future(coro)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=poll_s)
            if not task.done() and (why := await asyncio.to_thread(alive)):
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise Halted(why)
    except BaseException:
        if not task.done():  # this coroutine was cancelled from outside (Ctrl-C)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        raise
    if why := await asyncio.to_thread(alive):
        raise Halted(why) from (None if task.cancelled() else task.exception())
    return task.result()
