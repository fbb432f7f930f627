"""Which of the winner's flags carry its gain (`autotune explain`, and `budget.explain`).

A winner that changes three flags does not say which of them its gain rests on, and a user
should not deploy a flag that buys nothing. Each real override of the winner (a flag not at
vLLM's effective default, `ranking.effective_defaults`; the scenario's fixed flags stay) is
taken away in turn, on a fresh engine, with the capacity search starting at the winner's
rate: a clear loss fails there and one step below, and is pruned (`below_best_capacity`)
after two steps instead of a whole search. The winner itself runs again first, as the
control: rates differ between machines and between a night's start and its end, so the
runs are compared with the winner as it measures beside them as well as with the study's
figure (`WinnerAndControl`). A flag whose removal leaves the capacity tied with either
(overlapping intervals, `capacity.tied`) and the trial feasible carries none of the gain the
study can see. The flags that can go are then taken away together; when that is still tied it is the
smallest configuration that carries the gain. When it is not (two flags that can each go
alone, not both), they go one after another instead, the least loss first, as long as the
capacity stays tied.

Every run is a trial of the study, recorded with its origin ("ablation of #N") and added as
it finished (`writers.append`), so that trials already queued keep their turn; a
configuration some trial already ran is not run again. The explanation is kept with the
study (`explain:N`): `show` prints it, and the ranking rule counts its smallest tied
configuration as a tie of the winner (`autotune.tuning._standing`), so the decision,
`export` and `validate` choose it by default.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune._flags import Flags
from autotune.config import Scenario
from autotune.engine.defaults import same
from autotune.errors import ConfigError
from autotune.measure import capacityrecord, capacitytext, searchplan
from autotune.stored import Stored
from autotune.tuning import ranking
from autotune.tuning import study as study_mod
from autotune.tuning import trial as trial_mod
from autotune.tuning.quality.guard import make_guard
from autotune.tuning.records import studyrecord, writers
from autotune.tuning.records.origin import ABLATION, Origin
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records
from autotune.tuning.records.trialrecord import TrialRecord
from autotune.tuning.sharing import heartbeat

log = logging.getLogger("autotune")


@dataclass(frozen=True)
class OverrideRemoval(Stored):
    """One real override of the winner, and what taking it away did: the trial that ran
    without it, that trial's capacity interval (req/s), whether it is tied with the
    winner, and the share of the winner's gain over the reference that the flag carries,
    with the interval the two capacity intervals allow (`at_least` where the trial was
    pruned below the winner: only its upper bound is known)."""

    flag: str = ""
    value: Any = None
    default: Any = None
    trial: int | None = None
    low: float | None = None
    high: float | None = None
    tied: bool = False
    share: float | None = None
    share_low: float | None = None
    share_high: float | None = None
    at_least: bool = False
    # Why the run without it cannot replace the winner although it completed (the
    # guardrail's verdict, a missed SLO); "" when it is feasible or was pruned.
    rejected: str = ""
    # Why the run without it measured nothing (it was pruned before any rate passed or
    # failed: the engine refused to start, ...); "" otherwise.
    failed: str = ""

    def words(self) -> str:
        """`api-server-count 4 (default 1): 61 % of the gain (48-75 %)`."""
        default = "vLLM's own" if self.default is None else f"{self.default}"
        head = f"{self.flag} {self.value} (default {default}), trial #{self.trial}: "
        if self.tied:
            return head + "tied with the winner without it: carries none of the gain " \
                "the study can see"
        if self.failed:
            return head + f"stays: without it nothing was measured ({self.failed})"
        if self.rejected:
            return head + f"stays: without it the run was rejected ({self.rejected}), at " \
                f"{_rps(self.low)} ({_pct(self.share)} of the gain by capacity alone)"
        if self.share_low is None:
            return head + "no gain to share"
        if self.at_least:
            return head + f"at least {self.share_low:.0%} of the gain (pruned below the " \
                "winner's rate)"
        return head + f"{_pct(self.share)} of the gain ({_pct(self.share_low)} to " \
            f"{_pct(self.share_high)})"


@dataclass(frozen=True)
class Explanation(Stored):
    """The ablation of trial `winner`: each real override's part, and the smallest
    configuration tied with the winner (`minimal`, its trial; the winner itself when every
    flag matters) with its real overrides."""

    winner: int = -1
    reference: int | None = None
    winner_rps: float | None = None
    reference_rps: float | None = None
    parts: tuple[OverrideRemoval, ...] = ()
    together: int | None = None
    minimal: int | None = None
    minimal_flags: Flags = field(default_factory=dict)
    complete: bool = True
    # The control: the winner again on a fresh engine, beside the runs without a flag.
    control: int | None = None
    control_low: float | None = None
    control_high: float | None = None
    control_tied: bool = False
    control_rejected: str = ""
    quality_void: bool = False
    NESTED = {"parts": OverrideRemoval}

    def lines(self) -> list[str]:
        """The explanation in words, one line each."""
        if not self.parts and self.control is None and self.complete:
            return [f"trial #{self.winner} at {_rps(self.winner_rps)} changes nothing from "
                    "vLLM's effective defaults: no flag to take away, no engine launched"]
        out = [f"trial #{self.winner} at {_rps(self.winner_rps)} against #{self.reference} "
               f"at {_rps(self.reference_rps)}; without each of its "
               f"{len(self.parts)} real override(s):"]
        if self.control is not None:
            out.append(f"  control, the winner again on a fresh engine, trial #{self.control}: "
                       f"{_rps(self.control_low)} (to {_rps(self.control_high)}), "
                       + ("tied with the study's figure" if self.control_tied else
                          "not tied with the study's figure: the machine differs from the "
                          "study's; the runs are compared with both"))
        if self.quality_void:
            out.append(f"  the guardrail rejected the winner's own configuration here "
                       f"({self.control_rejected}): its reference does not hold on this "
                       "machine, so quality is not held against the runs below")
        out += [f"  {p.words()}" for p in self.parts]
        if self.minimal is not None:
            flags = " ".join(f"{k}={v}" for k, v in self.minimal_flags.items()) or \
                "(vLLM's defaults)"
            out.append(f"smallest configuration tied with #{self.winner}: #{self.minimal} "
                       f"{flags}" + (" (the winner itself: every flag matters)"
                                     if self.minimal == self.winner and self.parts else ""))
        if not self.complete:
            out.append("the ablation stopped before it was complete (time budget or a "
                       "failed run): the smallest configuration is the smallest found")
        return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _rps(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} req/s"


def _control_origin(winner: TrialRecord) -> Origin:
    return Origin(ABLATION, f"ablation of #{winner.number}: the winner again (the control)",
                  source=winner.number)


def real_overrides(study: StudyOrSnapshot, rec: TrialRecord) -> Flags:
    """The flags of `rec` that change something: not at vLLM's effective default on the
    study's machine, and not the scenario's fixed value (which every trial has)."""
    fixed = ranking.fixed_flags(study)
    own = {k: v for k, v in rec.flags.items() if k not in fixed or not same(fixed[k], v)}
    return ranking.effective_defaults(study).overrides(own)


def without(flags: Mapping[str, Any], names: Sequence[str], fixed: Mapping[str, Any]
            ) -> Flags:
    """`flags` with `names` taken away: back to the scenario's fixed value where it has
    one (every trial runs with those), else left to vLLM."""
    out = {k: v for k, v in flags.items() if k not in names}
    out.update((k, fixed[k]) for k in names if k in fixed)
    return out


def interval(rec: TrialRecord) -> tuple[float, float] | None:
    """Where the trial's capacity lies (req/s); a trial pruned below the winner has only
    its failing rate: (0, that rate)."""
    cap = rec.capacity
    if cap is None:
        return None
    if not cap.low:
        return (0.0, cap.high) if cap.high is not None else None
    return capacityrecord.interval(cap)


@dataclass(frozen=True)
class WinnerAndControl:
    """What a run without a flag must match to stand in for the winner: the winner's
    capacity as the study measured it, or as its control measured it now (the winner
    again on a fresh engine, on the machine the runs share, since absolute rates differ
    from one machine to the next). When the guardrail rejected the control itself, its
    reference does not hold on this machine, and a run rejected on quality alone is not
    held to it."""

    winner: TrialRecord
    control: TrialRecord | None = None

    @property
    def quality_void(self) -> bool:
        c = self.control
        return c is not None and c.state == TrialState.COMPLETE and not c.feasible \
            and _quality_only(c)

    def acceptable(self, rec: TrialRecord) -> bool:
        return rec.feasible or (rec.state == TrialState.COMPLETE and self.quality_void
                                and _quality_only(rec))

    def tied(self, rec: TrialRecord) -> bool:
        """Acceptable, and its capacity cannot be told apart from the winner's (the
        study's figure or the control's)."""
        if rec.capacity is None or not rec.capacity.low or not self.acceptable(rec):
            return False
        return any(capacityrecord.tied(rec.capacity, r.capacity)
                   for r in (self.winner, self.control)
                   if r is not None and r.capacity is not None and r.capacity.low)


def _quality_only(rec: TrialRecord) -> bool:
    """Infeasible through the guardrail's constraint(s) alone."""
    broken = {k for k, v in rec.constraints.items() if v > 0}
    return bool(broken) and all(k.startswith("quality") for k in broken)


