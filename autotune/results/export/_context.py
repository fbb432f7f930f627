"""`ExportContext`: everything the formats render, derived once from one study and one feasible
trial (its flags as shipped, provenance, operating limits, re-check, deployment plan and the
comment lines they all carry). Every format module takes one and nothing else."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from autotune._flags import Flags, to_args
from autotune.errors import ConfigError
from autotune.results import _limits as limits_of
from autotune.results._limits import Limits
from autotune.results.cost import TrialCost
from autotune.results.export._plan import CPU_NOTE, Plan, plan, serve_command
from autotune.results.export._provenance import Provenance, comment_lines, inert
from autotune.results.export._recheck import RecheckCommand, limit_lines, recheck, slos_of
from autotune.tuning import ranking
from autotune.tuning.records.snapshot import StudyOrSnapshot
from autotune.tuning.records.trialrecord import TrialRecord

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_names(trial: TrialRecord) -> None:
    """Refuse an `engine.env` name that is not an environment variable name: a script or a
    manifest would carry it where only a name may stand."""
    if bad := [k for k in trial.env if not ENV_NAME.fullmatch(k)]:
        raise ConfigError(f"export: engine.env name {bad[0]!r} is not an environment variable "
                          "name (letters, digits and _, not starting with a digit)")


@dataclass(frozen=True)
class ExportContext:
    """One trial of one study as every format renders it. `flags` are what changes
    something (a flag at vLLM's effective default on the measured machine is left out, and
    a note says so) plus those the study held for its compile cache (`held`: launched, hence
    measured, with the trial's); `serve` starts the engine, the model included and the flags
    not; `notes` are the comment lines every format carries, each made inert; `max_replicas`
    is the k8s autoscaler's ceiling as asked for (None: the format's default)."""

    model: str
    flags: Flags
    held: Flags
    serve: list[str]
    provenance: Provenance
    plan: Plan
    limits: Limits
    recheck: RecheckCommand
    notes: list[str]
    sizing: TrialCost | None = None
    max_replicas: int | None = None

    @classmethod
    def of(cls, study: StudyOrSnapshot, trial: TrialRecord, model: str, *,
           image: str | None = None, max_replicas: int | None = None,
           sizing: TrialCost | None = None) -> ExportContext:
        """The context of `trial`, with the operating limits the study measured
        (`autotune.results._limits`) and the command that re-checks them. `sizing`
        (`autotune.results.cost`) adds the replicas for a load and the cost where known."""
        check_env_names(trial)
        effective = ranking.effective_defaults(study)
        held = trial.startup.warm.flags if trial.startup.warm is not None else {}
        flags: Flags = {**effective.overrides(trial.flags), **held}
        provenance = Provenance.of(study, trial)
        deployment = plan(trial, model, image)
        limits = limits_of.derive(trial, slos_of(study))
        check = recheck(study, trial, limits)
        notes = comment_lines(provenance) + limit_lines(limits, check)
        if sizing is not None and (sizing.load is not None or sizing.per_million is not None):
            notes.append(inert(sizing.line()))
        if held:
            notes.append(inert("measured with " + " ".join(to_args(held)) + ": held by the "
                               "study for its compile cache, so part of what was measured"))
        if left := effective.words(trial.flags):
            notes.append(inert("left out as vLLM's defaults on "
                               f"{provenance.device or 'this machine'}: " + left))
        return cls(model=model, flags=flags, held=held,
                   serve=serve_command(trial, model, flags), provenance=provenance,
                   plan=deployment, limits=limits, recheck=check, notes=notes, sizing=sizing,
                   max_replicas=max_replicas)

    @property
    def env(self) -> dict[str, str]:
        """The scenario's `engine.env`, as strings."""
        return self.plan.env

    @property
    def args(self) -> list[str]:
        """The flags as command-line words."""
        return to_args(self.flags)

    @property
    def env_prefix(self) -> str:
        """`NAME=value ...` before a shell command, each value quoted for the shell."""
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())

    @property
    def launch(self) -> str:
        """`serve` as one shell command line."""
        return shlex.join(self.serve)

    @property
    def shell_notes(self) -> list[str]:
        """The notes of a file run or read from a shell (`cli`, `vllm-yaml`): on the CPU
        build, also why its command is not `vllm serve`."""
        return [*self.notes, *([CPU_NOTE] if self.plan.cpu else [])]

    @property
    def container_notes(self) -> list[str]:
        """The notes of a container deployment (compose, k8s): also its image and resources."""
        return [*self.notes, *(inert(n) for n in self.plan.notes())]
