"""Benchmark: does queuing relief moves find a good configuration in fewer trials?

The real study loop (`autotune.tuning.study.loop`: Optuna's sampler, the relief moves, the
ranking with its tie rule, a SQLite study) runs against response surfaces instead of an
engine, so thousands of studies take minutes. A surface is a roofline: each resource (the
API-server front end, the engine core, the GPU, the KV cache, the sequence cap) carries
some request rate given the flags, the capacity is the smallest; a trial records a passing
step at its capacity and a failing one 10 % above, each with every resource's use, and the
real attribution reads the knee between them by contrast (`autotune.measure.searchresult.knee`),
as a capacity search records it; measured capacities get 4 % noise (lognormal, the repeat
spread the H200 studies saw).

Surfaces, and the measurements their constants reproduce:

- `chat-frontend`: the H200 chat study's space (`qwen3-4b-h200-sustained.yaml`, 32,400
  points). One API server carries 62 req/s, the GPU 92, as an independent H200 check found
  (61.3 and, with four API servers, 89.8 with the GPU 94-99 % busy; not a committed study:
  the committed ones found the defaults engine-core-bound, docs/results-h200.md section 10),
  the engine core 95 (78 without async scheduling);
  prefix caching off costs the GPU 38 % on its 1,024-token shared prefix.
- `kv-bound`: Qwen3-4B on a 24 GB card at 2,048 + 256 tokens a request (144 KiB of bf16
  KV per token, half with fp8, 9.5 GiB of weights and activations): the sequences the
  cache holds set the rate (6.4 s a request), a max-num-seqs above that preempts (25 %
  lost), and the GPU caps at 12 req/s. Trials report the KV cache's size in tokens, as
  the engine does at start-up.
- `gpu-bound`: the H200 long-context study, where every configuration measured lay within
  1 % of the defaults (2.34-2.36 req/s): flags move the GPU's rate by at most 3 %.
- `latency-bound`: no resource saturates and TTFT breaks first; what helps is fewer
  sequences at once (less queueing in each step), which no relief entry names, while the
  relief for a TTFT-bound trial (larger prefill chunks) barely matters. Guidance should
  lose here: half its trials go to a move that does not pay.

- `h200-replay`: the measured H200 study `studies/h200-guided-check.db` replayed. A
  configuration that study measured to the end (vLLM's defaults, the engine-core relief
  move, #5, the winner #6 and the winner's two ablations that tied) returns its measured
  record as it is: its steps, the probes' figures at each and its capacity interval, read by
  today's attribution. Every other point of its 32,400 comes from a roofline fitted to the
  study's steps: one API server carries 52 req/s (the defaults passed 50.1 and failed 54.7
  with the API server at 80 -> 88 %), the GPU 88 (#6's ablations held 86.6, failed 91.7)
  and 0.8 of that with 2,048-token prefill chunks (#5: 67.7), prefix caching off leaves 35 %
  (three trials failed their bursts at 31.4-34.5), 64 sequences carry 36.6 (#4's burst
  failed at 38.9); the engine core reads 94-100 % of a core at every load, as measured, so
  a threshold would name it at every knee.

The other surfaces are models, not measurements: they say how the search behaves on
landscapes shaped like the measured ones, not what a GPU will do. For each surface and
method the benchmark reports trials until the study's pick (the ranking's best, ties to
fewest overrides) is within 5 % of the surface's best point, over many seeds: the median
with a bootstrap 95 % interval, the share of studies that got there within the budget (the
others count as budget + 1), and the paired difference against TPE alone. Run:

    .venv/bin/python benchmarks/relief.py [--seeds 40] [--budget 20] [--surface NAME]

The replay says how the methods rank on one measured landscape (one model, workload, GPU
and vLLM version), with the attribution reading real steps where they exist; it cannot
say what a configuration nobody measured would do (the roofline stands in), nor give a
measured configuration the run-to-run spread it would show if run again (it returns the
one record it has). About 10 minutes for the five surfaces at 40 seeds on 2 cores.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.config import Scenario  # noqa: E402
from autotune.measure import bottleneck as bn  # noqa: E402
from autotune.measure import searchresult  # noqa: E402
from autotune.measure.capacityrecord import CapacityRecord  # noqa: E402
from autotune.measure.measurement import Measurement  # noqa: E402
from autotune.measure.steprecord import StepRecord  # noqa: E402
from autotune.tuning import ranking  # noqa: E402
from autotune.tuning import study as study_mod  # noqa: E402
from autotune.tuning import trial as trial_mod  # noqa: E402

NOISE = 0.04  # relative spread of a measured capacity
WITHIN = 0.05
# The limiting resource's use at capacity, as a share of full use: on the H200 the API
# server read 80 % of a core at the defaults' capacity and 88 % just above it.
KNEE_USE = 0.8
ABOVE = 1.1  # the failing step's rate over the capacity (a 10 % bracket)
GUIDED = Path(__file__).resolve().parent.parent / "studies" / "h200-guided-check.db"


@dataclass(frozen=True)
class Load:
    """What each resource carries (req/s) for one configuration; None: not a limit."""

    front: float
    core: float
    gpu: float
    kv: float | None = None  # the rate the KV cache's sequences sustain
    seqs: float | None = None  # the rate max-num-seqs allows
    preempts: bool = False
    slo: float | None = None  # the rate at which latency alone breaks the SLO
    kv_tokens: float | None = None  # what the engine reports as its KV cache size
    servers: int = 1  # API-server processes (the front end's figure is per process)
    pegged_core: bool = False  # the engine core reads near a full core at every load

    def capacity(self) -> float:
        rates = [self.front, self.core, self.gpu, *(r for r in (self.kv, self.seqs, self.slo)
                                                    if r is not None)]
        return min(rates) * (0.75 if self.preempts else 1.0)

    def probes(self, rate: float) -> dict[str, float]:
        """What the probes would read at `rate`: each resource's use grows with the rate and
        reaches `KNEE_USE` of full use where it alone would break the SLO."""
        use = lambda limit: min(100.0, 100.0 * KNEE_USE * rate / limit)  # noqa: E731
        kv_full = self.preempts or (self.kv is not None and rate >= self.kv)
        core = max(95.0, use(self.core)) if self.pegged_core else use(self.core)
        return {"api_server_cpu": use(self.front), "api_servers": self.servers,
                "engine_core_cpu": core, "gpu_util_mean": use(self.gpu),
                "kv_cache_usage_max": 1.0 if kv_full else 0.5,
                "preemptions": 12.0 if self.preempts else 0.0,
                "requests_waiting_max": 3.0 if kv_full else 0.0}


@dataclass(frozen=True)
class Surface:
    name: str
    space: dict[str, list[Any]]
    defaults: dict[str, Any]  # what the engine runs for a flag left unset
    load: Callable[[Mapping[str, Any]], Load]
    slos: dict[str, float]
    broken: str  # the SLO a failing step breaks: "ttft_p95_ms" or "tpot_p95_ms"
    # Measured trials replayed as they are, by their flags over `defaults` (`key`).
    measured: Mapping[tuple[tuple[str, Any], ...], Measurement] = field(
        default_factory=dict)

    def key(self, flags: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
        return tuple(sorted({**self.defaults, **flags}.items()))

    def scenario(self, sampler: str, relief: bool, every: int, seed: int) -> Scenario:
        return Scenario.model_validate({
            "name": "bench", "model": {"tiny": "tiny"},
            "space": {k: {"choices": v} for k, v in self.space.items()},
            "workload": {"kind": "random", "mode": "capacity"},
            "objective": {"mode": "weighted", "throughput": "request_throughput",
                          "latency": "ttft_p95", "weights": {"throughput": 1.0, "latency": 0.0},
                          "slos": self.slos},
            "guardrail": {"enabled": False}, "prune": {"capacity_early_stop": False},
            "sampler": {"name": sampler, "seed": seed},
            "relief": {"enabled": relief, "every": every}})

    def truth(self, flags: Mapping[str, Any]) -> float:
        replayed = self.measured.get(self.key(flags))
        if replayed is not None:
            return float(replayed.capacity.request_throughput if replayed.capacity else 0.0)
        return self.load({**self.defaults, **flags}).capacity()

    def best(self) -> float:
        names = list(self.space)
        points = max(self.truth(dict(zip(names, values, strict=True)))
                     for values in product(*self.space.values()))
        return max([points, *(self.truth(dict(k)) for k in self.measured)])


def _chat(f: Mapping[str, Any]) -> Load:
    mbt = {2048: 0.93, 4096: 0.98, 8192: 1.0, 16384: 1.0, 32768: 0.97}[f["max-num-batched-tokens"]]
    gpu = 92.0 * mbt * (1.0 if f["enable-prefix-caching"] else 0.62) \
        * {16: 1.0, 32: 0.99, 64: 0.98}[f["block-size"]] \
        * (0.97 if f["kv-cache-dtype"] == "fp8" else 1.0)
    front = 62.0 * f["api-server-count"] ** 0.75 * (1 + 0.1 * math.log2(f["stream-interval"]))
    core = 95.0 * (1.0 if f["async-scheduling"] else 0.82) * \
        (0.8 if f["max-num-seqs"] <= 64 else 1.0)
    return Load(front, core, gpu)


CHAT = Surface(
    "chat-frontend",
    {"max-num-seqs": [64, 128, 256, 512, 1024],
     "max-num-batched-tokens": [2048, 4096, 8192, 16384, 32768],
     "kv-cache-dtype": ["auto", "fp8"], "enable-prefix-caching": [True, False],
     "block-size": [16, 32, 64], "gpu-memory-utilization": [0.85, 0.9, 0.95],
     "api-server-count": [1, 2, 4], "async-scheduling": [True, False],
     "stream-interval": [1, 4, 8]},
    {"max-num-seqs": 1024, "max-num-batched-tokens": 8192, "kv-cache-dtype": "auto",
     "enable-prefix-caching": True, "block-size": 16, "gpu-memory-utilization": 0.92,
     "api-server-count": 1, "async-scheduling": True, "stream-interval": 1},
    _chat, {"ttft_p95_ms": 500, "tpot_p95_ms": 30}, "ttft_p95_ms")


def _kv(f: Mapping[str, Any]) -> Load:
    per_token = 144 * 1024 / (2 if f["kv-cache-dtype"] == "fp8" else 1)
    cache = (24 * f["gpu-memory-utilization"] - 9.5) * 1024 ** 3 / per_token
    held = cache / 2304  # sequences of 2,048 + 256 tokens
    seqs = f["max-num-seqs"]
    gpu = 12.0 * {2048: 0.92, 4096: 0.98, 8192: 1.0}[f["max-num-batched-tokens"]] \
        * (0.97 if f["kv-cache-dtype"] == "fp8" else 1.0) \
        * (1.0 if f["block-size"] == 16 else 0.99)
    return Load(front=40.0, core=40.0, gpu=gpu, kv=held / 6.4, seqs=seqs / 6.4,
                preempts=seqs > held, kv_tokens=cache)


KV = Surface(
    "kv-bound",
    {"gpu-memory-utilization": [0.85, 0.9, 0.95], "kv-cache-dtype": ["auto", "fp8"],
     "max-num-seqs": [16, 32, 64, 128, 256], "max-num-batched-tokens": [2048, 4096, 8192],
     "block-size": [16, 32], "enable-prefix-caching": [True, False]},
    {"gpu-memory-utilization": 0.92, "kv-cache-dtype": "auto", "max-num-seqs": 256,
     "max-num-batched-tokens": 2048, "block-size": 16, "enable-prefix-caching": True},
    _kv, {"ttft_p95_ms": 2000, "tpot_p95_ms": 50}, "tpot_p95_ms")


def _gpu(f: Mapping[str, Any]) -> Load:
    gpu = 2.36 * {4096: 0.99, 16384: 1.0, 32768: 0.995}[f["max-num-batched-tokens"]] \
        * {16: 1.0, 32: 0.995, 64: 0.99}[f["block-size"]] \
        * (0.98 if f["kv-cache-dtype"] == "fp8" else 1.0)
    return Load(front=50.0, core=50.0, gpu=gpu)


GPU = Surface(
    "gpu-bound",
    {"max-num-seqs": [32, 256], "max-num-batched-tokens": [4096, 16384, 32768],
     "kv-cache-dtype": ["auto", "fp8"], "block-size": [16, 32, 64],
     "enable-prefix-caching": [True, False], "gpu-memory-utilization": [0.9, 0.95]},
    {"max-num-seqs": 1024, "max-num-batched-tokens": 16384, "kv-cache-dtype": "auto",
     "block-size": 16, "enable-prefix-caching": True, "gpu-memory-utilization": 0.92},
    _gpu, {"ttft_p95_ms": 5000}, "ttft_p95_ms")


def _latency(f: Mapping[str, Any]) -> Load:
    # TTFT grows with the sequences sharing each step: fewer of them, more rate at the SLO.
    slo = 30.0 * {16: 1.6, 32: 1.45, 64: 1.25, 128: 1.1, 256: 1.0, 1024: 0.95}[f["max-num-seqs"]]
    slo *= {2048: 0.99, 4096: 1.0, 8192: 1.01, 16384: 1.01}[f["max-num-batched-tokens"]]
    slo *= {16: 1.0, 32: 1.02}[f["block-size"]]
    return Load(front=200.0, core=200.0, gpu=200.0, slo=slo)


LATENCY = Surface(
    "latency-bound",
    {"max-num-seqs": [16, 32, 64, 128, 256], "max-num-batched-tokens": [2048, 4096, 8192, 16384],
     "block-size": [16, 32], "kv-cache-dtype": ["auto", "fp8"],
     "api-server-count": [1, 2]},
    {"max-num-seqs": 1024, "max-num-batched-tokens": 8192, "block-size": 16,
     "kv-cache-dtype": "auto", "api-server-count": 1},
    _latency, {"ttft_p95_ms": 200}, "ttft_p95_ms")



def _h200(f: Mapping[str, Any]) -> Load:
    """The roofline fitted to the steps of `studies/h200-guided-check.db` (module docstring)."""
    mbt = {2048: 0.8, 4096: 0.96, 8192: 1.0, 16384: 1.0, 32768: 0.97}[f["max-num-batched-tokens"]]
    gpu = 88.0 * mbt * (1.0 if f["enable-prefix-caching"] else 0.35) \
        * {16: 1.0, 32: 0.99, 64: 0.98}[f["block-size"]] \
        * (0.97 if f["kv-cache-dtype"] == "fp8" else 1.0)
    servers = int(f["api-server-count"])
    front = 52.0 * servers ** 0.75 * (1 + 0.1 * math.log2(f["stream-interval"]))
    core = 100.0 * (1.0 if f["async-scheduling"] else 0.82)
    return Load(front, core, gpu, seqs=f["max-num-seqs"] / 1.75, servers=servers,
                pegged_core=True)


def _replayed(db: Path, defaults: Mapping[str, Any]
              ) -> dict[tuple[tuple[str, Any], ...], Measurement]:
    """The measured records of the study in `db` that searched to the end, by their flags
    over `defaults`, each with its limit read again by today's attribution."""
    import optuna
    from optuna.trial import TrialState

    from autotune.measure import searchresult
    from autotune.tuning.records.snapshot import records

    st = optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")
    out: dict[tuple[tuple[str, Any], ...], Measurement] = {}
    for rec in records(st, (TrialState.COMPLETE,)):
        cap = rec.capacity
        if cap is None or not cap.low or cap.limiting_step is None:
            continue
        knee = searchresult.knee(cap.steps, cap.rate, cap.limiting_step)
        metrics = rec.metrics.replace(capacity=replace(cap, bottleneck=knee))
        out[tuple(sorted({**defaults, **rec.flags}.items()))] = metrics
    return out


