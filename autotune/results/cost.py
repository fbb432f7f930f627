"""Money and machines: what a configuration costs to serve, and how many replicas a load needs.

A capacity-mode trial's capacity at SLO (`CapacityRecord.low`) is the rate one replica can
be trusted with; its `output_throughput` is that rate times the mean output tokens per
request of the passing step at `low` (the step's own figure includes ramp and drain). Hence:
one replica costs the GPU-hour price times its GPUs (on vLLM's CPU build, which holds no
GPU, the price of one hour of the machine) and makes output_throughput x 3600 tokens an
hour, a cost per million output tokens comparable across configurations, GPUs and clouds;
a load of R req/s needs ceil(R / capacity) replicas. It is not the export's "safe request
rate" (`autotune.results._limits`), which moves with the search's step grid.
Prices: the study's (`cost:`) or the command line's. A trial without a capacity cannot
serve at its SLO: it is said, never divided by.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from autotune.config import Scenario
from autotune.errors import ConfigError
from autotune.results._replica import gpu_count, on_cpu
from autotune.tuning.records.trialrecord import TrialRecord

CURRENCY = "USD"  # the scenario's default (`config.CostSpec`)
NO_PRICE = "no price: give --gpu-hour or cost.gpu_hour"


@dataclass(frozen=True)
class Price:
    """What one GPU costs an hour (None: not known) and the GPUs one replica holds (None:
    each trial's tensor x pipeline x data parallel size), with where the price came from."""

    gpu_hour: float | None = None
    gpus: int | None = None
    currency: str = CURRENCY
    source: str = ""

    @property
    def known(self) -> bool:
        return self.gpu_hour is not None

    def text(self, cpu: bool = False) -> str:
        """`3.5 USD per GPU-hour (--gpu-hour)`, or for a study on vLLM's CPU build `... per
        hour of one CPU machine (--gpu-hour)`; the missing price's hint."""
        if self.gpu_hour is None:
            return NO_PRICE
        return f"{self.gpu_hour:g} {self.currency} {per_hour(cpu)} ({self.source})"


def per_hour(cpu: bool) -> str:
    """What a price is for: `per GPU-hour`, or on vLLM's CPU build `per hour of one CPU
    machine` (a replica there is a machine, with no GPU to price)."""
    return "per hour of one CPU machine" if cpu else "per GPU-hour"


def price_of(scenario: Scenario | None, gpu_hour: float | None = None,
             gpus: int | None = None) -> Price:
    """The price for a study: its stored scenario's `cost` (absent in studies made before
    it), with `gpu_hour` and `gpus` from the command line overriding it."""
    stored = scenario.cost if scenario is not None else None
    if gpu_hour is not None and not (gpu_hour > 0 and math.isfinite(gpu_hour)):
        raise ConfigError(f"the price per GPU-hour must be a number above 0 (got {gpu_hour})")
    if gpus is not None and gpus < 1:
        raise ConfigError(f"the GPUs of a replica must be at least 1 (got {gpus})")
    source = "--gpu-hour" if gpu_hour is not None else \
        ("the scenario's cost" if stored is not None else "")
    return Price(gpu_hour if gpu_hour is not None else stored.gpu_hour if stored else None,
                 gpus if gpus is not None else stored.gpus if stored else None,
                 stored.currency if stored is not None else CURRENCY, source)


def replica_gpus(rec: TrialRecord, price: Price) -> int:
    """GPUs one replica of `rec` holds: none on vLLM's CPU build, else the price's, else
    tensor x pipeline x data parallel size."""
    if on_cpu(rec):
        return 0
    return price.gpus if price.gpus is not None else gpu_count(rec.flags)


def capacity_rate(rec: TrialRecord) -> float | None:
    """The highest sustained request rate at which the trial met every SLO; None when it
    ran no capacity search or no rate met them."""
    cap = rec.capacity
    return cap.low if cap is not None and cap.low else None


def check_load(load: float) -> float:
    """`load` if it is a request rate a fleet can be sized for, else ConfigError."""
    if not (load > 0 and math.isfinite(load)):
        raise ConfigError(f"the load must be a request rate above 0 req/s (got {load:g})")
    return load


def replicas(load: float, capacity_rps: float) -> int:
    """Replicas that serve `load` req/s with none above its capacity at SLO."""
    check_load(load)
    if not capacity_rps > 0:
        raise ConfigError("a configuration with no capacity at SLO cannot serve any load")
    # round() first: 100 / (100 / 3) must give 3, not 4 by a float's last bit.
    return math.ceil(round(load / capacity_rps, 9))


def per_million(replica_hour: float, output_tps: float) -> float:
    """Cost of a million output tokens from one replica kept at its capacity."""
    return replica_hour / (output_tps * 3600) * 1e6


@dataclass(frozen=True)
class TrialCost:
    """One trial's figures: its capacity at SLO and output tokens/s there, what a replica
    costs an hour and per million output tokens, and with a load, the replicas and their
    cost an hour. `missing` says why a figure is absent ("" when none is)."""

    number: int
    device: str  # `cpu` on vLLM's CPU build
    gpus: int  # 0 on vLLM's CPU build
    capacity_rps: float | None
    output_tps: float | None
    floor: bool  # every rate tried passed: the capacity is a lower bound
    currency: str
    replica_hour: float | None
    per_million: float | None
    load: float | None = None
    replicas: int | None = None
    load_hour: float | None = None
    missing: str = ""

    @property
    def cpu(self) -> bool:
        """Measured on vLLM's CPU build: a replica is one machine, priced by the hour."""
        return self.device == "cpu"

    @property
    def holds(self) -> str:
        """What one replica holds: `2 GPUs`, or `one CPU machine` on vLLM's CPU build."""
        if self.cpu:
            return "one CPU machine"
        return f"{self.gpus} GPU" + ("s" if self.gpus != 1 else "")

    def line(self) -> str:
        """One line for an export's comments: the replicas for the load and the cost."""
        if self.capacity_rps is None:
            return f"money and machines: {self.missing}"
        text = f"replicas of {self.holds}, each serving at most its capacity at SLO " \
            f"({self.capacity_rps:.3g} req/s)"
        if self.replicas is not None:
            text = f"{self.replicas} {text} for {self.load:g} req/s"
        if self.per_million is not None:
            text += f"; {money(self.per_million, self.currency)} per million output tokens"
            if self.load_hour is not None:
                text += f", {money(self.load_hour, self.currency)} an hour at that load"
        elif self.missing:
            text += f"; {self.missing}"
        return "money and machines: " + text


def trial_cost(rec: TrialRecord, price: Price, load: float | None = None) -> TrialCost:
    """The cost figures of trial `rec` at `price`, with the replicas for `load` req/s."""
    if load is not None:
        check_load(load)
    cap, rate = rec.capacity, capacity_rate(rec)
    gpus = replica_gpus(rec, price)
    device = "cpu" if on_cpu(rec) else rec.device_name or "-"
    if cap is None or rate is None:
        why = "no capacity search: it cannot be sized (the scenario needs SLOs)" \
            if cap is None else "no rate met the SLOs: it cannot serve at them"
        return TrialCost(rec.number, device, gpus, None, None, False, price.currency,
                         None, None, load, None, None, why)
    out_tps = cap.output_throughput or None
    # A CPU replica is one machine at the price of its hour; a GPU replica, its GPUs'.
    hour = price.gpu_hour * (1 if device == "cpu" else gpus) if price.gpu_hour is not None \
        else None
    count = replicas(load, rate) if load is not None else None
    missing = NO_PRICE if hour is None else "" if out_tps else "no output tokens recorded"
    return TrialCost(
        rec.number, device, gpus, rate, out_tps, cap.high is None, price.currency, hour,
        per_million(hour, out_tps) if hour is not None and out_tps else None, load, count,
        hour * count if hour is not None and count is not None else None, missing)


@dataclass(frozen=True)
class SideBySide:
    """The winner and the reference (vLLM's defaults, or the trial standing in for them)
    priced alike, and what choosing the winner saves; as plain data (`--json`), with the
    rows and the saving in words (fields and figures in the order `--json` has always
    written them)."""

    EXTRA: ClassVar[tuple[str, ...]] = ("replicas_saved", "hour_saved", "per_million_saved",
                                        "rows", "saving")

    price: Price
    load: float | None
    winner: TrialCost
    reference: TrialCost | None
    reference_name: str

    @property
    def replicas_saved(self) -> int | None:
        w, d = self.winner.replicas, self.reference.replicas if self.reference else None
        return d - w if w is not None and d is not None else None

    @property
    def hour_saved(self) -> float | None:
        w, d = self.winner.load_hour, self.reference.load_hour if self.reference else None
        return d - w if w is not None and d is not None else None

    @property
    def per_million_saved(self) -> float | None:
        """The share of the cost per million output tokens the winner saves."""
        w, d = self.winner.per_million, self.reference.per_million if self.reference else None
        return 1 - w / d if w is not None and d else None

    @property
    def price_text(self) -> str:
        """The price in words, per GPU-hour or (the winner on vLLM's CPU build) per hour of
        one CPU machine (`Price.text`)."""
        return self.price.text(self.winner.cpu)

    @property
    def rows(self) -> list[tuple[str, str, str]]:
        """(figure, winner, reference) in words, for the terminal and the report."""
        cur, load = self.price.currency, self.load

        def row(name: str, get: Callable[[TrialCost], str]) -> tuple[str, str, str]:
            return name, get(self.winner), get(self.reference) if self.reference else "-"

        out = [row("trial", lambda c: f"#{c.number} on {c.device}"),
               row("capacity at SLO req/s", lambda c: _num(c.capacity_rps, ".3g")
                   + (" (a floor)" if c.floor else "")),
               row("output tok/s at it", lambda c: _num(c.output_tps, ".0f")),
               row("a replica holds", lambda c: c.holds)]
        if load is not None:
            out.append(row(f"replicas for {load:g} req/s", lambda c: _num(c.replicas, "d")))
        if self.price.known:
            out.append(row("cost a replica-hour", lambda c: money(c.replica_hour, cur)))
            if load is not None:
                out.append(row(f"cost an hour at {load:g} req/s",
                               lambda c: money(c.load_hour, cur)))
            out.append(row("cost per M output tokens", lambda c: money(c.per_million, cur)))
        return out

    @property
    def saving(self) -> str:
        """What the winner saves against the reference, in one line."""
        parts = []
        if self.replicas_saved is not None:
            parts.append(f"{self.replicas_saved} replica(s)" + (
                f", {money(self.hour_saved, self.price.currency)} an hour"
                if self.hour_saved is not None else "") + f" at {self.load:g} req/s")
        if self.per_million_saved is not None:
            parts.append(f"{self.per_million_saved:.1%} of the cost per million output tokens")
        if not parts:
            return "saving: - (" + (self.winner.missing or "the reference cannot be sized") \
                + ")"
        return "saving over " + self.reference_name + ": " + "; ".join(parts)


def side_by_side(winner: TrialRecord, reference: TrialRecord | None, reference_name: str,
                 price: Price, load: float | None = None) -> SideBySide:
    """The winner against the reference at one price and, with `load`, one load."""
    return SideBySide(price=price, load=load, winner=trial_cost(winner, price, load),
                      reference=trial_cost(reference, price, load) if reference else None,
                      reference_name=reference_name)


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def money(value: float | None, currency: str) -> str:
    """`7.00 USD`, `0.109 USD` (three significant digits below 1), or `-`."""
    if value is None:
        return "-"
    return f"{value:,.2f} {currency}" if value == 0 or abs(value) >= 1 \
        else f"{value:#.3g} {currency}"