def rejection(rec: TrialRecord) -> str:
    """Why a completed trial is infeasible, in words: the guardrail's verdict, else the
    constraints it broke."""
    q = rec.quality
    if q is not None and q.passed is False:
        return f"quality: {q.short()}" if q.verdict else f"quality: drift {q.drift or 0:.3f}"
    broken = [k for k, v in rec.constraints.items() if v > 0]
    return ", ".join(broken) or "infeasible"


def removal(flag: str, value: Any, default: Any, ran: TrialRecord, against: WinnerAndControl,
         reference: TrialRecord | None) -> OverrideRemoval:
    """What taking `flag` away did (pure): the share of the gain it carries is the
    capacity lost without it over the winner's gain, its interval from the two capacity
    intervals; the gain's own uncertainty is the winner's against the reference."""
    ran_i, won = interval(ran), against.winner.capacity
    base = reference.capacity if reference is not None else None
    complete = ran.state == TrialState.COMPLETE
    facts = {"flag": flag, "value": value, "default": default, "trial": ran.number,
             "low": ran.capacity.low if ran.capacity else None,
             "high": ran.capacity.high if ran.capacity else None,
             "tied": against.tied(ran),
             "rejected": "" if against.acceptable(ran) or not complete else rejection(ran),
             "failed": "" if complete or ran_i is not None else
             f"{ran.reason}: {ran.detail.splitlines()[0][:160]}" if ran.detail else ran.reason}
    if ran_i is None or won is None or not won.low or base is None or base.low is None:
        return OverrideRemoval(**facts)
    gain = won.low - base.low
    if gain <= 0:
        return OverrideRemoval(**facts)
    win_i = capacityrecord.interval(won)
    pruned = not (ran.capacity and ran.capacity.low)
    return OverrideRemoval(**facts, share=None if pruned else (won.low - ran_i[0]) / gain,
                share_low=(win_i[0] - ran_i[1]) / gain,
                share_high=None if pruned else (win_i[1] - ran_i[0]) / gain,
                at_least=pruned)