_H200_DEFAULTS = {"max-num-seqs": 1024, "max-num-batched-tokens": 8192, "kv-cache-dtype": "auto",
                  "enable-prefix-caching": True, "block-size": 16,
                  "gpu-memory-utilization": 0.92, "api-server-count": 1,
                  "async-scheduling": True, "stream-interval": 1}
REPLAY = Surface(
    "h200-replay", dict(CHAT.space), _H200_DEFAULTS, _h200,
    {"ttft_p95_ms": 500, "tpot_p95_ms": 75}, "ttft_p95_ms",
    _replayed(GUIDED, _H200_DEFAULTS) if GUIDED.exists() else {})

SURFACES = {s.name: s for s in (CHAT, KV, GPU, LATENCY, REPLAY)}


def runner(surface: Surface, rng: random.Random, replays: list[bool] | None = None
           ) -> study_mod.Runner:
    """`trial.run_trial`'s stand-in: a measured record where the surface replays one, else
    the surface's capacity measured with noise, as a capacity search records it (a passing
    step at the capacity, a failing one just above, the probes' figures at each, the limit
    read across that knee). `replays` gets, per launch, whether it was a measured record."""

    def run(scenario: Scenario, model: str, flags: dict[str, Any], **_: Any
            ) -> trial_mod.Outcome:
        replayed = surface.measured.get(surface.key(flags))
        if replays is not None:
            replays.append(replayed is not None)
        if replayed is not None:
            return trial_mod.Outcome(trial_mod.COMPLETE, "", replayed,
                                     trial_mod.EngineRun(flags))
        load = surface.load({**surface.defaults, **flags})
        cap = load.capacity() * math.exp(rng.gauss(0, NOISE))
        limit = surface.slos[surface.broken]
        steps = [StepRecord(0, "ceiling", cap, True, cap, cap * 128, [], 100,
                            probes=load.probes(cap)),
                 StepRecord(1, "bisect", cap * ABOVE, False, cap * ABOVE, cap * ABOVE * 128,
                            [f"{surface.broken} {limit * 1.3:.1f}>{limit:g}"], 100,
                            probes=load.probes(cap * ABOVE))]
        steps[1] = replace(steps[1], bottleneck=bn.attribute(steps[1].probes))
        knee = searchresult.knee(steps, cap, steps[1])
        record = CapacityRecord(
            request_throughput=cap, output_throughput=cap * 128,
            total_token_throughput=cap * 384, low=cap, high=cap * ABOVE, bracket=0.1,
            uncertainty=0.1, bottleneck=knee, bottleneck_step=1, steps=tuple(steps))
        summary = Measurement.of({"completed": 100, "failed": 0, "request_throughput": cap,
                                  "total_input_tokens": 204_800, "total_output_tokens": 25_600,
                                  "p95_ttft_ms": 100.0, "p95_tpot_ms": 10.0,
                                  "probes": steps[0].probes, "capacity": record.as_dict()})
        facts = trial_mod.EngineRun(flags, kv_capacity_reported=int(load.kv_tokens)
                                if load.kv_tokens is not None else None)
        return trial_mod.Outcome(trial_mod.COMPLETE, "", summary, facts)

    return run


