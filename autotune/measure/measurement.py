"""A benchmark's summary as one typed value (`Measurement`): `vllm bench serve`'s flat result
fields, autotune's extras, and every latency statistic by its flat key (`p95_ttft_ms`).

It is stored as a trial's `metrics`, a flat JSON object: `Measurement.of` reads any version of
it (missing keys at their defaults, unknown ones kept, such as the fields vLLM's own client
adds), and `as_dict` writes back that very object (same keys, same order). A measurement
made in code grows field by field (`replace`), each new one last, so it is stored as it
always was.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune._traces import Replay
from autotune.measure.bottleneck import Bottleneck
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.probesummary import ClientLag, ProbeSummary
from autotune.stored import Stored, json_data

if TYPE_CHECKING:  # reading a stored measurement needs no pydantic model
    from autotune.traffic import WorkloadSpec

# A latency statistic's flat key, as vLLM spells it: mean_ttft_ms, p99.9_e2el_ms.
LATENCY = re.compile(r"(mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2el)_ms")


@dataclass(frozen=True)
class WholeRun(Stored):
    """A capacity step's figures over the whole step, beside the steady window's that its
    measurement holds: what was sent from the first request to the last, ramp and tail
    included (None where the run did not measure one)."""

    completed: float | None = None
    failed: float | None = None
    duration: float | None = None
    request_throughput: float | None = None
    output_throughput: float | None = None

    @classmethod
    def of(cls, run: Measurement) -> WholeRun:
        return cls(*(run.value(f.name) for f in dataclasses.fields(cls) if f.name != "read"))


@dataclass(frozen=True)
class SentWorkload(Stored):
    """The workload a benchmark sent, as its `WorkloadSpec` dumped it: the fields autotune
    reads back typed (None where an older record lacks one), every other key of the dump
    kept as stored (`rest`), so that a record reads and writes back unchanged whichever
    version of the spec wrote it (a field the spec has since dropped included)."""

    kind: str | None = None
    api: str | None = None
    num_requests: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    range_ratio: float | None = None
    prefix_len: int | None = None
    request_rate: float | None = None  # inf: every request at once
    max_concurrency: int | None = None
    ignore_eos: bool | None = None
    seed: int | None = None
    mode: str | None = None
    rest: dict[str, Any] = field(default_factory=dict)
    KEPT = "rest"

    @classmethod
    def of(cls, spec: WorkloadSpec) -> SentWorkload:
        """What `spec` sends, stored as its JSON dump (every field, in the spec's order)."""
        return cls.from_dict(spec.model_dump(mode="json"))

    @property
    def same_lengths(self) -> bool:
        """Every request has the same prompt and reply lengths: random prompts with no
        length range, replies run to `output_len` (`ignore_eos`)."""
        return self.kind == "random" and not self.range_ratio and self.ignore_eos is True


# The fields stored as records of their own.
_NESTED: dict[str, type[Stored]] = {"bottleneck": Bottleneck, "replayed": Replay,
                                    "capacity": CapacityRecord, "probes": ProbeSummary,
                                    "client": ClientLag, "whole": WholeRun,
                                    "workload": SentWorkload}


@dataclass(frozen=True)
class Measurement(Stored):
    """What one benchmark measured. vLLM's figures first (only successful requests enter
    the token totals and the latencies, `latencies` by flat key); then autotune's extras:
    the probes' figures and the client's event-loop lag over the run, what limited it,
    whether `max_duration_s` cut it short, the workload sent, a trace's part replayed, a
    capacity step's whole-step figures, the probe phase's stop reason and the capacity
    search's record. `other` keeps stored keys this type does not name."""

    duration: float = 0.0
    completed: int = 0
    failed: int = 0
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    request_throughput: float = 0.0
    request_goodput: float | None = None
    output_throughput: float = 0.0
    total_token_throughput: float = 0.0
    max_output_tokens_per_s: float | None = None
    max_concurrent_requests: int | None = None
    latencies: dict[str, float] = field(default_factory=dict)
    error_counts: dict[str, int] = field(default_factory=dict)
    success_rate: float | None = None
    slos: dict[str, float] = field(default_factory=dict)
    good_completed: int | None = None
    probes: ProbeSummary | None = None
    client: ClientLag = field(default_factory=ClientLag)
    bottleneck: Bottleneck | None = None
    truncated: bool | None = None
    workload: SentWorkload | None = None
    replayed: Replay | None = None
    whole: WholeRun | None = None
    stopped_after_probe: str | None = None
    capacity: CapacityRecord | None = None
    other: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Measurement:
        """The measurement a stored (or vLLM-written) flat object holds: each key goes to
        the field of its name, a latency statistic to `latencies`, any other to `other`."""
        found: dict[str, Any] = {}
        latencies: dict[str, float] = {}
        other: dict[str, Any] = {}
        for key, value in data.items():
            if key in _FIELDS:
                kind = _NESTED.get(key)
                found[key] = kind.from_dict(value) if kind is not None and \
                    isinstance(value, Mapping) else value
            elif LATENCY.fullmatch(key):
                latencies[key] = value
            else:
                other[key] = value
        return cls(**found, latencies=latencies, other=other, read=tuple(data))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        return cls.of(data)

    def replace(self, **changes: Any) -> Measurement:
        """This measurement with some of its own fields set (typed values: a `Replay`, a
        `CapacityRecord`); one it did not hold yet goes last, as the stored object grows.
        A name that is not a field is a TypeError: a flat object is read by `of`."""
        unknown = sorted(set(changes) - _FIELDS)
        if unknown:
            raise TypeError(f"Measurement has no field {', '.join(unknown)}")
        keys = self.keys + tuple(k for k in changes if k not in self.keys)
        return dataclasses.replace(self, **changes, read=keys)

    def __bool__(self) -> bool:
        """A summary is empty (false) when it holds no key: nothing was measured."""
        return bool(self.keys)

    @property
    def keys(self) -> tuple[str, ...]:
        """The flat keys this summary holds, in their stored order."""
        return self.read or ()

    def value(self, key: str) -> float | None:
        """A figure by its flat key: a latency statistic (`p95_ttft_ms`) or a scalar field
        (`output_throughput`); None where it was not measured (or not stored)."""
        if key not in self.keys:
            return None
        if key in _FIELDS:
            found = getattr(self, key)
            return found if isinstance(found, (int, float)) and \
                not isinstance(found, bool) else None
        return self.latencies.get(key)

    def as_dict(self) -> dict[str, Any]:
        """The flat JSON object, as it was read or built (same keys, same order)."""
        out: dict[str, Any] = {}
        for key in self.keys:
            if key in _FIELDS:
                out[key] = json_data(getattr(self, key))
            else:
                out[key] = self.latencies[key] if key in self.latencies else self.other[key]
        return out


# The flat keys that are fields of their own (the rest are latencies or `other`).
_FIELDS = frozenset(f.name for f in dataclasses.fields(Measurement)) - {
    "latencies", "other", "read"}