# `measure(flags, origin, again)`: run one configuration as a trial; `again` runs it even
# where a finished trial already ran it (the control).
Measure = Callable[[Flags, Origin, bool], TrialRecord]


def ablate(study: StudyOrSnapshot, winner: TrialRecord, measure: Measure,
           room: Callable[[], bool] = lambda: True) -> Explanation:
    """Take the winner's real overrides away, one at a time, then the ones that can go
    together (see the module's docstring); `measure(flags, origin)` runs one configuration
    as a trial and gives its record, `room()` says whether another run fits the budget."""
    won, won_rps = _explainable(winner)
    reference = ranking.reference_trial(study)
    effective = ranking.effective_defaults(study)
    fixed = ranking.fixed_flags(study)
    real = real_overrides(study, winner)
    parts: list[OverrideRemoval] = []
    ran: dict[str, TrialRecord] = {}
    complete = True
    control = measure(dict(winner.flags), _control_origin(winner), True) \
        if real and room() else None
    against = WinnerAndControl(winner, control)
    for flag, value in real.items():
        if not room():
            complete = False
            break
        default = fixed.get(flag, effective.values.get(flag))
        origin = Origin(ABLATION, f"ablation of #{winner.number}: without {flag} {value}",
                        source=winner.number, knob=flag, before=value, after=default)
        ran[flag] = measure(without(winner.flags, [flag], fixed), origin, False)
        parts.append(removal(flag, value, default, ran[flag], against, reference))
    can_go = sorted((p for p in parts if p.tied), key=lambda p: -(p.low or 0.0))
    minimal, together = winner, None
    if len(can_go) == 1:
        minimal = ran[can_go[0].flag]
    elif can_go and room():
        names = [p.flag for p in can_go]
        both = measure(without(winner.flags, names, fixed), Origin(
            ABLATION, f"ablation of #{winner.number}: without {', '.join(names)}",
            source=winner.number), False)
        together = both.number
        if against.tied(both):
            minimal = both
        else:  # they cannot all go: one after another, least loss first, while tied
            minimal = ran[can_go[0].flag]
            for p in can_go[1:]:
                if not room():
                    complete = False
                    break
                less = measure(without(minimal.flags, [p.flag], fixed), Origin(
                    ABLATION, f"ablation of #{winner.number}: #{minimal.number} without "
                    f"{p.flag} {p.value}", source=winner.number, knob=p.flag, before=p.value),
                    False)
                if against.tied(less):
                    minimal = less
    elif can_go:
        complete = False
    return Explanation(
        winner=winner.number, reference=reference.number if reference else None,
        winner_rps=won_rps,
        reference_rps=reference.capacity.low if reference and reference.capacity else None,
        parts=tuple(parts), together=together, minimal=minimal.number,
        minimal_flags=real_overrides(study, minimal), complete=complete,
        control=control.number if control else None,
        control_low=control.capacity.low if control and control.capacity else None,
        control_high=control.capacity.high if control and control.capacity else None,
        control_tied=bool(control and control.capacity and control.capacity.low
                          and capacityrecord.tied(control.capacity, won)),
        control_rejected="" if control is None or control.feasible
        or control.state != TrialState.COMPLETE else rejection(control),
        quality_void=against.quality_void)


