"""The trial record: everything a trial measured, as one typed value, and its only writer.

A study database must explain itself, so each trial keeps what it ran and measured in
Optuna's user attributes. Those are a dictionary of string keys; read by hand in many places
they drift apart (one reader took a missing `feasible` for true, another for false). Here
they are read in one place, `TrialRecord.of`, and written in one place, `write`; every other
module sees a typed `TrialRecord`. Its measures, quality verdict, start-up, memory
estimate, speculation, worker and origin are typed too (`autotune.stored`: any record
version reads, and writes back as it was stored), each defined by the module that makes it,
but for the worker (`Worker`) and the origin (`Origin`): the modules that make those
(`sharing.heartbeat`, `policy.relief`, `ablation`) import this one, so they are defined here.

Feasible has one meaning: the trial completed and every Optuna constraint on it is met
(<= 0). Constraints are Optuna's named constraints (`Trial.set_constraint`); studies written
before them carry a positional list, which `FrozenTrial.constraints` reads as well.

The study's own user attributes (its scenario, vLLM's parser defaults, the guardrail
reference, whether the baselines are queued, the workers) are read here too, once, as a
`StudyRecord`, and written through the setters below it; `Snapshot` is a study read once,
its attributes and every trial's record, for readers that rank and tabulate it several ways.

Validations come after their trial has finished, when Optuna refuses changes to the trial;
they are kept as study user attributes under `validation:<n>` and `validation_vllm:<n>`
(`store_validation`), and `records` puts them back on their trial. Older studies wrote them
on the trial itself; those still read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from autotune import reasons
from autotune.engine.ballast import Held
from autotune.engine.log import Startup
from autotune.measure import bottleneck, capacity
from autotune.measure.bottleneck import Bottleneck
from autotune.measure.capacity import CapacityRecord
from autotune.measure.speculation import Speculation
from autotune.stored import Stored, plain
from autotune.tuning.policy.memory import Estimate
from autotune.tuning.policy.objective import Measures
from autotune.tuning.quality.guardrail import Quality
from autotune.validation import Recheck, Validation

# 1: before named constraints and study-level validations; 2: before the short scalars
VERSION = 3
DEFAULTS = "vllm-defaults"
VALIDATION, VALIDATION_VLLM = "validation", "validation_vllm"
# Outcomes of FAIL trials: the tuner was stopped mid-trial (the trial is queued again), or
# autotune itself failed (its reason is the exception's type, its detail the message).
INTERRUPTED, ERROR = reasons.INTERRUPTED, reasons.ERROR
# Why a trial was tried (`Origin.kind`): a baseline (vLLM's defaults or a named one), the
# sampler's suggestion, a relief move of another trial's bottleneck
# (`autotune.tuning.policy.relief`), or the ablation of a winner (`autotune.tuning.ablation`).
BASELINE, SAMPLER, RELIEF, ABLATION = "baseline", "sampler", "relief", "ablation"


@dataclass(frozen=True)
class Origin(Stored):
    """Why a trial was tried, in words (`text`) and, for a relief move, which trial's
    limit it relieves and the flag it moved. Stored without the figures its kind has not
    (`SPARSE`): a baseline's origin is its kind and text."""

    SPARSE = True

    kind: str = ""
    text: str = ""
    source: int | None = None
    bottleneck: str | None = None
    knob: str | None = None
    before: Any = None
    after: Any = None
    why: str | None = None

    @property
    def short(self) -> str:
        """For a table cell: `relief #0 front_end: api-server-count 1->2`."""
        if self.kind != RELIEF:
            return self.text
        return f"relief #{self.source} {self.bottleneck}: {self.knob} {self.before}->{self.after}"


