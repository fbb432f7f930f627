"""Which GPU: studies of one model at one SLO, ranked by what their winners cost to serve.

Each study tuned the model on one GPU (or an emulated card); its winner's cost per million
output tokens at its capacity at SLO (`autotune.results.cost`) makes the studies comparable, since
it folds the GPU's price and how much load the GPU carries at the SLO into one figure. That
comparison means something only for the same model under the same SLOs, so both are
checked; studies without a price are ranked after, by capacity per GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from autotune.config import ModelSpec, Scenario
from autotune.errors import ConfigError
from autotune.results import cost
from autotune.results.cost import Price, TrialCost
from autotune.results.show import model_text, slo_text
from autotune.tuning import ranking
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot

# Why a study has no winner to compare.
NO_WINNER = "no single feasible winner (none met the SLOs, or a Pareto study)"


@dataclass(frozen=True)
class Entry:
    """One study: the device its winner ran on, its price, and its winner's figures (None
    when the study has no feasible winner); as plain data (`--json`), with its capacity per
    GPU and what is missing."""

    EXTRA: ClassVar[tuple[str, ...]] = ("capacity_rps_per_gpu", "missing")

    study: str
    device: str
    price: Price
    winner: TrialCost | None

    @property
    def capacity_rps_per_gpu(self) -> float | None:
        """Capacity at SLO per GPU, req/s: how the studies without a price are ranked;
        None on vLLM's CPU build, which holds no GPU."""
        w = self.winner
        return w.capacity_rps / w.gpus if w is not None and w.capacity_rps is not None \
            and w.gpus else None

    @property
    def missing(self) -> str:
        """Why a figure is absent ("" when none is)."""
        return self.winner.missing if self.winner is not None else NO_WINNER


@dataclass(frozen=True)
class Comparison:
    """The studies ranked: those with a price by cost per million output tokens (cheapest
    first), then those without by capacity per GPU; `notes` are differences to know of.
    `autotune.stored.json_data` gives it as plain data (`--json`)."""

    model: str
    slos: dict[str, float]
    load: float | None
    priced: tuple[Entry, ...]
    unpriced: tuple[Entry, ...]
    notes: tuple[str, ...] = ()


def compare(studies: Sequence[StudyOrSnapshot], prices: Mapping[str, float] | None = None,
            load: float | None = None, any_model: bool = False) -> Comparison:
    """Rank `studies` (two or more, each read once) by their winners' cost per million
    output tokens; `prices` are GPU-hour prices by study name, over each study's own."""
    snaps = [Snapshot.of(st) for st in studies]
    names = [str(s.study_name) for s in snaps]
    if len(snaps) < 2:
        raise ConfigError("compare: give two studies or more")
    if len(set(names)) < len(names):
        raise ConfigError("compare: a study is named twice: " + ", ".join(names))
    if unknown := sorted(set(prices or {}) - set(names)):
        raise ConfigError(f"compare: --gpu-hour names no study compared here: "
                          f"{', '.join(unknown)} (studies: {', '.join(names)})")
    scenarios = [ranking.stored_scenario(s) for s in snaps]
    _check_same(names, scenarios, any_model)
    entries = [_entry(name, s, scenario, (prices or {}).get(name), load)
               for name, s, scenario in zip(names, snaps, scenarios, strict=True)]
    priced = sorted((e for e in entries if e.price.known), key=_by_cost)
    unpriced = sorted((e for e in entries if not e.price.known), key=_by_rate)
    first = scenarios[0]
    return Comparison(model_text(_model(first)), dict(_slos(first)), load,
                      tuple(priced), tuple(unpriced), _notes(names, scenarios))


def _slos(scenario: Scenario | None) -> Mapping[str, float]:
    return scenario.objective.slos if scenario is not None else {}


def _model(scenario: Scenario | None) -> ModelSpec | None:
    return scenario.model if scenario is not None else None


def _check_same(names: Sequence[str], scenarios: Sequence[Scenario | None],
                any_model: bool) -> None:
    """Refuse studies of other models (unless `any_model`) or under other SLOs than the
    first one's: their costs would answer different questions."""
    first, name = scenarios[0], names[0]
    for other, scenario in zip(names[1:], scenarios[1:], strict=True):
        if not any_model and _model(scenario) != _model(first):
            raise ConfigError(
                f"compare: {name} tuned {model_text(_model(first))} but {other} "
                f"tuned {model_text(_model(scenario))}; --any-model compares them "
                "anyway")
        if dict(_slos(scenario)) != dict(_slos(first)):
            raise ConfigError(f"compare: the SLOs differ: {name} ({slo_text(_slos(first))}) "
                              f"against {other} ({slo_text(_slos(scenario))}); costs compare "
                              "only at one SLO")


def _entry(name: str, study: Snapshot, scenario: Scenario | None, gpu_hour: float | None,
           load: float | None) -> Entry:
    price = cost.price_of(scenario, gpu_hour)
    best = ranking.feasible_best(study)
    figures = cost.trial_cost(best, price, load) if best is not None else None
    device = figures.device if figures is not None else "-"
    if scenario is not None and (memory := scenario.hardware.memory_gib) is not None:
        device += f" as a {memory:g}-GiB card"  # emulated: the GPU's name alone misleads
    return Entry(name, device, price, figures)


def _by_cost(e: Entry) -> tuple[bool, float]:
    w = e.winner
    return (w is None or w.per_million is None,
            w.per_million if w is not None and w.per_million is not None else 0.0)


def _by_rate(e: Entry) -> tuple[bool, float]:
    return e.capacity_rps_per_gpu is None, -(e.capacity_rps_per_gpu or 0.0)


def _notes(names: Sequence[str], scenarios: Sequence[Scenario | None]) -> tuple[str, ...]:
    """Workload settings that differ from the first study's: the figures are still each
    study's own, but a reader should know what else changed besides the GPU."""
    out = []
    first = _workload(scenarios[0])
    for name, scenario in zip(names[1:], scenarios[1:], strict=True):
        w = _workload(scenario)
        if keys := sorted(k for k in set(first) | set(w) if first.get(k) != w.get(k)):
            out.append(f"{name}'s workload differs from {names[0]}'s in: {', '.join(keys)}")
    return tuple(out)


def _workload(scenario: Scenario | None) -> dict[str, object]:
    """The workload's settings by name, for telling two studies' apart."""
    return dict(scenario.workload) if scenario is not None else {}
