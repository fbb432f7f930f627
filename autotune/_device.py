"""The device a trial's engine ran on, as its record keeps it (`engine.gpu.seen` reads it
off this machine)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.stored import Stored


@dataclass(frozen=True)
class DeviceSeen(Stored):
    """The GPU's name and memory, `cpu` on the CPU build; empty where nothing ran (a field
    left unset is not stored, so `{}` and `{"name": "cpu"}` read back as they were)."""

    name: str | None = None
    memory_mib: float | None = None
    SPARSE = True
