"""Is a warm restart the same engine? One configuration launched as a study launches it
against the same flags launched as vLLM derives them, in pairs of both orders.

A study starts its engines warm (`autotune.engine.compilecache`): its own compile cache, the
flags that hold vLLM's compile key (`autotune.tuning.policy.compilekey`), a forked engine
core on a GPU. That must change how fast an engine starts and nothing it measures. Each pair
launches the configuration both ways on fresh engines, one after the other, the order
swapped every pair (vLLM's side first in pair 0), and measures its capacity at the study's
SLOs with the study's own search; the check reports capacity, KV cache and latency warm
over vLLM's with the pairs' 95 % interval (`pairstats`, on the log scale), and the start-up
of each run with its compile-cache outcome. vLLM's side keeps a cache folder of its own
under the check's folder (as vLLM's default cache would be on a machine of its own), so its
later launches may hit that cache as vLLM's would.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autotune._flags import Flags
from autotune.config import Scenario
from autotune.engine import compilecache
from autotune.stored import Stored
from autotune.tuning import trial as trial_mod
from autotune.verify import pairstats

VLLM_SIDE, WARM_SIDE = "vllm", "warm"
SIDES = (VLLM_SIDE, WARM_SIDE)
Runner = Callable[[Scenario, str, Flags, Path], trial_mod.Outcome]


@dataclass(frozen=True)
class WarmRun(Stored):
    """One launch of the check and what it measured."""

    side: str = ""
    pair: int = 0
    capacity: float | None = None
    low: float | None = None
    high: float | None = None
    kv_cache_tokens: int | None = None
    num_blocks: int | None = None
    ttft_p95_ms: float | None = None
    tpot_p95_ms: float | None = None
    startup_s: float | None = None
    compile_cache: str | None = None
    phases: dict[str, float] = field(default_factory=dict)
    held: Flags = field(default_factory=dict)  # the flags the warm side added
    outcome: str = ""
    log_path: str | None = None


@dataclass(frozen=True)
class Figure:
    """A figure warm over vLLM's: each pair's ratio, their geometric mean and its 95 %
    interval (None with one pair or where a side lacks the figure)."""

    name: str
    per_pair: tuple[float, ...]
    ratio: float | None
    low: float | None
    high: float | None

    @property
    def unchanged(self) -> bool | None:
        """Whether the interval holds 1 (None: no interval)."""
        if self.low is None or self.high is None:
            return None
        return self.low <= 1.0 <= self.high

    def text(self) -> str:
        if self.ratio is None:
            return f"{self.name}: not measured on both sides"
        pairs = ", ".join(f"{r:.3f}" for r in self.per_pair)
        if self.low is None or self.high is None:
            return f"{self.name} warm/vLLM {self.ratio:.3f} (pairs {pairs}; one pair: no interval)"
        verdict = "no change shown" if self.unchanged else "changed"
        return (f"{self.name} warm/vLLM {self.ratio:.3f} (95 % CI {self.low:.3f}-"
                f"{self.high:.3f}; pairs {pairs}): {verdict}")


@dataclass(frozen=True)
class WarmCheck:
    """The check's runs and the figures warm over vLLM's."""

    flags: Flags
    runs: tuple[WarmRun, ...]
    figures: tuple[Figure, ...]

    def lines(self) -> list[str]:
        out = [f.text() for f in self.figures]
        for side in SIDES:
            runs = [r for r in self.runs if r.side == side]
            ups = [r.startup_s for r in runs if r.startup_s is not None]
            hits = [r.compile_cache or "-" for r in runs]
            if ups:
                out.append(f"{side}: start-up {', '.join(f'{s:.1f}' for s in ups)} s "
                           f"(median {statistics.median(ups):.1f}); compile cache "
                           + ", ".join(hits))
        held = next((r.held for r in self.runs if r.held), {})
        out.append("held by the warm side: " + (" ".join(f"--{k} {v}" for k, v in held.items())
                                                 if held else "nothing"))
        return out


def order(pairs: int) -> list[tuple[int, str]]:
    """(pair, side) in launch order: vLLM's side first in even pairs, last in odd ones."""
    return [(p, side) for p in range(pairs)
            for side in (SIDES if p % 2 == 0 else SIDES[::-1])]