def trials_to_best(surface: Surface, method: str, seed: int, budget: int, best: float,
                   root: Path, replays: list[bool] | None = None) -> int:
    """Trials until the study's pick is within 5 % of the surface's best (budget + 1 if
    never); `replays` as `runner`'s."""
    sampler, relief, every = {"random": ("random", False, 2), "tpe": ("tpe", False, 2),
                              "tpe+relief": ("tpe", True, 2),
                              "tpe+relief-every": ("tpe", True, 1)}[method]
    scenario = surface.scenario(sampler, relief, every, seed)
    url = f"sqlite:///{root}/{surface.name}-{method}-{seed}.db"
    shared = study_mod.open_study(scenario, url)
    study = shared.study
    study.set_user_attr("engine_defaults", surface.defaults)
    run = study_mod.RunContext(shared, scenario, "model", root / "trials",
                               runner=runner(surface, random.Random(seed * 7919 + 1), replays))
    for n in range(1, budget + 1):
        study_mod.loop(run, trials=1)
        pick = ranking.feasible_best(study)
        if pick is not None and surface.truth(pick.flags) >= (1 - WITHIN) * best:
            return n
    return budget + 1


def bootstrap(values: list[float], stat: Callable[[list[float]], float], n: int = 2000,
              seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    data = np.asarray(values, dtype=float)
    draws = [stat(list(rng.choice(data, size=len(data)))) for _ in range(n)]
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--budget", type=int, default=20)
    parser.add_argument("--surface", choices=sorted(SURFACES), action="append")
    args = parser.parse_args()
    methods = ("random", "tpe", "tpe+relief", "tpe+relief-every")
    print(f"trials until the pick is within {WITHIN:.0%} of the best point; {args.seeds} seeds, "
          f"budget {args.budget} (not reached counts as {args.budget + 1}); medians with "
          "bootstrap 95 % intervals; paired difference = TPE's trials minus the method's "
          "(positive: fewer trials)")
    for name in args.surface or sorted(SURFACES):
        surface = SURFACES[name]
        best = surface.best()
        defaults = surface.truth({})
        print(f"\n{name}: best {best:.3g} req/s, vLLM defaults {defaults:.3g} "
              f"({defaults / best:.0%} of best)")
        found: dict[str, list[int]] = {}
        replays: dict[str, list[bool]] = {m: [] for m in methods}
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir()
                                         else None) as tmp:
            for method in methods:
                found[method] = [trials_to_best(surface, method, seed, args.budget, best,
                                                Path(tmp), replays[method])
                                 for seed in range(args.seeds)]
        for method in methods:
            got = found[method]
            lo, hi = bootstrap(got, statistics.median)
            reached = sum(1 for g in got if g <= args.budget) / len(got)
            line = (f"  {method:<17} median {statistics.median(got):4.1f} ({lo:.1f}-{hi:.1f}), "
                    f"mean {statistics.fmean(got):4.1f}, reached {reached:4.0%}")
            if method != "tpe":
                diff = [a - b for a, b in zip(found["tpe"], got, strict=True)]
                dlo, dhi = bootstrap(diff, statistics.fmean)
                line += (f"; vs TPE {statistics.fmean(diff):+.1f} trials ({dlo:+.1f} to "
                         f"{dhi:+.1f})")
            if surface.measured:
                line += (f"; {sum(replays[method])} of {len(replays[method])} launches "
                         "replayed a measured record")
            print(line)
        print(f"  ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    optuna_logging = __import__("optuna").logging
    optuna_logging.set_verbosity(optuna_logging.WARNING)
    main()
