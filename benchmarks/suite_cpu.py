"""Benchmark: where the test suite's CPU goes, and what one engine's start-up costs.

    .venv/bin/python benchmarks/suite_cpu.py [--interval 0.5] [-- COMMAND ...]
    .venv/bin/python benchmarks/suite_cpu.py --startup [--repeats 2]

The first form runs COMMAND (default: the first phase of `make test`, every test but the
`alone` ones on two pytest-xdist workers) and samples every process of the machine each
`--interval` seconds. It prints the wall time, how busy the machine's cores were over that
time (from /proc/stat: a phase at ~100 % is bound by the CPU, and more workers cannot make
it shorter), and the CPU seconds of the processes that started during the run, by what they
are: the three processes of each vLLM engine (API server, engine core, model worker, told
apart as `autotune.measure.probes.role` tells them apart), autotune's own CLI in child
processes, pytest, Chromium, PostgreSQL, the rest. It counts the engines started (their API
servers) and their CPU per start.

`--startup` starts the tiny model's engine (`--enforce-eager`, as the tests do) `--repeats`
times, one after another, and prints each engine process's CPU seconds when it is ready and
after 20 s idle: the cost of a start apart from any work. On the CPU build each of the three
processes is a fresh interpreter importing vLLM (the CPU platform forces `spawn`).

A process that exits between two samples loses at most its last interval's CPU, so the
figures are a little low; the machine's busy total is exact. Run it on an otherwise idle
machine.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from autotune import tinymodel
from autotune.engine.server import Server
from autotune.measure import probes

# The first phase of `make test` (Makefile, target `test`).
PARALLEL_PHASE = [sys.executable, "-m", "pytest", "tests", "-m", "not alone", "-n", "2",
                  "--dist", "loadgroup", "-q", "-p", "no:cacheprovider"]
ENGINE = {probes.LAUNCHER: "vLLM API server", probes.API_SERVER: "vLLM API server",
          probes.ENGINE_CORE: "vLLM engine core", probes.WORKER: "vLLM model worker"}


@dataclass
class Seen:
    """One process as last sampled: its kind and its CPU seconds so far."""

    kind: str
    cpu_s: float
    launcher: bool = False


def kind_of(cmdline: list[str]) -> tuple[str, bool]:
    """What a process is, for the table, and whether it is an engine's launched process."""
    role = probes.role(cmdline)
    if role in ENGINE:
        return ENGINE[role], role == probes.LAUNCHER
    text = " ".join(cmdline)
    if "autotune.engine._reaper" in text:
        return "autotune reaper (one per engine)", False
    if "-m autotune" in text or "/autotune " in text:
        return "autotune CLI (child processes)", False
    if "pytest" in text or "xdist" in text or "execnet" in text:
        return "pytest and its workers", False
    if "chrom" in text:
        return "Chromium", False
    if "postgres" in text:
        return "PostgreSQL", False
    return "other", False


def sample(seen: dict[tuple[int, float], Seen], before: set[tuple[int, float]]) -> None:
    """Update `seen` with every process that started after `before` was taken."""
    for proc in psutil.process_iter(["cmdline", "create_time", "cpu_times"]):
        key = (proc.pid, proc.info["create_time"] or 0.0)
        times = proc.info["cpu_times"]
        if key in before or times is None:
            continue
        cpu = times.user + times.system
        kind, launcher = kind_of(proc.info["cmdline"] or [])
        known = seen.get(key)
        if known is None:
            seen[key] = Seen(kind, cpu, launcher)
            continue
        known.cpu_s = cpu
        if kind.startswith("vLLM") or known.kind == "other":  # a title set after the start
            known.kind, known.launcher = kind, known.launcher or launcher


def busy_idle() -> tuple[float, float]:
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return sum(t) - idle, idle


def run_command(command: list[str], interval: float) -> int:
    before = {(p.pid, p.info["create_time"] or 0.0)
              for p in psutil.process_iter(["create_time"])}
    seen: dict[tuple[int, float], Seen] = {}
    busy0, idle0 = busy_idle()
    t0 = time.monotonic()
    child = subprocess.Popen(command)
    while child.poll() is None:
        sample(seen, before)
        time.sleep(interval)
    sample(seen, before)
    wall = time.monotonic() - t0
    busy, idle = (a - b for a, b in zip(busy_idle(), (busy0, idle0), strict=True))
    cores = psutil.cpu_count() or 1
    by: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for s in seen.values():
        by[s.kind] += s.cpu_s
        count[s.kind] += 1
    starts = sum(s.launcher for s in seen.values())
    total = sum(by.values())
    print(f"command exit {child.returncode}, wall {wall:.0f} s on {cores} cores: "
          f"{busy:.0f} core-s busy, {idle:.0f} idle ({busy / (busy + idle):.1%} busy)")
    print(f"{'CPU s':>8} {'share':>6} {'procs':>6}  kind")
    for kind, cpu in by.most_common():
        print(f"{cpu:8.0f} {cpu / total:6.1%} {count[kind]:6d}  {kind}")
    engine = sum(v for k, v in by.items() if k.startswith("vLLM"))
    if starts:
        print(f"{starts} engines started: {engine:.0f} CPU s in their processes, "
              f"{engine / starts:.0f} per engine, {engine / total:.0%} of the total")
    return child.returncode


def startup(repeats: int) -> None:
    model = str(tinymodel.build(preset="tiny").path)
    with tempfile.TemporaryDirectory() as logs:
        for n in range(repeats):
            t0 = time.monotonic()
            with Server(model, {"enforce-eager": True},
                        log_path=Path(logs) / f"engine-{n}.log") as srv:
                ready = time.monotonic() - t0
                at_ready = _cpu(srv)
                time.sleep(20)
                idle = _cpu(srv)
            print(f"start {n + 1}: ready after {ready:.1f} s, CPU s at ready "
                  f"{_fmt(at_ready)} (total {sum(at_ready.values()):.1f}); "
                  f"20 s idle later {_fmt(idle)}")


def _cpu(srv: Server) -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for proc in srv.processes():
        try:
            times = proc.cpu_times()
            kind, _ = kind_of(proc.cmdline())
        except psutil.Error:
            continue
        out[kind.removeprefix("vLLM ")] += times.user + times.system
    return out


def _fmt(cpu: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    p.add_argument("--startup", action="store_true", help="measure one engine's start-up")
    p.add_argument("--repeats", type=int, default=2, help="engines started with --startup")
    p.add_argument("command", nargs="*", help="the command to run (after --)")
    args = p.parse_args(argv)
    if args.startup:
        startup(args.repeats)
        return 0
    return run_command(args.command or PARALLEL_PHASE, args.interval)


if __name__ == "__main__":
    sys.exit(main())
