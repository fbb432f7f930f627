"""Ctrl-C and SIGTERM while the study writes: held, never dropped, and raised as
KeyboardInterrupt once the writes are done, so that a trial is never left RUNNING or its
record half-written (`autotune.tuning.study` holds them around each trial's ask and tell).

Nor dropped by Python: a KeyboardInterrupt raised while Python runs a finalizer (a weakref
callback, `__del__`, the garbage collector) is printed as "Exception ignored" and lost, and
the command goes on as if no Ctrl-C had come. So a command remembers one Python dropped
(`remembered`), and the study raises it again before a trial starts work
(`raise_if_dropped`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class _Command:
    """Whether an autotune command is running in this process (`remembered`), and whether
    Python dropped an interrupt meanwhile."""

    running: bool = False
    dropped: bool = False


_COMMAND = _Command()


@contextlib.contextmanager
def remembered() -> Iterator[None]:
    """For one command: a KeyboardInterrupt that Python drops (it reports it through
    `sys.unraisablehook`, printed as "Exception ignored") is remembered until the command
    ends. The signal handlers stay as they were: `asyncio.run` installs its own, which
    cancels its main task cleanly, only over Python's default one."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type,
                                                          KeyboardInterrupt):
            _COMMAND.dropped = True
        previous(unraisable)

    sys.unraisablehook = hook
    _COMMAND.running, _COMMAND.dropped = True, False
    try:
        yield
    finally:
        _COMMAND.running, _COMMAND.dropped = False, False
        sys.unraisablehook = previous


def raise_if_dropped() -> None:
    """Raise KeyboardInterrupt if Python dropped one during this command: the study calls
    this before each trial starts work, so that no engine starts after a Ctrl-C."""
    if _COMMAND.running and _COMMAND.dropped:
        raise KeyboardInterrupt


def _chain(err: BaseException) -> Iterator[BaseException]:
    """`err` and the exceptions it was raised from or while handling, each once."""
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def interrupted(err: BaseException) -> bool:
    """Whether `err` is a Ctrl-C or SIGTERM, or an error raised because one came: a
    KeyboardInterrupt inside SQLAlchemy's session can surface as the storage's own error
    (`StorageInternalError` from "owning Session been closed?"), which is no fault of the
    trial's and must stop the command all the same."""
    return any(isinstance(e, KeyboardInterrupt) for e in _chain(err))


def release_frames(err: BaseException) -> None:
    """Free what the frames an interrupt unwound still hold, before writing to the study.

    A KeyboardInterrupt raised inside a database call can leave that call's connection
    checked out with its transaction open (on SQLite: the database's write lock), held
    only by the traceback's frames until the garbage collector happens to run. The writes
    that give the trial back would wait for this process's own lock, 60 s (the busy
    timeout), while the trial's heartbeat waits too. Clearing the frames' variables returns
    the connection to its pool, which rolls the transaction back; every exception of the
    chain, since an interrupt re-raised as another error keeps its frames in the first."""
    for e in _chain(err):
        traceback.clear_frames(e.__traceback__)


@contextlib.contextmanager
def no_interrupts() -> Iterator[None]:
    """Hold SIGINT/SIGTERM during a few database writes (main thread only): one that comes
    meanwhile is raised as KeyboardInterrupt once they are done. Held, never dropped: a
    `--gpus` worker gets one SIGINT from its parent, and ignoring it would leave the worker
    running and its parent waiting."""
    hold = HeldInterrupts()
    try:
        yield
    finally:
        hold.release()


class HeldInterrupts:
    """SIGINT and SIGTERM noted instead of raised (main thread only) until `release`, which
    raises the one that came meanwhile as KeyboardInterrupt."""

    def __init__(self) -> None:
        self.pending = False
        self.old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            self.old = {sig: signal.signal(sig, self._note)
                        for sig in (signal.SIGINT, signal.SIGTERM)}

    def _note(self, signum: int, frame: object) -> None:
        self.pending = True

    def release(self) -> None:
        for sig, handler in self.old.items():
            signal.signal(sig, handler)
        self.old = {}
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt
