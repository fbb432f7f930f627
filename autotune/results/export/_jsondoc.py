"""The `json` format: the export's facts for a program to read, made of typed records (the
provenance, then `Artifact`: the flags, the command, the limits, the re-check, the sizing and
the deployment), written by the JSON library."""

from __future__ import annotations

import json
from dataclasses import dataclass

from autotune._flags import Flags
from autotune.results._limits import Limits
from autotune.results.cost import TrialCost
from autotune.results.export._context import ExportContext
from autotune.results.export._plan import Plan
from autotune.results.export._recheck import RecheckCommand
from autotune.stored import json_data


@dataclass(frozen=True)
class Deployment:
    """A container deployment's image and resources, and where its model comes from."""

    image: str
    gpus: int
    cpus: int
    memory_gib: int
    shm_gib: int
    model_source: str  # hub | path

    @classmethod
    def of(cls, deployment: Plan) -> Deployment:
        return cls(deployment.image, deployment.gpus, deployment.cpus, deployment.memory_gib,
                   deployment.shm_gib, "hub" if deployment.hub else "path")


@dataclass(frozen=True)
class Artifact:
    """What the JSON export says beside its provenance, in the order it says it."""

    model: str
    flags: Flags
    env: dict[str, str]
    command: list[str]  # the engine's command line, flags included
    operating_limits: Limits
    recheck: RecheckCommand
    sizing: TrialCost | None
    deployment: Deployment

    @classmethod
    def of(cls, context: ExportContext) -> Artifact:
        return cls(context.model, context.flags, context.env, [*context.serve, *context.args],
                   context.limits, context.recheck, context.sizing, Deployment.of(context.plan))


def render(context: ExportContext) -> str:
    document = {**json_data(context.provenance), **json_data(Artifact.of(context))}
    return json.dumps(document, indent=2) + "\n"
