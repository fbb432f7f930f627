"""Running pairs: the one loop of every re-measurement (`validate`, its `--client vllm`).

A re-measurement launches the candidate and the baseline in pairs (`validate.schedule`):
one after the other on one device, or each pair's two runs at once on two devices,
swapped every pair so that a difference between the devices cancels out. What one run
measures is the caller's (`measure`: autotune's client through `trial.run_trial`, or
vLLM's client on an engine from `trial.engine`); the order, the placement, the wait for a
device to hand its memory back and the progress callback are here, once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from autotune._remeasurements import PairRun
from autotune.tuning.records.trialrecord import TrialRecord


@dataclass(frozen=True)
class Run:
    """One run of a pair: its place in the launch order (from 1), the trial it re-launches,
    the device it runs on (None: the only one) and its slot among engines side by side
    (index, count)."""

    index: int
    pair: int
    role: str  # "candidate" or "baseline"
    trial: TrialRecord
    device: int | None = None
    slot: tuple[int, int] = (0, 1)


def run_pairs(order: Sequence[tuple[int, str]], candidate: TrialRecord, against: TrialRecord,
              measure: Callable[[Run], PairRun], *,
              devices: Sequence[int | None] = (None,),
              wait: Callable[[int | None], object] | None = None,
              on_run: Callable[[int, int, PairRun], None] | None = None
              ) -> list[PairRun]:
    """Every run of `order` ((pair, role) in launch order): what `measure` returned, with
    the trial, role and pair filled in, in the order they finished. With two `devices`
    each pair's runs go side by side (the candidate on `devices[pair % 2]`); `wait(device)`
    runs before each launch; `on_run(done, total, figures)` after each run."""
    runs: list[PairRun] = []

    def run_of(pair: int, role: str, device: int | None) -> Run:
        trial = candidate if role == "candidate" else against
        slot = (list(devices).index(device), len(devices)) if len(devices) > 1 else (0, 1)
        return Run(order.index((pair, role)) + 1, pair, role, trial, device, slot)

    def done(run: Run, figures: PairRun) -> None:
        runs.append(replace(figures, trial=run.trial.number, role=run.role, pair=run.pair))
        if on_run is not None:
            on_run(len(runs), len(order), runs[-1])

    if len(devices) < 2:
        for pair, role in order:
            run = run_of(pair, role, devices[0] if devices else None)
            if wait is not None:
                wait(run.device)
            done(run, measure(run))
        return runs
    with ThreadPoolExecutor(max_workers=2) as pool:
        for pair in sorted({p for p, _ in order}):
            placed = {"candidate": devices[pair % 2], "baseline": devices[(pair + 1) % 2]}
            started = {}
            for role, device in placed.items():
                run = run_of(pair, role, device)
                if wait is not None:
                    wait(device)
                started[role] = (run, pool.submit(measure, run))
            for role in ("baseline", "candidate"):
                run, future = started[role]
                done(run, future.result())
    return runs