def trial_measure(run: study_mod.RunContext, winner: TrialRecord) -> Measure:
    """`ablate`'s `measure`: a fresh engine per configuration, its capacity search starting
    at the winner's rate and stopped once it fails a step below it, told to the study as a
    trial of its own; a configuration some finished trial already ran is that trial."""
    study = run.study
    won, start = _explainable(winner)
    control_text = _control_origin(winner).text

    def floor() -> float:
        """Stop once a rate one step below the winner's capacity fails too, and below its
        control's (failing at the winner's own rate alone is no clear loss)."""
        lows = [start, capacityrecord.interval(won)[0] * searchplan.AROUND]
        control = next((r for r in records(study, (TrialState.COMPLETE,))
                        if r.tried_because.text == control_text and r.capacity
                        and r.capacity.low), None)
        if control is not None and control.capacity is not None and control.capacity.low:
            lows.append(control.capacity.low)
        return min(lows) / searchplan.AROUND

    def measure(flags: Flags, origin: Origin, again: bool = False) -> TrialRecord:
        twin = _ran_before(study, origin) if again else \
            study_mod.duplicate(Snapshot.of(study), flags, -1)
        if twin is not None:
            log.info("%s: the configuration of trial %d, not run again", origin.text,
                     twin.number)
            return twin
        if run.before_launch is not None:
            run.before_launch()
        n = len(study.get_trials(deepcopy=False))
        started = dt.datetime.now()
        log.info("%s: %s", origin.text, " ".join(trial_mod.command_line(run.model, flags)))
        outcome = run.runner(run.scenario, run.model, flags,
                             trial_dir=run.trials_dir / f"ablation-{winner.number}-{n}",
                             guard=run.guard, intermediate=None,
                             anchor=searchplan.Anchor(floor=floor(), start=start,
                                                    factor=searchplan.AROUND))
        result = study_mod.result_of(run, outcome, n)
        rec = writers.append(study, result.state, result.values, result.constraints, started,
                             **{**result.fields, "origin": origin.as_dict()})
        cap = rec.capacity
        log.info("%s: trial %d %s, capacity %s", origin.text, rec.number,
                 "feasible" if rec.feasible else ranking.state_text(rec),
                 capacitytext.describe(cap) if cap and cap.low else
                 f"below {cap.high:.3g} req/s" if cap and cap.high else "-")
        return rec

    return measure


