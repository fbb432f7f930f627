"""Is a running engine still whole? Which of its processes died?

vLLM serves from several processes (the API server or its supervisor, `VLLM::EngineCore`,
its `VLLM::Worker`s); any one can die alone and the rest does not follow at once, so
waiting for the launched command or an HTTP timeout would turn a crash into a stall.
`ProcessWatch` remembers a running engine's processes (by pid and start time, which a recycled
pid cannot match) and says which of them are gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psutil

# vLLM titles the processes it starts `VLLM::<Role>...`; only those and the launched
# command are the engine. Helpers such as multiprocessing's resource tracker come and go.
TITLE = "VLLM::"


@dataclass(frozen=True)
class Member:
    """One process of the engine: its pid and what it is called (`VLLM::EngineCore`)."""

    pid: int
    name: str

    def __str__(self) -> str:
        return f"{self.name} (pid {self.pid})"


class ProcessWatch:
    """The engine's processes that must all live while it serves."""

    def __init__(self) -> None:
        self._procs: dict[int, tuple[Member, psutil.Process]] = {}

    @property
    def members(self) -> list[Member]:
        return [m for m, _ in self._procs.values()]

    def add(self, proc: psutil.Process, name: str) -> Member | None:
        """Watch `proc` under `name`; None (not watched) when it is already gone."""
        if proc.pid not in self._procs and running(proc):
            self._procs[proc.pid] = (Member(proc.pid, name), proc)
        found = self._procs.get(proc.pid)
        return found[0] if found else None

    def add_titled(self, procs: Iterable[psutil.Process]) -> None:
        """Watch those of `procs` that vLLM titled as its own (`VLLM::...`)."""
        for proc in procs:
            title = _title(proc)
            if title.startswith(TITLE):
                self.add(proc, title.split()[0])

    def gone(self) -> list[Member]:
        """The watched processes that have exited (zombies included: they are dead)."""
        return [m for m, p in self._procs.values() if not running(p)]


def running(proc: psutil.Process) -> bool:
    """True while `proc` (the same process, not a recycled pid) lives and is no zombie."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _title(proc: psutil.Process) -> str:
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return ""
    return cmdline[0] if cmdline else ""
