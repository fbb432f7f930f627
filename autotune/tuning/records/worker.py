"""The process that ran a trial (`Worker`), stored with the trial, and whether it is gone.

The module that registers workers and watches their heartbeats
(`autotune.tuning.sharing.heartbeat`) reads the trial record itself, so the worker is defined
here, beside the record, not by it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import psutil

from autotune.stored import Stored


@dataclass(frozen=True)
class Worker(Stored):
    """One process working on a study (`autotune.tuning.sharing.heartbeat`); stored with
    each trial it runs. A key missing from a stored worker reads as empty (no such
    process)."""

    id: str = ""
    host: str = ""
    pid: int = 0
    started: float = 0.0  # the process's start time: a recycled pid is another process
    gpu: str | None = None

    @classmethod
    def here(cls, worker_id: str | None = None, gpu: str | None = None) -> Worker:
        host, pid = socket.gethostname(), os.getpid()
        return cls(worker_id or f"{host}-{pid}", host, pid, psutil.Process(pid).create_time(),
                   gpu)

    def sees_gone(self, other: Worker | None) -> bool:
        """Whether the worker `other` ran on this host and its process is gone (on another
        host only its heartbeat can tell)."""
        if other is None or other.host != self.host or not other.pid:
            return False
        try:
            proc = psutil.Process(other.pid)
            return proc.status() == psutil.STATUS_ZOMBIE \
                or abs(proc.create_time() - other.started) > 1.0
        except psutil.NoSuchProcess:
            return True
        except (psutil.Error, TypeError, ValueError):
            return False
