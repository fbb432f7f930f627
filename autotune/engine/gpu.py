"""GPU facts through NVML, and nothing at all on machines without an NVIDIA GPU.

nvidia-ml-py imports everywhere; `nvmlInit` fails where there is no driver, and
then every reading is None instead of an error, so the same code runs in CI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from autotune._device import DeviceSeen

try:
    import pynvml as _nvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
    _nvml = None


@dataclass(frozen=True)
class Device:
    name: str
    memory_mib: float


def _init() -> Any | None:
    if _nvml is None:
        return None
    try:
        _nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    return _nvml


def _visible_index() -> int:
    """The first device the engine sees (CUDA_VISIBLE_DEVICES), as an NVML index."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0


def seen() -> DeviceSeen:
    """This machine's device as a record keeps it: the GPU the engine sees, else the CPU
    build."""
    found = device()
    return DeviceSeen(found.name, found.memory_mib) if found else DeviceSeen("cpu")


def device(index: int | None = None) -> Device | None:
    """Name and total memory of the device, or None without a GPU."""
    nvml = _init()
    if nvml is None:
        return None
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(_visible_index() if index is None else index)
        name = nvml.nvmlDeviceGetName(handle)
        total = nvml.nvmlDeviceGetMemoryInfo(handle).total
    except Exception:
        return None
    return Device(name.decode() if isinstance(name, bytes) else str(name), total / 2**20)


class Monitor:
    """Reads used memory of one device and of given processes on it."""

    def __init__(self, index: int | None = None):
        self.nvml = _init()
        self.handle = None
        if self.nvml is not None:
            try:
                self.handle = self.nvml.nvmlDeviceGetHandleByIndex(
                    _visible_index() if index is None else index)
            except Exception:
                self.handle = None

    def memory_mib(self, pids: list[int]) -> tuple[float | None, float | None]:
        """(used on the whole device, used by `pids`) in MiB; Nones without a GPU."""
        if self.nvml is None or self.handle is None:
            return None, None
        try:
            used = self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used / 2**20
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except Exception:
            return None, None
        wanted = set(pids)
        mine = sum((p.usedGpuMemory or 0) for p in procs if p.pid in wanted) / 2**20
        return used, mine if wanted else None

    def used_mib(self) -> float | None:
        return self.memory_mib([])[0]

    def utilization(self) -> float | None:
        """Percent of the last sample period in which a kernel ran (NVML's GPU utilisation)."""
        if self.nvml is None or self.handle is None:
            return None
        try:
            return float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        except Exception:
            return None
