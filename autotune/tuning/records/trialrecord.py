"""The trial record: everything a trial measured, as one typed value (`TrialRecord`).

Each trial keeps what it ran and measured in Optuna's user attributes; they are read here,
in one place, `TrialRecord.of`, and written by `autotune.tuning.records.writers`; every other
module sees a typed `TrialRecord`. Its measures, quality verdict, start-up, memory
estimate, speculation, worker and origin are typed too (`autotune.stored`: any record
version reads, and writes back as it was stored), each defined by the module that makes it
where that module sits below the records (the guardrail's verdict, the engine's start-up,
the speculation counters), and otherwise beside the record in `records/`, since their makers
(the search policy, the shared study, the loop) sit above it: the measures
(`records.measures`), the memory estimate (`records.estimate`), the worker
(`records.worker`) and the origin (`records.origin`).

Feasible has one meaning: the trial completed and every Optuna constraint on it is met
(<= 0). Constraints are Optuna's named constraints (`Trial.set_constraint`); studies written
before them carry a positional list, which `FrozenTrial.constraints` reads as well.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeAlias

from optuna.trial import FrozenTrial, TrialState

from autotune import _reasons as reasons
from autotune._device import DeviceSeen
from autotune._flags import Flags
from autotune._remeasurements import Recheck, Validation
from autotune.engine.ballast import Held
from autotune.engine.log import Startup
from autotune.measure import bottleneck, capacityrecord
from autotune.measure.bottleneck import Bottleneck
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.measurement import Measurement
from autotune.measure.speculation import Speculation
from autotune.stored import Stored, json_data
from autotune.tuning.quality.verdict import Quality
from autotune.tuning.records._scalars import capacity_record, short
from autotune.tuning.records.estimate import Estimate
from autotune.tuning.records.measures import Measures
from autotune.tuning.records.origin import BASELINE, SAMPLER, Origin
from autotune.tuning.records.studyrecord import VALIDATION, VALIDATION_VLLM, StudyRecord
from autotune.tuning.records.worker import Worker

# 1: before named constraints and study-level validations; 2: before the short scalars
VERSION = 3
DEFAULTS = "vllm-defaults"
# Outcomes of FAIL trials: the tuner was stopped mid-trial (the trial is queued again), or
# autotune itself failed (its reason is the exception's type, its detail the message).
INTERRUPTED, ERROR = reasons.INTERRUPTED, reasons.ERROR
# An Optuna parameter's value as `space.suggest` draws it (a searched flag's, or a
# speculative decoding knob's), and a trial's parameters by name: what the sampler learns
# from, and what a trial is queued and stored with.
ParamValue: TypeAlias = bool | int | float | str | None
Params: TypeAlias = dict[str, ParamValue]


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the study stored it. Missing attributes read as their defaults."""

    number: int
    state: TrialState
    values: tuple[float, ...] | None = None
    params: Params = field(default_factory=dict)
    datetime_start: dt.datetime | None = None
    datetime_complete: dt.datetime | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    version: int = 1
    # Queued with the trial: a named baseline and its flags (None for a searched trial).
    baseline: str | None = None
    baseline_flags: Flags | None = None
    # What ran: the flags, the command line, where and on what.
    flags: Flags = field(default_factory=dict)
    launched_flags: Flags | None = None
    command: list[str] = field(default_factory=list)
    engine_version: str | None = None
    device: DeviceSeen = field(default_factory=DeviceSeen)
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    launched: bool | None = None
    memory_estimate: Estimate | None = None
    kv_capacity_reported: int | None = None
    startup: Startup = field(default_factory=lambda: Startup.from_dict({}))
    timings: dict[str, float] = field(default_factory=dict)
    ballast: Held | None = None
    # Which worker ran it: id, host, pid, GPU.
    worker: Worker | None = None
    # Why it was tried (see `tried_because`); queued with the trial for a relief move.
    origin: Origin | None = None
    # How it ended and what it measured.
    outcome: str | None = None
    reason: str = ""
    detail: str | None = None
    duplicate_of: int | None = None
    metrics: Measurement = field(default_factory=Measurement)
    measures: Measures | None = None
    quality: Quality | None = None
    # What speculative decoding did during the workload (`autotune.measure.speculation`).
    speculation: Speculation | None = None
    gain: float | None = None
    validation: Validation | None = None
    validation_vllm: Recheck | None = None

    @classmethod
    def of(cls, t: FrozenTrial, study: StudyRecord | None = None) -> TrialRecord:
        """The record of a stored trial; `study` (the study's attributes) supplies
        validations stored after the trial finished."""
        a = t.user_attrs
        known = {f.name for f in dataclasses.fields(cls)} - _FROM_TRIAL
        fields_ = {k: a[k] for k in known if a.get(k) is not None}
        for key in (VALIDATION, VALIDATION_VLLM):
            later = study.validation(key, t.number) if study is not None else None
            if later is not None:
                fields_[key] = later
        for key, kind in _TYPED.items():
            value = fields_.get(key)
            if isinstance(value, Mapping):
                fields_[key] = kind.from_dict(value) if value or key not in _NONE_IF_EMPTY \
                    else None
        constraints = dict(t.constraints)
        if not constraints and isinstance(a.get("constraints"), list):  # version 1, no system attr
            constraints = {str(i): float(c) for i, c in enumerate(a["constraints"])}
        return cls(number=t.number, state=t.state,
                   values=tuple(t.values) if t.values is not None else None,
                   params=_params(t), datetime_start=t.datetime_start,
                   datetime_complete=t.datetime_complete, constraints=constraints,
                   version=int(a.get("record_version") or 1), **fields_)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for `--json`: every field (the typed ones as stored), the state by
        name, `feasible` spelled out."""
        out = dataclasses.asdict(self)
        out.update((k, json_data(getattr(self, k))) for k in _TYPED)
        out["state"] = self.state.name.lower()
        out["feasible"] = self.feasible
        return out

    @property
    def feasible(self) -> bool:
        """Completed, with every constraint met; a completed trial without constraints
        (none was recorded) is not known to be feasible, nor is a capacity search that found
        no rate (studies made before such a search was pruned kept it complete)."""
        return self.state == TrialState.COMPLETE and bool(self.constraints) \
            and all(c <= 0 for c in self.constraints.values()) \
            and (self.capacity is None or bool(self.capacity.low))

    @cached_property
    def capacity(self) -> CapacityRecord | None:
        """The capacity search's record, if the trial ran in capacity mode (read once)."""
        return capacity_record(self.metrics)

    @property
    def tried_because(self) -> Origin:
        """Why the trial was tried; records made before origins were kept read as a
        baseline or the sampler."""
        if self.origin is not None:
            return self.origin
        if self.baseline:
            return Origin(BASELINE, f"baseline {self.baseline}")
        return Origin(SAMPLER, "sampler")

    @property
    def origin_kind(self) -> str:
        return self.tried_because.kind

    @property
    def bottleneck(self) -> Bottleneck | None:
        """What limited the engine: the capacity search's limiting step, else the fixed
        workload's whole run (attributed from its probes for records made before it was
        stored); None where nothing was measured."""
        if self.capacity is not None:
            return self.capacity.limit
        found = self.metrics.bottleneck
        if found is not None and found.kind:
            return found
        probes = self.metrics.probes
        return bottleneck.attribute(probes, self.metrics.client) if probes else None

    @property
    def limit_probes(self) -> dict[str, float | None]:
        """The probe figures the bottleneck was read from."""
        cap = self.capacity
        if cap:
            return capacityrecord.limiting_probes(cap)
        return self.metrics.probes.as_dict() if self.metrics.probes else {}

    @property
    def startup_s(self) -> float | None:
        return self.timings.get("startup_s")

    @property
    def device_name(self) -> str | None:
        return self.device.name

    @property
    def is_defaults(self) -> bool:
        return self.baseline == DEFAULTS

    @property
    def name(self) -> str:
        """The baseline's name, or "" for a searched trial."""
        return self.baseline or ""

    def scalars(self) -> dict[str, Any]:
        """The record's key figures as short scalars (`records.scalars.SCALARS`), derived
        from its long fields, so that a record of any version has them; None where not
        measured."""
        return {"feasible": self.feasible, "outcome": self.outcome, "reason": self.reason,
                "gain": self.gain, **short(self.metrics, self.quality, self.speculation),
                "tried_because": self.tried_because.text}


