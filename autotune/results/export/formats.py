"""The export formats, one table of them (`FORMATS`: name -> the module's renderer), and
`render`, the entry point: one `ExportContext` built once, handed to the format asked for."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from autotune.errors import ConfigError
from autotune.results.cost import TrialCost
from autotune.results.export import compose, jsondoc, k8s, shell, vllmyaml
from autotune.results.export.context import ExportContext, check_env_names
from autotune.tuning.records.snapshot import StudyOrSnapshot
from autotune.tuning.records.trialrecord import TrialRecord

Renderer = Callable[[ExportContext], str]

# `autotune export --format NAME`, in the order the help lists them.
FORMATS: Mapping[str, Renderer] = {
    "cli": shell.render,
    "vllm-yaml": vllmyaml.render,
    "compose": compose.render,
    "k8s": k8s.render,
    "json": jsondoc.render,
}


def render(study: StudyOrSnapshot, trial: TrialRecord, format_name: str, model: str, *,
           image: str | None = None, max_replicas: int | None = None,
           sizing: TrialCost | None = None) -> str:
    """The artifact for `trial` in the format `format_name`, with the operating limits the
    study measured (`autotune.results.limits`) and the command that re-checks them. Every
    name and value is data: quoted for the shell, emitted by the YAML or JSON library, and
    made inert in comments. `sizing` (`autotune.results.cost`) adds the replicas for a load
    and the cost where known; the k8s autoscaler's `max_replicas` defaults to those
    replicas, else to `k8s.MAX_REPLICAS`."""
    check_env_names(trial)
    renderer = FORMATS.get(format_name)
    if renderer is None:
        raise ConfigError(f"export: unknown format {format_name!r}; allowed: "
                          f"{', '.join(FORMATS)}")
    return renderer(ExportContext.of(study, trial, model, image=image,
                                     max_replicas=max_replicas, sizing=sizing))
