"""Engines side by side on the CPU build: a share of the cores for each model worker.

vLLM's CPU build binds its model worker's OpenMP threads as if the engine were alone on the
host, so engines side by side (`tune`/`validate --gpus 0,1`) would all compute on the same
cores (benchmarks/README.md, "side_by_side.py"). `placement(slot, slots)` gives each a
binding of its own: the physical cores this process may use, split into `slots` equal runs,
less the last core of a run of more than one (left for the engine core and API server).
More engines than cores share them in turn. A binding the user chose (environment or
`engine.env`) is kept, and a GPU build gets nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from autotune.engine import info

VAR = "VLLM_CPU_OMP_THREADS_BIND"
SYSFS = Path("/sys/devices/system/cpu")


def physical_cores(cpus: Iterable[int] | None = None, sysfs: Path = SYSFS) -> list[int]:
    """One logical CPU per physical core among `cpus` (default: the ones this process may
    run on), the highest-numbered sibling as vLLM's `auto` picks it on x86, in order.
    Where the topology cannot be read every logical CPU counts as a core."""
    chosen: dict[tuple[str, str] | int, int] = {}
    for cpu in sorted(os.sched_getaffinity(0) if cpus is None else cpus):
        topo = sysfs / f"cpu{cpu}" / "topology"
        try:
            key: tuple[str, str] | int = (
                (topo / "physical_package_id").read_text().strip(),
                (topo / "core_id").read_text().strip())
        except OSError:
            key = cpu
        chosen[key] = max(cpu, chosen.get(key, cpu))
    return sorted(chosen.values())


def bind(slot: int, slots: int, cores: Sequence[int]) -> str:
    """The `VLLM_CPU_OMP_THREADS_BIND` value of engine `slot` (from 0) of `slots` side by
    side on `cores` (physical cores, in order): a comma-separated list of CPU ids."""
    if not 0 <= slot < slots or not cores:
        raise ValueError(f"slot {slot} of {slots} on cores {list(cores)}")
    share = len(cores) // slots
    if share == 0:  # more engines than cores: one core each, in turn
        mine = [cores[slot % len(cores)]]
    else:
        mine = list(cores[slot * share:(slot + 1) * share])
        if len(mine) > 1:
            mine = mine[:-1]  # for this engine's engine core and API server
    return ",".join(str(c) for c in mine)


def placement(slot: int, slots: int, env: Mapping[str, str] | None = None,
              cores: Sequence[int] | None = None) -> dict[str, str]:
    """Environment for engine `slot` of `slots` side by side: `{VAR: ...}` on the CPU build
    when neither `env` (the scenario's engine environment) nor this process's environment
    sets a binding; empty otherwise, and for a single engine."""
    if slots < 2 or VAR in (env or {}) or VAR in os.environ:
        return {}
    if info.installed()[0] != "vllm-cpu":
        return {}
    return {VAR: bind(slot, slots, physical_cores() if cores is None else cores)}
