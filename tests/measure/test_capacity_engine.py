"""Capacity at SLO on the real CPU engine: sustained steps judged on their steady window.

The SLOs are set from the engine's own unloaded latency, measured first: a fixed 800 ms
E2EL p95 held 20-25 req/s on one CI machine, and on a slower one (the same tiny model
taking ~800 ms for a lone 128-token reply) no rate could meet it and the search had nothing
to report. Three times the unloaded p95 asks the same of any machine: batching is allowed
to slow each reply, queueing is not. The engine and the client share the cores: when the
client falls behind (event-loop lag of seconds, seen at ~100 req/s with 32-token replies
and now and then at overload), its steps say so, and the comparisons below skip rather than
compare measurements autotune itself calls invalid.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from autotune.engine import cpuplace
from autotune.engine.server import Server
from autotune.measure import _stepverdict as stepverdict
from autotune.measure import (
    bench,
    capacityrecord,
    capacitytext,
    searchplan,
    searchresult,
    serversearch,
)
from autotune.measure.bench import Load
from autotune.measure.loadgen import Target
from autotune.traffic import CapacitySpec, WorkloadSpec

pytestmark = [pytest.mark.engine, pytest.mark.alone,
              pytest.mark.usefixtures("no_leftover_engine")]

CAP = CapacitySpec(tolerance=0.1, max_steps=7, repeats=2, min_step_s=3, max_step_s=8)
# A fresh engine's first requests are slow: without a warm-up the first search on an engine
# came out at 14.1 req/s against 24 for the next one (CI, 2 cores).
# 128-token replies keep the tiny model's capacity near 20-25 req/s: with 32-token replies
# it reached ~100 req/s, where the client, sharing two cores with the engine, fell behind
# (event-loop lag up to 1.4 s) and the steps said more about the client than the engine.
SPEC = WorkloadSpec(kind="random", num_requests=32, input_len=64, output_len=128,
                    warmup_requests=8, mode="capacity", capacity=CAP)
# The loose SLO allows this many times the unloaded E2EL p95; the strict one half of that.
LOOSE_FACTOR = 3.0


@pytest.fixture(scope="module")
def engines(tiny_model, tmp_path_factory) -> Iterator[dict[int, Server]]:
    """This module's two engines by max-num-seqs (8 and 1), started at once with a core
    each for their model workers, as `tune --gpus` places engines side by side: about 20 s
    for both instead of 20 s each. Neither is measured while the other starts."""
    servers = {n: Server(str(tiny_model), {"enforce-eager": True, "max-num-seqs": n},
                         env=cpuplace.placement(slot, 2),
                         log_path=tmp_path_factory.mktemp(f"cap{n}") / "engine.log")
               for slot, n in enumerate((8, 1))}
    with contextlib.ExitStack() as stack:
        for srv in servers.values():
            stack.callback(srv.stop)
        with ThreadPoolExecutor(max_workers=2) as pool:
            for started in [pool.submit(srv.start) for srv in servers.values()]:
                started.result()
        yield servers


@pytest.fixture(scope="module")
def eight(engines) -> Server:
    return engines[8]


def _search(srv: Server, model, slos, anchor: searchplan.Anchor | None = None) -> dict:
    load = Load(Target(srv.url, str(model), srv.headers), SPEC, str(model),
                pids=lambda: [p.pid for p in srv.processes()])
    return serversearch.search(load, slos, anchor).capacity.as_dict()  # as stored


def _unloaded(srv: Server, model) -> float:
    """The slowest of two E2EL p95s of single replies sent one at a time (after a warm-up):
    what one reply costs on this machine when nothing queues or batches with it."""
    spec = SPEC.model_copy(update={"mode": "fixed", "max_concurrency": 1,
                                   "num_requests": 6, "warmup_requests": 4})
    target = Target(srv.url, str(model), srv.headers)
    return max(bench.benchmark(Load(target, spec, str(model))).latencies["p95_e2el_ms"]
               for _ in range(2))


@pytest.fixture(scope="module")
def unloaded_ms(eight, tiny_model) -> float:
    return _unloaded(eight, tiny_model)


@pytest.fixture(scope="module")
def loose_slos(unloaded_ms) -> dict[str, float]:
    return {"e2el_p95_ms": round(LOOSE_FACTOR * unloaded_ms, 1)}


@pytest.fixture(scope="module")
def loose(eight, tiny_model, loose_slos):
    return _search(eight, tiny_model, loose_slos)


def _rec(cap: dict) -> capacityrecord.CapacityRecord:
    """The typed record of a search's capacity dict, for capacity's helpers."""
    return capacityrecord.CapacityRecord.from_dict(cap)


def _client_bound(cap: dict) -> bool:
    return any(s["bottleneck"].get("kind") == "client" for s in cap["steps"])


def _moved(cap: dict) -> bool:
    """A rate whose SLOs held in one step and not in another of the same search: the
    search could not repeat its own result, and its record says so."""
    return bool(capacityrecord.unrepeated(_rec(cap)))


def _skip_if_invalid(ok: bool, *caps: dict) -> None:
    """Skip when a check fails on searches whose own steps say the client fell behind
    (on two cores shared with the engine it can stall for seconds): autotune marks such
    steps invalid, and comparing invalid measurements tests nothing. Likewise a search
    that could not repeat its own result (`capacityrecord.unrepeated`; the one seen, on
    a pinned core beside the other worker's engine start-ups: a rate that had passed
    failed its repeat, and so did every rate below it, taking 4.5-6.3 of 6.5-9.3 req/s
    offered a minute after the same engine held 9.9 req/s)."""
    if ok:
        return
    if any(_client_bound(c) for c in caps):
        pytest.skip("the client fell behind on this shared 2-core host and said so: the "
                    "steps are not valid measurements (autotune/measure/bottleneck.py)")
    if any(_moved(c) for c in caps):
        pytest.skip("a search on this shared host could not repeat its own result, and said "
                    "so: " + "; ".join(capacitytext.describe(_rec(c)) for c in caps))


def _skip_if_slowed(srv: Server, model, unloaded_ms: float) -> None:
    """Skip when one unloaded reply now takes half as long again as it did before the
    module's searches: the machine, not the engine or autotune, changed between the
    measurements compared (on a 2-core CI host, pinning each worker to a core of its own
    did not keep the other worker's engines from slowing this one)."""
    again = _unloaded(srv, model)
    if again > 1.5 * unloaded_ms:
        pytest.skip(f"the machine slowed between the measurements compared: one unloaded "
                    f"reply took {again:.0f} ms against {unloaded_ms:.0f} ms before")


def test_search_holds_its_slos_within_the_step_budget(loose, loose_slos, eight, tiny_model,
                                                      unloaded_ms):
    _skip_if_invalid(bool(loose["low"] and loose["high"]), loose)
    if not loose["low"]:
        # No rate held an SLO of three unloaded replies: either the search is wrong or the
        # machine slowed under it (seen in the `alone` phase of a slow CI run, the other
        # pinned worker compiling engines: every step host-CPU bound, a step offered 7.4
        # req/s achieving 4.4). The engine's unloaded latency, measured again, tells which.
        _skip_if_slowed(eight, tiny_model, unloaded_ms)
    assert loose["low"] and loose["high"], [(x["kind"], x["rate"], x["violations"],
                                             x["bottleneck"]["kind"]) for x in loose["steps"]]
    assert len(loose["steps"]) <= CAP.max_steps + loose["remeasured"]
    assert loose["remeasured"] <= CAP.extra_steps
    assert loose["steps"][0]["kind"] == "burst" and loose["steps"][0]["rate"] is None
    assert loose["steps"][1]["kind"] == "ceiling"  # the burst's rate, sustained
    at = [s for s in loose["steps"] if s["rate"] == loose["rate"] and s["invalid"] is None]
    assert at and all(s["passed"] for s in at)  # the SLOs held at the reported rate
    # the capacity is what those steps achieved in their steady windows
    assert loose["request_throughput"] == pytest.approx(
        sum(s["window_achieved_rps"] for s in at) / len(at)) == loose["low"]
    assert all(s["figures"]["e2el_p95_ms"] <= loose_slos["e2el_p95_ms"] for s in at)
    assert loose["output_throughput"] == pytest.approx(loose["request_throughput"] * 128)
    assert 0 < loose["uncertainty"] < 1


def _bench_search(srv: Server, slos: dict[str, float], out) -> dict:
    """`autotune bench --capacity` against the running engine, as a user runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "bench", "--url", srv.url, "--api-key",
         srv.headers["Authorization"].split()[-1], "--capacity",
         "--slo", f"e2el_p95_ms={slos['e2el_p95_ms']}", "--num-requests", "32",
         "--input-len", "64", "--output-len", "128", "--tolerance", "0.1", "--max-steps", "7",
         "--min-step-s", "3", "--warmup", "8", "-o", str(out)],
        capture_output=True, text=True, timeout=600, env={"COLUMNS": "160", "PATH": ""},
        check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "capacity at SLO:" in proc.stdout and "capacity search steps" in proc.stdout
    again = json.loads(out.read_text())["capacity"]
    assert len(again["steps"]) <= 7 + again["remeasured"]
    assert all("figures" in s for s in again["steps"])
    return again


def _agree(a: dict, b: dict) -> bool:
    """Two searches agree within their stated uncertainty (bracket and repeat spread)
    widened by the search's tolerance."""
    (alo, ahi), (blo, bhi) = capacityrecord.interval(_rec(a)), capacityrecord.interval(_rec(b))
    tol = CAP.tolerance
    return alo * (1 - tol) <= bhi * (1 + tol) and blo * (1 - tol) <= ahi * (1 + tol)


def test_bench_capacity_agrees_with_a_second_search(eight, tiny_model, loose, loose_slos,
                                                    unloaded_ms, tmp_path):
    """The CLI's search against the library's. The module's search ran minutes earlier; on
    the CI host, beside the other pinned worker, one such pair read 5.52 and 2.85 req/s
    (stop 65). So a disagreement is checked against a library search made right after the
    CLI's, under the same conditions, before it counts."""
    again = _bench_search(eight, loose_slos, tmp_path / "cap.json")
    if not _agree(loose, again) and _moved(again):
        # It could not repeat its own result: search once more (~40 s) before calling the
        # comparison void.
        again = _bench_search(eight, loose_slos, tmp_path / "cap-2.json")
    reference = loose
    if not _agree(reference, again):
        reference = _search(eight, tiny_model, loose_slos)
    _skip_if_invalid(_agree(reference, again), reference, again)
    if not _agree(reference, again):
        _skip_if_slowed(eight, tiny_model, unloaded_ms)
    assert _agree(reference, again), (capacitytext.describe(_rec(reference)),
                                      capacitytext.describe(_rec(again)))


def test_a_stricter_slo_gives_no_higher_capacity(eight, tiny_model, loose, loose_slos):
    """Half the E2EL allowance: on two shared cores the two searches are noisy, so the
    strict one must not come out above the loose one beyond their stated uncertainty."""
    strict = _search(eight, tiny_model, {"e2el_p95_ms": loose_slos["e2el_p95_ms"] / 2})
    assert len(strict["steps"]) <= CAP.max_steps + strict["remeasured"]
    lo, _ = capacityrecord.interval(_rec(strict))
    _, hi = capacityrecord.interval(_rec(loose))
    _skip_if_invalid(lo <= hi * (1 + CAP.tolerance), strict, loose)
    assert lo <= hi * (1 + CAP.tolerance), (capacitytext.describe(_rec(strict)),
                                            capacitytext.describe(_rec(loose)))


@pytest.fixture(scope="module")
def one_seq(engines) -> Server:
    return engines[1]


def test_one_sequence_at_a_time_stops_below_the_best(one_seq, tiny_model, loose, loose_slos):
    """No burst-against-burst comparison with `eight`: on one CI machine both bursts drained
    4.2-4.3 req/s (one sequence 4.27, eight 4.23), so whatever limited them there was not
    the batch; what a study needs is that a trial below the best's bound stops early."""
    # As a study passes the best trial's lower bound; at least 50 req/s, far above what one
    # sequence at a time drains here (its 32-request burst: ~5-8 req/s), so that a noisy
    # `loose` cannot make the early stop depend on luck.
    floor = max(capacityrecord.interval(_rec(loose))[0], 50.0)
    one = _search(one_seq, tiny_model, loose_slos, searchplan.Anchor(floor=floor))
    # Its burst misses the SLO and peaks below the floor: the search stops there.
    assert one["stopped"] == searchplan.BELOW_BEST and len(one["steps"]) == 1
    assert one["max_request_throughput"] < floor
    # Without the burst's verdict, the trial's first sustained step, offered at the best's
    # rate as the study offers it, fails: the trial is pruned there, with no bisection below
    # it (`trial._measure`, what `run_trial` runs on its engine). The best here drains three
    # times what this engine drains at full load: at the 50 req/s above, the step's 150
    # requests took one sequence at a time 37 s to drain (CI), for the same verdict.
    from autotune.config import Scenario
    from autotune.tuning import trial

    best = 3 * one["max_request_throughput"]
    scenario = Scenario.model_validate({"model": {"path": str(tiny_model)},
                                        "objective": {"slos": loose_slos}, "workload": SPEC})
    summary = trial._measure(one_seq, scenario, SPEC, str(tiny_model), None, None,
                             searchplan.Anchor(floor=best, start=best, burst=False))
    assert summary.stopped_after_probe == searchplan.BELOW_BEST
    assert [(s.kind, s.rate, s.passed) for s in summary.capacity.steps] == \
        [("ceiling", best, False)]


def test_a_search_with_no_passing_rate_prunes_the_trial(eight, tiny_model):
    """A 1-ms TTFT no step meets, two steps allowed: the search ends with no capacity, and
    the trial is pruned with the reason, never left complete on its gentlest step's figures
    (which alone can meet the SLOs when the step fell behind its arrivals)."""
    from autotune import _reasons as reasons
    from autotune.config import Scenario
    from autotune.tuning import trial

    spec = SPEC.model_copy(update={"capacity": CAP.model_copy(update={"max_steps": 2})})
    scenario = Scenario.model_validate({"model": {"path": str(tiny_model)},
                                        "objective": {"slos": {"ttft_p95_ms": 1.0}},
                                        "workload": spec})
    summary = trial._measure(eight, scenario, spec, str(tiny_model), None, None,
                             searchplan.Anchor())
    found = summary.capacity
    assert not found.low and not any(s.passed for s in found.steps)
    assert summary.stopped_after_probe == (found.stopped or reasons.NO_PASSING_RATE)
    assert summary.stopped_after_probe in reasons.REASONS


def _step(srv: Server, model, rate: float, slos, seconds: float = 5.0) -> searchresult.Step:
    """One sustained step at `rate` of 128-token replies, judged as the search judges it."""
    cap = CapacitySpec(min_step_s=seconds, max_step_s=seconds)
    spec = SPEC.model_copy(update={"request_rate": rate, "num_requests": 4,
                                   "warmup_requests": 0, "capacity": cap})
    spec = spec.model_copy(update={"num_requests": max(4, round(rate * seconds))})
    asyncio.run(serversearch.wait_idle(srv.url, 60))
    sent = bench.step(Load(Target(srv.url, str(model), srv.headers), spec, str(model),
                           pids=lambda: [p.pid for p in srv.processes()]),
                      probe_interval=0.25)
    return stepverdict.judge("bisect", rate, 1, sent, cap, slos)


def test_a_growing_backlog_fails_a_step_whose_percentiles_pass(one_seq, tiny_model,
                                                              unloaded_ms):
    """One sequence at a time carries about one reply per unloaded E2EL (1.3-3 req/s of
    128-token replies on the machines seen): at 12 req/s the queue (in flight, less the
    one running) grows all through the step, yet a lax E2EL p95 of 60 s still holds. The
    calm step asks for at most 40 % of what one sequence carries."""
    lax = {"e2el_p95_ms": 60_000.0}
    calm = _step(one_seq, tiny_model, min(1.0, 0.4 * 1000 / unloaded_ms), lax)
    # its window holds too few arrivals (5 s at 1 req/s) to tell one request left waiting
    # from a backlog: no verdict on keeping pace, and nothing else broke
    assert not calm.violations and calm.invalid and not calm.passed, calm.violations
    assert not calm.backlog or calm.backlog.growth < 4
    # At overload on 2 cores the client's event loop usually lags past the 20-ms mark, yet
    # sends enough to build the backlog. Once (a 2.1-s p99 lag, 6.6 of 12 req/s sent) it
    # could not, and the step passed while saying it was no measurement: such a step is
    # taken again.
    for _ in range(3):
        over = _step(one_seq, tiny_model, 12.0, lax)
        if not over.passed or over.bottleneck.valid:
            break
    else:
        pytest.skip(f"the client could not drive 12 req/s three times: {over.bottleneck}")
    assert over.figures["e2el_p95_ms"] < 60_000  # the percentile alone would pass
    assert not over.passed
    assert [v for v in over.violations if v.startswith("backlog +")], over.violations
    assert over.backlog.share > 0.2 and over.whole["e2el_p95_ms"] > 0


def test_every_step_names_what_limited_it(loose):
    """Per-process CPU of the API server, the model worker and the client, and how busy
    the cores they may use were, is sampled on the CPU engine, and each step says what
    limited it."""
    kinds = {"client", "kv_cache", "front_end", "engine_core", "gpu", "worker", "host_cpu",
             "none"}
    for step in loose["steps"]:
        assert step["bottleneck"]["kind"] in kinds and step["bottleneck"]["text"]
    assert loose["bottleneck"]["kind"] in kinds
    probes = [s for s in loose["steps"] if s["kind"] != "burst"]
    assert probes
    figures = capacityrecord.limiting_probes(_rec(loose))
    assert figures["api_server_cpu"] is not None and figures["client_cpu"] is not None
    assert (figures["worker_cpu"] or 0) + (figures["engine_core_cpu"] or 0) > 0
    assert figures["cores"] >= 1 and figures["cores_busy"] is not None
    assert figures["gpu_util_mean"] is None  # no GPU here
