"""Where trials stand: the reference every score is relative to, what counts as an override,
and the study's winner.

The ranking rule itself is `autotune.tuning._standing` (capacity at SLO where the study
measures it, ties only where intervals overlap, then the fewest overrides; the weighted
score for a fixed workload); `standing` reads a study into it. The study loop, `show`,
`report`, `export`, `validate` and `explain` all rank through here, on `TrialRecord`s; each
function takes the study or a `records.snapshot.Snapshot` of it (read once, for a caller
that ranks it several ways).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence

from optuna.trial import TrialState

from autotune._flags import Flags, integer
from autotune._slo import Slo
from autotune.config import Scenario
from autotune.engine import defaults as defaults_mod
from autotune.engine.defaults import Effective, Machine
from autotune.errors import ConfigError
from autotune.tuning import _standing as rule
from autotune.tuning._standing import (  # noqa: F401 (`overrides` re-exported: ranking's API)
    CAPACITY,
    PARETO,
    SCORE,
    Standing,
    overrides,
)
from autotune.tuning.records.measures import Measures
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records
from autotune.tuning.records.studyrecord import StudyRecord
from autotune.tuning.records.trialrecord import TrialRecord

POLICIES = ("max-throughput", "min-latency", "balanced")
_NEVER = dt.datetime.max  # sorts a trial without a completion time last


def _attrs(study: StudyOrSnapshot) -> StudyRecord:
    return study.attrs if isinstance(study, Snapshot) else StudyRecord.of(study)


def objective_value(rec: TrialRecord) -> float:
    """A completed trial's (first) objective value: Optuna gives every completed trial one."""
    assert rec.values is not None, f"trial {rec.number} has no value ({rec.state.name})"
    return rec.values[0]


def measures_of(rec: TrialRecord) -> Measures:
    """A trial's measures; only for trials that carry them (`feasible` keeps those)."""
    assert rec.measures is not None, f"trial {rec.number} has no measures"
    return rec.measures


def reference_trial(study: StudyOrSnapshot) -> TrialRecord | None:
    """The trial scores are relative to: vLLM's defaults, else the trial that completed first
    (on a 24 GB card the defaults' max-model-len does not fit, and they never run).

    First by completion, not by number: with several workers a lower-numbered trial can
    complete after a higher one, and the stand-in must not change once scores used it."""
    done = records(study, (TrialState.COMPLETE,))
    done.sort(key=lambda r: (not r.is_defaults, r.datetime_complete or _NEVER, r.number))
    return next((r for r in done if r.measures), None)


def reference_name(study: StudyOrSnapshot) -> str:
    """What gains are over, for display: "vLLM defaults" or the trial standing in for them."""
    r = reference_trial(study)
    if r is None or r.is_defaults:
        return "vLLM defaults"
    return f"{r.baseline or 'trial'} #{r.number} (vLLM defaults did not run)"


def stored_scenario(study: StudyOrSnapshot) -> Scenario | None:
    """The scenario `tune` stored with the study (`records.storedscenario`); None for a
    foreign study."""
    return _attrs(study).scenario.scenario


def emulated_gib(study: StudyOrSnapshot) -> float | None:
    """The card the study's scenario emulates (`hardware.memory_gib`), or None."""
    scenario = stored_scenario(study)
    return scenario.hardware.memory_gib if scenario is not None else None


def fixed_flags(study: StudyOrSnapshot) -> Flags:
    """The scenario's fixed engine flags (set for every trial, so not an override)."""
    scenario = stored_scenario(study)
    return dict(scenario.engine.flags) if scenario is not None else {}


def machine(study: StudyOrSnapshot) -> Machine | None:
    """What the study's engines ran on, as the platform rules see it: the emulated card
    where the scenario emulates one, else the GPU its trials recorded, else the CPU build;
    None where no trial says (nothing launched)."""
    world = 1
    for key in ("tensor-parallel-size", "pipeline-parallel-size"):
        world *= integer(fixed_flags(study), key, 1)
    emulated = emulated_gib(study)
    for r in records(study):
        if (r.device_name or "").lower() == "cpu" or "cpu" in (r.engine_version or ""):
            return Machine("cpu", world_size=world)
        if r.device_name:
            return Machine("cuda", None if emulated else r.device_name,
                           float(emulated) * 1024 if emulated else r.device.memory_mib,
                           world)
    return None


def effective_defaults(study: StudyOrSnapshot) -> Effective:
    """vLLM's effective defaults where the study ran (`autotune.engine.defaults`): the
    parser's (recorded when the study started), the platform's rules for its machine, and
    what its engines said at start-up about flags they were not given (vLLM's defaults'
    engine first). An emulated card's batch defaults are its own, not the real card's."""
    snap = Snapshot.of(study)  # every trial read once, for the machine and the facts
    found = machine(snap)
    rules = defaults_mod.platform_rules(found) if found else {}
    facts: Flags = {}
    rows = sorted(records(snap), key=lambda r: (not r.is_defaults, r.number))
    for r in rows:
        if r.launched is not False and r.duplicate_of is None:
            for k, v in defaults_mod.startup_facts(r.flags, r.startup).items():
                facts.setdefault(k, v)
    if emulated_gib(snap):
        facts.pop("max-num-batched-tokens", None)  # the real card's, not the emulated one's
    return Effective.of(snap.attrs.engine_defaults or {}, rules, facts)