def _ran_before(study: optuna.Study, origin: Origin) -> TrialRecord | None:
    """The finished trial an earlier `explain` ran for the same reason (its control)."""
    return next((r for r in records(study, (TrialState.COMPLETE, TrialState.PRUNED))
                 if r.origin_kind == ABLATION and r.tried_because.text == origin.text), None)


def explain(study: optuna.Study, scenario: Scenario, study_dir: Path, *,
            trial: int | None = None, runner: study_mod.Runner = trial_mod.run_trial,
            room: Callable[[], bool] = lambda: True) -> Explanation:
    """Explain trial `trial` (default: the study's best feasible trial), keep the
    explanation with the study, and return it."""
    winner = target(study, trial)
    run = study_mod.RunContext(heartbeat.SharedStudy.of(study),
                               trial_mod.with_study_folder(scenario, study_dir),
                               study_mod.resolve_model(scenario), study_dir,
                               make_guard(scenario, study_dir), runner,
                               study_mod.gpu_released(scenario))
    study_mod.sync_reference(run)
    found = ablate(study, winner, trial_measure(run, winner), room)
    studyrecord.store_explanation(study, winner.number, found.as_dict())
    return found


def target(study: optuna.Study, trial: int | None = None) -> TrialRecord:
    """The trial `explain` explains: `trial`, else the study's best (`_to_explain`);
    ConfigError when there is none."""
    winner = ranking.choose(study, trial=trial, what="explain") if trial is not None \
        else _to_explain(study)
    if winner is None:
        raise ConfigError("explain: the study has no feasible completed trial to explain")
    _explainable(winner)
    return winner


def _explainable(winner: TrialRecord) -> tuple[capacityrecord.CapacityRecord, float]:
    """The winner's capacity and its rate, which every comparison of `explain` is made
    against; ConfigError for a trial without one."""
    cap = winner.capacity
    if cap is None or not cap.low:
        raise ConfigError(f"explain: trial #{winner.number} has no capacity at SLO to explain "
                          "(only capacity-mode studies are explained)")
    return cap, cap.low


def _to_explain(study: StudyOrSnapshot) -> TrialRecord | None:
    """The study's winner (`ranking.feasible_best`, the one rule), or the trial whose
    explanation found it as its smallest tied configuration (explaining that again would
    start over)."""
    best = ranking.feasible_best(study)
    if best is None:
        return None
    source = next((n for n, small in ranking.explained(study).items()
                   if small == best.number), best.number)
    return records(study)[source]


def stored(study: StudyOrSnapshot, number: int) -> Explanation | None:
    """Trial `number`'s explanation, if `explain` ran on it."""
    data = Snapshot.of(study).attrs.explanations.get(number)
    return Explanation.from_dict(data) if isinstance(data, Mapping) else None


def latest(study: StudyOrSnapshot) -> Explanation | None:
    """The explanation of the trial `explain` would explain now (the winner, or the trial
    whose explanation found it), or else the last one made."""
    found = Snapshot.of(study).attrs.explanations
    target = _to_explain(study)
    number = target.number if target is not None and target.number in found else \
        max(found, default=None)
    return stored(study, number) if number is not None else None
