"""The last phases of `tune`, inside its time budget, so a run left overnight ends with a
decision rather than a ranking: which of the winner's flags carry its gain
(`budget.explain`, `autotune.tuning.ablation`), then the re-check of the final choice
against vLLM's defaults on fresh engines (`budget.validate`; with `client: vllm`, by vLLM's
own `vllm bench serve`, as `autotune validate --client vllm`).

The final choice is `export`'s (`ranking.choose`): after the ablation, the smallest
configuration tied with the winner. A phase that the time left cannot hold (a run takes
about as long as the longest trial so far) is skipped and says why; so is a re-check with
nothing to compare against (no completed vLLM-defaults trial). Results are kept with the
study, where `show`, the report and `export` read them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune._remeasurements import Recheck, Validation
from autotune.config import Scenario
from autotune.errors import AutotuneError, ConfigError
from autotune.measure import vllmbench
from autotune.tuning import ablation, ranking
from autotune.tuning.records.snapshot import records
from autotune.verify import crosscheck, validate

log = logging.getLogger("autotune")


@dataclass
class Finish:
    """What the last phases did, in words (`lines`), and the re-check's result."""

    lines: list[str] = field(default_factory=list)
    explanation: ablation.Explanation | None = None
    recheck: Validation | Recheck | None = None


def longest_trial_s(study: optuna.Study) -> float:
    """How long one more engine run may take: the longest finished trial so far."""
    spans = [(r.datetime_complete - r.datetime_start).total_seconds()
             for r in records(study, (TrialState.COMPLETE, TrialState.PRUNED))
             if r.datetime_start and r.datetime_complete and r.launched is not False]
    return max(spans, default=0.0)


def explain_and_recheck(study: optuna.Study, scenario: Scenario, study_dir: Path, *,
                        left_s: Callable[[], float | None] = lambda: None,
                        say: Callable[[str], None] = log.info) -> Finish:
    """The phases `scenario.budget` asks for; `left_s()` is the time budget left (None:
    no limit)."""
    done = Finish()

    def note(text: str) -> None:
        done.lines.append(text)
        say(text)

    def room(runs: int = 1) -> bool:
        left = left_s()
        return left is None or left > runs * longest_trial_s(study)

    if scenario.budget.explain:
        if ranking.feasible_best(study) is None:
            note("explain: skipped, no feasible trial to explain")
        elif not room():
            note("explain: skipped, the time budget cannot hold one more run")
        else:
            try:
                done.explanation = ablation.explain(study, scenario, study_dir, room=room)
            except ConfigError as err:
                note(f"explain: skipped, {err}")
            else:
                for line in done.explanation.lines():
                    note(line)
    spec = scenario.budget.validate_
    if spec is not None:
        try:
            candidate, against = validate.pick(study)
        except ConfigError as err:
            note(f"re-check: skipped, {str(err).removeprefix('validate: ')}")
            return done
        if not room(2 * spec.repeats):
            note(f"re-check: skipped, the time budget cannot hold {2 * spec.repeats} more "
                 "engine runs; run it with: autotune validate "
                 f"{study.study_name} --trial {candidate.number} --client {spec.client}")
            return done
        note(f"re-check: trial #{candidate.number} against #{against.number}, "
             f"{spec.repeats} pair(s) of fresh engines, measured by "
             + (crosscheck.CLIENT if spec.client == "vllm" else "autotune's client"))
        try:
            if spec.client == "vllm":
                done.recheck = crosscheck.run_crosscheck(
                    study, candidate, against,
                    crosscheck.RecheckPlan(spec.repeats, spec.step_seconds or vllmbench.STEP_S),
                    study_dir)
                note(f"re-check: {done.recheck.line()}")
            else:
                done.recheck = validate.run_validation(study, candidate, against,
                                                       spec.repeats, study_dir)
                note(f"re-check: {done.recheck.line()}")
        except AutotuneError as err:  # a run that failed: the study and its trials stay
            note(f"re-check: did not complete: {err}")
    return done


def deadline(timeout_s: float | None, started: float) -> Callable[[], float | None]:
    """`explain_and_recheck`'s `left_s` for a time budget of `timeout_s` counted from
    `started` (`time.monotonic`)."""
    if timeout_s is None:
        return lambda: None
    return lambda: timeout_s - (time.monotonic() - started)