def not_overrides(study: StudyOrSnapshot) -> Flags:
    """Flag values that do not count as overriding vLLM's defaults: vLLM's effective
    defaults on the study's machine (`effective_defaults`) and the scenario's fixed flags."""
    return {**effective_defaults(study).values, **fixed_flags(study)}


def feasible(study: StudyOrSnapshot) -> list[TrialRecord]:
    """Completed trials that met every constraint and carry measures."""
    return [r for r in records(study, (TrialState.COMPLETE,)) if r.feasible and r.measures]


def basis(study: StudyOrSnapshot) -> str:
    """What ranks the study's trials: `CAPACITY` where it measures capacity at SLO (its
    stored scenario's workload mode is capacity; without a stored scenario, its trials
    carry capacity records), `SCORE` (the weighted score) for a fixed workload, `PARETO`
    for several objectives."""
    if len(study.directions) != 1:
        return PARETO
    scenario = stored_scenario(study)
    if scenario is not None:
        return CAPACITY if scenario.workload.mode == "capacity" else SCORE
    measured = any(r.capacity is not None and r.capacity.low for r in records(study))
    return CAPACITY if measured else SCORE


def explained(study: StudyOrSnapshot) -> dict[int, int]:
    """Each trial `explain` ran on, to the smallest configuration it found tied with it
    (kept with the study as `explain:N`, `autotune.tuning.ablation`)."""
    out = {}
    for number, data in _attrs(study).explanations.items():
        minimal = data.get("minimal") if isinstance(data, Mapping) else None
        if isinstance(minimal, int):
            out[number] = minimal
    return out


def standing(study: StudyOrSnapshot, candidates: Sequence[TrialRecord] | None = None
             ) -> Standing:
    """The study's feasible trials (or `candidates`) ranked by the one rule
    (`autotune.tuning._standing.rank`), as the study measured them: by capacity at SLO, or
    by the weighted score for a fixed workload; a Pareto study's by capacity, for its
    table alone (it has no single winner)."""
    snap = Snapshot.of(study)  # read once: the basis, the defaults, the explanations
    by = basis(snap)
    pool = feasible(snap) if candidates is None else list(candidates)
    if by == SCORE:
        pool = [r for r in pool if len(r.values or ()) == 1]
    return rule.rank(pool, not_overrides(snap), by, score=objective_value,
                     explained=explained(snap))


def feasible_best(study: StudyOrSnapshot) -> TrialRecord | None:
    """The study's winner by the one rule (`standing`): what `show` decides, `export` and
    `validate` choose and `explain` explains; None without a feasible trial, and in a
    Pareto study."""
    return standing(study).winner


def choose(study: StudyOrSnapshot, *, trial: int | None = None, policy: str = "balanced",
           slos: Mapping[str, float] | None = None, what: str = "export") -> TrialRecord:
    """A given trial number, or the best feasible trial under a policy (`export`'s and
    `validate`'s choice); ConfigError, prefixed with `what`, when there is none.

    `balanced` is the study's own rule (`standing`: the decision). Where the study
    measures capacity, `max-throughput` is that rule too (capacity at SLO is its
    throughput; a gain inside the noise is not worth extra flags); for a fixed workload it
    ranks by throughput alone. `min-latency` is the lowest latency each trial measured
    (at its own capacity, in a capacity study). A Pareto study's `balanced` is the best
    throughput per unit of latency."""
    if trial is not None:
        rows = records(study)
        if not 0 <= trial < len(rows):
            raise ConfigError(f"{what}: no trial {trial} (the study has {len(rows)})")
        rec = rows[trial]
        if not rec.feasible:
            raise ConfigError(f"{what}: trial {trial} is not a feasible completed trial "
                              f"({state_text(rec)}); only configurations that met the SLOs "
                              "and the guardrail qualify")
        return rec
    if policy not in POLICIES:
        raise ConfigError(f"{what}: unknown policy {policy!r}; allowed: {', '.join(POLICIES)}")
    candidates = [r for r in feasible(study) if _meets(r, slos or {}, what)]
    if not candidates:
        raise ConfigError(f"{what}: no feasible completed trial meets "
                          + (", ".join(f"{k}<={v:g}" for k, v in (slos or {}).items())
                             or "the study's constraints"))
    by = basis(study)
    if policy == "min-latency":
        return min(candidates, key=lambda r: measures_of(r).latency_ms)
    if by == PARETO:  # the best throughput per unit of latency
        return max(candidates, key=lambda r: math.log(measures_of(r).throughput)
                   - math.log(measures_of(r).latency_ms))
    if policy == "max-throughput" and by == SCORE:
        found = rule.rank(candidates, not_overrides(study), SCORE,
                          score=lambda r: measures_of(r).throughput).winner
    else:
        found = standing(study, candidates).winner
    assert found is not None  # there are candidates
    return found


def state_text(rec: TrialRecord) -> str:
    """`pruned: oom`, `complete: infeasible`: a trial's state and why, for messages."""
    why = rec.reason or ("infeasible" if rec.state == TrialState.COMPLETE else "")
    return rec.state.name.lower() + (f": {why}" if why else "")


def _meets(rec: TrialRecord, slos: Mapping[str, float], what: str) -> bool:
    for key, limit in slos.items():
        goal = Slo(key, limit)
        try:
            value = rec.metrics.value(goal.summary_key)
        except ValueError as err:
            raise ConfigError(f"{what}: --slo {key}: {err}") from None
        if not goal.met(value):
            return False
    return True