@dataclass(frozen=True)
class Worker(Stored):
    """One process working on a study (`autotune.tuning.sharing.heartbeat`); stored with
    each trial it runs. A key missing from a stored worker reads as empty (no such
    process)."""

    id: str = ""
    host: str = ""
    pid: int = 0
    started: float = 0.0  # the process's start time: a recycled pid is another process
    gpu: str | None = None

    @classmethod
    def here(cls, worker_id: str | None = None, gpu: str | None = None) -> Worker:
        host, pid = socket.gethostname(), os.getpid()
        return cls(worker_id or f"{host}-{pid}", host, pid, psutil.Process(pid).create_time(),
                   gpu)

    def sees_gone(self, other: Worker | None) -> bool:
        """Whether the worker `other` ran on this host and its process is gone (on another
        host only its heartbeat can tell)."""
        if other is None or other.host != self.host or not other.pid:
            return False
        try:
            proc = psutil.Process(other.pid)
            return proc.status() == psutil.STATUS_ZOMBIE \
                or abs(proc.create_time() - other.started) > 1.0
        except psutil.NoSuchProcess:
            return True
        except (psutil.Error, TypeError, ValueError):
            return False


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the study stored it. Missing attributes read as their defaults."""

    number: int
    state: TrialState
    values: tuple[float, ...] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    datetime_start: dt.datetime | None = None
    datetime_complete: dt.datetime | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    version: int = 1
    # Queued with the trial: a named baseline and its flags (None for a searched trial).
    baseline: str | None = None
    baseline_flags: dict[str, Any] | None = None
    # What ran: the flags, the command line, where and on what.
    flags: dict[str, Any] = field(default_factory=dict)
    launched_flags: dict[str, Any] | None = None
    command: list[str] = field(default_factory=list)
    engine_version: str | None = None
    device: dict[str, Any] = field(default_factory=dict)
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
    metrics: dict[str, Any] = field(default_factory=dict)
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
                   params=dict(t.params), datetime_start=t.datetime_start,
                   datetime_complete=t.datetime_complete, constraints=constraints,
                   version=int(a.get("record_version") or 1), **fields_)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for `--json`: every field (the typed ones as stored), the state by
        name, `feasible` spelled out."""
        out = dataclasses.asdict(self)
        out.update((k, plain(getattr(self, k))) for k in _TYPED)
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
        return _capacity(self.metrics)

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
        found = self.metrics.get("bottleneck")
        if isinstance(found, Mapping) and found.get("kind"):
            return Bottleneck(found["kind"], found.get("text", ""), found.get("valid", True))
        probes = self.metrics.get("probes")
        return bottleneck.attribute(probes, self.metrics.get("client")) if probes else None

    @property
    def limit_probes(self) -> dict[str, Any]:
        """The probe figures the bottleneck was read from."""
        cap = self.capacity
        return capacity.limiting_probes(cap) if cap else dict(self.metrics.get("probes") or {})

    @property
    def startup_s(self) -> float | None:
        return self.timings.get("startup_s")

    @property
    def device_name(self) -> str | None:
        return self.device.get("name")

    @property
    def is_defaults(self) -> bool:
        return self.baseline == DEFAULTS

    @property
    def name(self) -> str:
        """The baseline's name, or "" for a searched trial."""
        return self.baseline or ""

    def scalars(self) -> dict[str, Any]:
        """The record's key figures as short scalars (see `SCALARS`), derived from its long
        fields, so that a record of any version has them; None where not measured."""
        return {"feasible": self.feasible, "outcome": self.outcome, "reason": self.reason,
                "gain": self.gain, **_scalars(self.metrics, self.quality, self.speculation),
                "tried_because": self.tried_because.text}


