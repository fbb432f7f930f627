"""Ctrl-C and SIGTERM while the study writes: held, never dropped, and raised as
KeyboardInterrupt once the writes are done, so that a trial is never left RUNNING or its
record half-written (`autotune.tuning.study` holds them around each trial's ask and tell).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


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