def sides(scenario: Scenario, folder: Path) -> dict[str, Scenario]:
    """The scenario of each side: the study's warm launch (its cache under `folder`
    unless the scenario places it), and vLLM's own (nothing held, a spawned engine core,
    a cache folder of its own); neither prunes or checks quality."""
    base = scenario.model_copy(
        update={"prune": scenario.prune.model_copy(update={"enabled": False})})
    warm = trial_mod.with_study_folder(base, folder)
    own = base.model_copy(update={"engine": base.engine.model_copy(update={
        "compile_cache": compilecache.VLLM, "compile_key": "vllm", "fork_engine_core": False,
        "env": {**base.engine.env, compilecache.ROOT: str((folder / "vllm-cache").resolve())},
    })})
    return {WARM_SIDE: warm, VLLM_SIDE: own}


def run_check(scenario: Scenario, model: str, flags: Flags, pairs: int, folder: Path,
              runner: Runner | None = None,
              on_run: Callable[[WarmRun], None] | None = None) -> WarmCheck:
    """Launch `flags` both ways `pairs` times (`order`) and compare what they measured."""
    if pairs < 1:
        raise ValueError("the check needs at least one pair")
    launch = runner or (lambda sc, m, f, d: trial_mod.run_trial(sc, m, f, d))
    scenarios = sides(scenario, folder)
    runs: list[WarmRun] = []
    for index, (pair, side) in enumerate(order(pairs), start=1):
        out = launch(scenarios[side], model, dict(flags), folder / f"{index:02d}-{side}")
        runs.append(_run(side, pair, out))
        if on_run is not None:
            on_run(runs[-1])
    return WarmCheck(dict(flags), tuple(runs), _figures(runs, pairs))


def _run(side: str, pair: int, out: trial_mod.Outcome) -> WarmRun:
    facts = out.facts
    up = facts.startup
    cap = out.summary.capacity
    step = _at_capacity(out)
    return WarmRun(side=side, pair=pair,
               capacity=cap.request_throughput if cap is not None and cap.low else None,
               low=cap.low if cap is not None else None,
               high=cap.high if cap is not None else None,
               kv_cache_tokens=up.kv_cache_tokens if up else None,
               num_blocks=up.num_blocks if up else None,
               ttft_p95_ms=step.get("ttft_p95_ms"), tpot_p95_ms=step.get("tpot_p95_ms"),
               startup_s=(facts.timings or {}).get("startup_s"),
               compile_cache=up.compile_cache if up else None,
               phases=dict(up.phases) if up else {},
               held=dict(up.warm.flags) if up is not None and up.warm is not None else {},
               outcome=out.state if not out.reason else f"{out.state} ({out.reason})",
               log_path=facts.log_path)


def _at_capacity(out: trial_mod.Outcome) -> dict[str, float]:
    """The latencies of the highest passing sustained step (the capacity's)."""
    cap = out.summary.capacity
    if cap is None or not cap.low:  # no capacity: no step stands for it
        return {}
    passed = [s for s in cap.steps if s.passed and s.rate is not None]
    best = max(passed, key=lambda s: s.rate or 0.0, default=None)
    return dict(best.latencies) if best is not None else {}


def _figures(runs: Sequence[WarmRun], pairs: int) -> tuple[Figure, ...]:
    names = {"capacity": lambda r: r.capacity, "KV cache tokens": lambda r: r.kv_cache_tokens,
             "TTFT p95 at capacity": lambda r: r.ttft_p95_ms,
             "TPOT p95 at capacity": lambda r: r.tpot_p95_ms}
    out = []
    for name, value in names.items():
        ratios: list[float] = []
        for p in range(pairs):
            got = {r.side: value(r) for r in runs if r.pair == p}
            w, v = got.get(WARM_SIDE), got.get(VLLM_SIDE)
            if w is None or v is None or not w > 0 or not v > 0:
                ratios = []
                break
            ratios.append(float(w) / float(v))
        if not ratios:
            out.append(Figure(name, (), None, None, None))
            continue
        iv = pairstats.log_interval([math.log(r) for r in ratios])
        out.append(Figure(name, tuple(ratios), math.exp(iv.mean),
                          None if iv.low is None else math.exp(iv.low),
                          None if iv.high is None else math.exp(iv.high)))
    return tuple(out)
