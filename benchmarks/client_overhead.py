"""How much the load generator itself costs: one client process against a fast fake server.

The fake server (tests/fakeserver.py) runs in its own process, so its CPU time is not charged
to the client, and streams `--events` content events per request as fast as it can, each
carrying the server's `time.time()` at sending. `autotune.measure.loadgen.send_workload` drives
it at several concurrencies; for each the table gives requests/s, content events/s, the
client's CPU seconds per second of run and per event, and the delay between the server sending
an event and the client timestamping it (client receive time, a `perf_counter` mapped onto
`time.time()`, minus the server's stamp): median and p99, in ms. Growing delays mean the
client falls behind.

    .venv/bin/python benchmarks/client_overhead.py [--events 64] [--concurrency 1 16 64 256]

Client and server share the machine's cores: on a small machine the figures are a floor for
what the client can sustain, not its ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil

from autotune.measure import loadgen
from autotune.measure.metrics import RequestResult
from autotune.measure.workloads import Session, Turn
from autotune.traffic import WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent


def delays_ms(results: list[RequestResult], wall_minus_perf: float) -> list[float]:
    """Per content event: client receive time minus the server's send stamp, in ms."""
    out: list[float] = []
    for r in results:
        if not r.success:
            continue
        stamps = [float(x) for x in r.generated_text.split()]
        received = r.start_time + r.ttft + np.concatenate(([0.0], np.cumsum(r.itl)))
        if len(stamps) != len(received):
            raise RuntimeError(f"{len(stamps)} stamps for {len(received)} events")
        out.extend((received + wall_minus_perf - np.array(stamps)) * 1000)
    return out


def measure(url: str, concurrency: int, requests: int, events: int, cap_s: float,
            server: psutil.Process) -> dict[str, float]:
    spec = WorkloadSpec(num_requests=requests, max_concurrency=concurrency, timeout_s=60,
                        max_duration_s=cap_s)
    sessions = [Session([Turn("go", events)]) for _ in range(requests)]
    wall_minus_perf = time.time() - time.perf_counter()
    cpu0, srv0 = time.process_time(), sum(server.cpu_times()[:2])
    run = asyncio.run(loadgen.send_workload(loadgen.Target(url, "fake", {}), spec, sessions))
    cpu, srv = time.process_time() - cpu0, sum(server.cpu_times()[:2]) - srv0
    ok = [r for r in run.results if r.success]
    n_events = sum(1 + len(r.itl) for r in ok)
    d = delays_ms(ok, wall_minus_perf)
    return {
        "conc": concurrency, "done": len(ok), "failed": len(run.results) - len(ok),
        "secs": run.duration_s, "req_s": len(ok) / run.duration_s,
        "ev_s": n_events / run.duration_s, "cli_cpu": cpu / run.duration_s,
        "us_ev": cpu / max(n_events, 1) * 1e6, "srv_cpu": srv / run.duration_s,
        "p50": float(np.median(d)) if d else float("nan"),
        "p99": float(np.percentile(d, 99)) if d else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=64, help="content events per request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--requests", type=int, default=0,
                        help="requests per level (default: max(600, 8 x concurrency))")
    parser.add_argument("--cap", type=float, default=10.0, help="seconds per level at most")
    args = parser.parse_args()

    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fakeserver.py"), "--stamp",
         "--events", str(args.events)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("http://"):
            raise SystemExit(f"fake server did not start: {url!r}")
        proc = psutil.Process(server.pid)
        print(f"{os.cpu_count()} CPUs shared by client and server; {args.events} events/request;"
              f" cpu = CPU seconds per second of run")
        header = (f"{'conc':>5} {'done':>6} {'fail':>4} {'secs':>5} {'req/s':>7} {'events/s':>9}"
                  f" {'cli cpu':>7} {'us/event':>8} {'srv cpu':>7} {'p50 ms':>7} {'p99 ms':>7}")
        print(header)
        measure(url, 4, 40, args.events, args.cap, proc)  # warm-up: imports, first connections
        for conc in args.concurrency:
            m = measure(url, conc, args.requests or max(600, 8 * conc), args.events, args.cap,
                        proc)
            print(f"{m['conc']:>5} {m['done']:>6} {m['failed']:>4} {m['secs']:>5.1f}"
                  f" {m['req_s']:>7.1f} {m['ev_s']:>9.0f} {m['cli_cpu']:>7.2f} {m['us_ev']:>8.1f}"
                  f" {m['srv_cpu']:>7.2f} {m['p50']:>7.2f} {m['p99']:>7.2f}", flush=True)
    finally:
        if server.stdin is not None:
            server.stdin.close()  # the server exits when its stdin closes
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
