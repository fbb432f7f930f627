"""The operating limits an export carries and the command that re-checks them on the user's
own machine, with what result would mean the export no longer holds."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from autotune.results._limits import Limits
from autotune.results._replica import on_cpu
from autotune.results.export._provenance import inert
from autotune.tuning import ranking
from autotune.tuning.records.snapshot import StudyOrSnapshot
from autotune.tuning.records.trialrecord import TrialRecord


def slos_of(study: StudyOrSnapshot) -> dict[str, float]:
    """The SLOs the study measured capacity under (its stored scenario)."""
    scenario = ranking.stored_scenario(study)
    return dict(scenario.objective.slos) if scenario is not None else {}


@dataclass(frozen=True)
class RecheckCommand:
    """The command that re-measures an export, what result would mean it no longer holds,
    and what running it needs (the JSON export's `recheck`, field by field)."""

    command: str
    no_longer_holds_if: str
    needs: str


def recheck(study: StudyOrSnapshot, trial: TrialRecord, limits: Limits) -> RecheckCommand:
    """The command that re-measures the export against the study's reference (vLLM's
    defaults, where they ran) on the user's own machine with vLLM's own client, and what
    result would mean the export no longer holds."""
    ref = ranking.reference_trial(study)
    itself = ref is not None and ref.number == trial.number
    # validate compares with vLLM's defaults unless told: a study whose defaults did not
    # run compares with its reference, and says so (without it the command is refused)
    against = ["--against", str(ref.number)] if ref is not None and not ref.is_defaults else []
    command = shlex.join(["autotune", "validate", str(study.study_name), "--trial",
                          str(trial.number), *against, "--client", "vllm", "--repeats", "3"])
    # The reference exported (keep vLLM's defaults): the re-check is an A/A run, which
    # measures the noise; no ratio can say it "no longer beats" itself.
    broken = "" if itself else ("the ratio's 95 % interval lies wholly below 1 (it no "
                                "longer beats vLLM's defaults here)")
    if limits.available and limits.safe_rps is not None:
        safe = f"its re-measured capacity falls below the safe rate {limits.safe_rps:.3g} req/s"
        broken = f"{broken}, or {safe}" if broken else safe
    if itself:
        name = ranking.reference_name(study)
        broken = f"{broken} (an A/A run of {name}: it measures the noise)" if broken else \
            f"no ratio can show it: it is {name} itself (an A/A run measures the noise)"
    machine = "a machine like the measured one, with vLLM's CPU build" if on_cpu(trial) \
        else "one GPU like the measured one"
    return RecheckCommand(command, broken, f"the study database and the model; {machine}")


def limit_lines(limits: Limits, check: RecheckCommand) -> list[str]:
    """The operating limits and the re-check command as comment lines (made inert)."""
    return [inert(line) for line in [
        *limits.lines(),
        f"re-check on your machine: {check.command}",
        f"the export no longer holds if {check.no_longer_holds_if}"]]