# Fields stored as JSON objects that the record reads as typed values.
_TYPED: dict[str, type[Stored]] = {"measures": Measures, "quality": Quality, "startup": Startup,
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
WRITABLE = frozenset(f.name for f in dataclasses.fields(TrialRecord)) - _FROM_TRIAL \
    - {VALIDATION, VALIDATION_VLLM}


# Short scalar copies of figures kept inside long fields: optuna-dashboard shows a user
# attribute as text cut at 1,024 characters, so `metrics` and `quality` (several thousand)
# arrive there as broken JSON. `write` stores these beside the fields they come from (record
# version 3), `set_constraints` stores `feasible`; `TrialRecord.scalars` derives them for a
# record of any version. They are not fields of their own: nothing else may write them.
SCALARS = ("feasible", "capacity_rps", "capacity_low", "capacity_high",
           "capacity_uncertainty", "bottleneck", "drift", "agreement", "quality_passed",
           "quality_verdict", "spec_acceptance_rate", "spec_acceptance_length", "tried_because")


def _capacity(metrics: Mapping[str, Any]) -> CapacityRecord | None:
    found = metrics.get("capacity")
    return CapacityRecord.from_dict(found) if found else None


def _scalars(metrics: Mapping[str, Any] | None, quality: Quality | None,
             spec: Speculation | None = None, origin: Origin | None = None) -> dict[str, Any]:
    """The short scalars of `metrics` (capacity, bottleneck), `quality` (drift, ...),
    `spec` (speculative decoding's acceptance) and `origin` (why the trial was tried)."""
    out: dict[str, Any] = {}
    if origin is not None:
        out["tried_because"] = origin.text
    if metrics is not None:
        cap = _capacity(metrics)
        out.update(capacity_rps=(cap.request_throughput if cap.low else 0.0) if cap else None,
                   capacity_low=cap.low if cap else None,
                   capacity_high=cap.high if cap else None,
                   capacity_uncertainty=cap.uncertainty if cap else None,
                   bottleneck=capacity.limit_text(cap) if cap else
                   (metrics.get("bottleneck") or {}).get("text"))
    if quality is not None:
        out.update(drift=quality.drift, agreement=quality.agreement,
                   quality_passed=quality.passed,
                   quality_verdict=quality.words() if quality.verdict else None)
    if spec is not None:
        out.update(spec_acceptance_rate=spec.acceptance_rate,
                   spec_acceptance_length=spec.mean_acceptance_length)
    return out


def write(trial: optuna.Trial, **values: Any) -> None:
    """Store record fields on a running trial (before `tell`); unknown names are a bug.
    Typed values (`Measures`, `Quality`, `Startup`) are stored as their dicts, plain dicts
    as they are. The short scalars of `metrics` and `quality` are stored with them
    (`SCALARS`)."""
    for key, value in user_attrs(**values).items():
        trial.set_user_attr(key, value)


def user_attrs(**values: Any) -> dict[str, Any]:
    """The user attributes that store record fields (`write`'s), with their short scalars;
    unknown names are a bug."""
    unknown = set(values) - WRITABLE
    if unknown:
        raise TypeError(f"not trial record fields: {', '.join(sorted(unknown))}")
    out: dict[str, Any] = {"record_version": VERSION}
    out.update((k, plain(v)) for k, v in values.items())
    quality = out.get("quality")
    short = _scalars(out.get("metrics"),
                     Quality.from_dict(quality) if quality is not None else None,
                     _stored(Speculation, out.get("speculation")),
                     _stored(Origin, out.get("origin")))
    out.update((k, v) for k, v in short.items() if v is not None)
    return out


S = TypeVar("S", bound=Stored)


def _stored(kind: type[S], value: Any) -> S | None:
    """The record a stored (plain) field holds; None for an empty or missing one."""
    return kind.from_dict(value) if isinstance(value, Mapping) and value else None


def append(study: optuna.Study, state: TrialState, values: Sequence[float] | None,
           constraints: Mapping[str, float], started: dt.datetime | None = None,
           **fields: Any) -> TrialRecord:
    """Add a finished trial measured outside Optuna's queue (`autotune explain`'s): added
    as it is (`Study.add_trial`), so that trials already queued keep their turn; `started`
    is when its run began (default: now)."""
    attrs = user_attrs(**fields)
    if constraints:
        attrs["feasible"] = all(float(v) <= 0 for v in constraints.values())
    frozen = optuna.trial.create_trial(
        state=state, values=list(values) if state == TrialState.COMPLETE and values else None,
        user_attrs=attrs, constraints={k: float(v) for k, v in constraints.items()})
    if started is not None:
        frozen.datetime_start = started
    study.add_trial(frozen)
    return TrialRecord.of(study.get_trials(deepcopy=False)[-1], StudyRecord.of(study))


def queued(baseline: str | None, flags: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user attributes a queued trial starts with (`Study.enqueue_trial`)."""
    return {"baseline": baseline, "baseline_flags": dict(flags) if flags is not None else None}


def queued_move(flags: Mapping[str, Any] | None, origin: Mapping[str, Any]) -> dict[str, Any]:
    """What a relief move is queued with: why it is tried, and its flags where the space
    cannot express them as parameters (`flags` None where it can)."""
    return {**(queued(None, flags) if flags is not None else {}), "origin": dict(origin)}


def queued_again(rec: TrialRecord) -> dict[str, Any]:
    """What a trial that did not finish takes back into the queue: its baseline or its
    queued flags, and why it was tried."""
    out = queued(rec.baseline, rec.baseline_flags) if rec.baseline_flags is not None else {}
    if rec.origin is not None:
        out["origin"] = plain(rec.origin)
    return out


def set_constraints(trial: optuna.Trial, constraints: Mapping[str, float]) -> None:
    """Optuna's named constraints: a trial is feasible when every value is <= 0. `feasible`
    is stored beside them as a plain attribute (a pruned trial breaks `completed`, so it is
    false there), for readers that show attributes but not constraints."""
    for key, value in constraints.items():
        trial.set_constraint(key, float(value))
    if constraints:
        trial.set_user_attr("feasible", all(float(v) <= 0 for v in constraints.values()))


def records(study: optuna.Study | Snapshot, states: Sequence[TrialState] | None = None
            ) -> list[TrialRecord]:
    """Every trial of a study (or those in `states`) as records, validations included; of
    a `Snapshot`, those it read."""
    if isinstance(study, Snapshot):
        return [r for r in study.trials if not states or r.state in states]
    attrs = StudyRecord.of(study)
    return [TrialRecord.of(t, attrs)
            for t in study.get_trials(deepcopy=False, states=tuple(states) if states else None)]


# The study's own attributes: the scenario `tune` ran (plain data), vLLM's parser defaults of
# the flags it sets, the guardrail reference (which trial made it, and its contents, so that
# a worker on another host checks against the same one), whether the named baselines are
# queued, and each worker that registered (`worker:<id>`).
SCENARIO, ENGINE_DEFAULTS, REFERENCE, REFERENCE_DATA = \
    "scenario", "engine_defaults", "reference", "reference_data"
EXPLANATION = "explain"  # `explain:<n>`: the ablation of trial n (`tuning.ablation`)
BASELINES_QUEUED, WORKER = "baselines_enqueued", "worker:"


@dataclass(frozen=True)
class StudyRecord:
    """A study's own user attributes, read once (`of`). Missing ones read as None (or {},
    False); `engine_defaults` and `reference_data` are None only where never stored."""

    scenario: dict[str, Any] = field(default_factory=dict)
    engine_defaults: dict[str, Any] | None = None
    reference: dict[str, Any] | None = None
    reference_data: Any = None
    baselines_queued: bool = False
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    validations: dict[tuple[str, int], Any] = field(default_factory=dict)
    explanations: dict[int, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, study: optuna.Study) -> StudyRecord:
        a = study.user_attrs
        found: dict[tuple[str, int], Any] = {}
        explained: dict[int, Any] = {}
        for k, v in a.items():
            key, _, number = k.partition(":")
            if key in (VALIDATION, VALIDATION_VLLM) and number.isdigit():
                found[key, int(number)] = v
            elif key == EXPLANATION and number.isdigit():
                explained[int(number)] = v
        return cls(scenario=a.get(SCENARIO) or {}, engine_defaults=a.get(ENGINE_DEFAULTS),
                   reference=a.get(REFERENCE), reference_data=a.get(REFERENCE_DATA),
                   baselines_queued=bool(a.get(BASELINES_QUEUED)),
                   workers={k.removeprefix(WORKER): v for k, v in a.items()
                            if k.startswith(WORKER) and isinstance(v, dict)},
                   validations=found, explanations=explained)

    def validation(self, key: str, number: int) -> Any:
        """Trial `number`'s validation stored with the study (`store_validation`), or None."""
        return self.validations.get((key, number))


def set_scenario(study: optuna.Study, scenario: Mapping[str, Any]) -> None:
    study.set_user_attr(SCENARIO, dict(scenario))


def set_engine_defaults(study: optuna.Study, defaults: Mapping[str, Any]) -> None:
    study.set_user_attr(ENGINE_DEFAULTS, dict(defaults))


def set_reference(study: optuna.Study, path: str, trial: int) -> None:
    """Note which trial made the guardrail reference, and where it keeps it."""
    study.set_user_attr(REFERENCE, {"path": path, "trial": trial})


def set_reference_data(study: optuna.Study, data: Any) -> None:
    """The guardrail reference's contents, for workers on other hosts."""
    study.set_user_attr(REFERENCE_DATA, data)


def set_baselines_queued(study: optuna.Study) -> None:
    study.set_user_attr(BASELINES_QUEUED, True)


def set_worker(study: optuna.Study, worker_id: str, data: Mapping[str, Any]) -> None:
    """Register a worker with the study (`autotune.tuning.sharing.heartbeat.register`)."""
    study.set_user_attr(f"{WORKER}{worker_id}", dict(data))


def store_validation(study: optuna.Study, number: int, key: str, value: Any) -> None:
    """Keep a validation of finished trial `number` (a study user attribute: Optuna allows
    no change to a finished trial). `key` is VALIDATION or VALIDATION_VLLM."""
    if key not in (VALIDATION, VALIDATION_VLLM):
        raise ValueError(f"not a validation key: {key!r}")
    study.set_user_attr(f"{key}:{number}", value)


def store_explanation(study: optuna.Study, number: int, value: Any) -> None:
    """Keep the ablation of finished trial `number` (`autotune.tuning.ablation`)."""
    study.set_user_attr(f"{EXPLANATION}:{number}", value)


@dataclass(frozen=True)
class Snapshot:
    """A study read once: its attributes and every trial's record (by number), for readers
    that rank and tabulate the same trials several ways (`autotune show`, the report)."""

    study: optuna.Study
    attrs: StudyRecord
    trials: tuple[TrialRecord, ...]

    @classmethod
    def of(cls, study: optuna.Study | Snapshot) -> Snapshot:
        if isinstance(study, Snapshot):
            return study
        attrs = StudyRecord.of(study)
        return cls(study, attrs, tuple(TrialRecord.of(t, attrs)
                                       for t in study.get_trials(deepcopy=False)))

    @property
    def study_name(self) -> str:
        return self.study.study_name

    @property
    def directions(self) -> list[optuna.study.StudyDirection]:
        return self.study.directions


# What readers take: a study, or one read once (`Snapshot.of` gives the latter either way).
Source = optuna.Study | Snapshot


def add(study: optuna.Study, state: TrialState = TrialState.COMPLETE, *,
        values: Sequence[float] | None = None, constraints: Mapping[str, float] | None = None,
        params: Mapping[str, Any] | None = None,
        distributions: Mapping[str, optuna.distributions.BaseDistribution] | None = None,
        **fields: Any) -> TrialRecord:
    """Add a trial with its record through Optuna's ask-and-tell API, as the study loop
    writes one: for tests, and for bringing figures measured elsewhere into a study."""
    if params:
        study.enqueue_trial(dict(params), skip_if_exists=False)
    trial = study.ask(fixed_distributions=dict(distributions or {}))
    if constraints:
        set_constraints(trial, constraints)
    write(trial, **fields)
    if state == TrialState.COMPLETE:
        study.tell(trial, list(values or ()))
    elif state != TrialState.RUNNING:
        study.tell(trial, state=state)
    return TrialRecord.of(study.get_trials(deepcopy=False)[trial.number], StudyRecord.of(study))