def _params(t: FrozenTrial) -> Params:
    """The trial's parameters; a trial still waiting has none yet, and reads as the ones it
    was queued with (`Study.enqueue_trial` keeps them as the system attribute
    `fixed_params` until the trial is asked), so a queued configuration can be shown."""
    if t.params or t.state != TrialState.WAITING:
        return dict(t.params)
    queued = t.system_attrs.get("fixed_params")
    return dict(queued) if isinstance(queued, Mapping) else {}


# Fields stored as JSON objects that the record reads as typed values.
_TYPED: dict[str, type[Stored]] = {"metrics": Measurement, "measures": Measures,
                                   "device": DeviceSeen,
                                   "quality": Quality, "startup": Startup,
                                   "memory_estimate": Estimate, "worker": Worker,
                                   "origin": Origin, "speculation": Speculation, "ballast": Held,
                                   VALIDATION: Validation, VALIDATION_VLLM: Recheck}
# Those where an empty object says there is none (nothing estimated or drafted, no worker or
# origin known, not validated), as their readers always took it.
_NONE_IF_EMPTY = {"memory_estimate", "worker", "origin", "speculation", "ballast", VALIDATION,
                  VALIDATION_VLLM}
# Fields of a record that come from Optuna's own trial, not from user attributes.
_FROM_TRIAL = {"number", "state", "values", "params", "datetime_start", "datetime_complete",
               "constraints", "version"}
# The fields a running trial may store (`records.writers.write`): the rest come from Optuna
# or, for validations, from the study after the trial finished.
WRITABLE = frozenset(f.name for f in dataclasses.fields(TrialRecord)) - _FROM_TRIAL \
    - {VALIDATION, VALIDATION_VLLM}
