"""The export formats, one table of them (`FORMATS`: name -> the module's renderer), and
`render`, the entry point: one `ExportContext` built once, handed to the format asked for."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from autotune.errors import ConfigError
from autotune.results.cost import TrialCost
from autotune.results.export import _compose as compose
from autotune.results.export import _jsondoc as jsondoc
from autotune.results.export import _k8s as k8s
from autotune.results.export import _shell as shell
from autotune.results.export import _vllmyaml as vllmyaml
from autotune.results.export._context import ExportContext
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
    study measured (`autotune.results._limits`) and the command that re-checks them. Every
    name and value is data: quoted for the shell, emitted by the YAML or JSON library, and
    made inert in comments.

    Args:
        study: the study (or a snapshot of it) the trial belongs to.
        trial: a feasible trial, usually the decision's (`ranking.choose`).
        format_name: one of `FORMATS` (`cli`, `vllm-yaml`, `compose`, `k8s`, `json`).
        model: the model as the deployment serves it.
        image: the container image of `compose` and `k8s` (None: vLLM's own).
        max_replicas: the k8s autoscaler's ceiling (None: the replicas `sizing` asks for,
            else `k8s.MAX_REPLICAS`).
        sizing: the replicas for a load and the cost where known (`autotune.results.cost`).

    Returns:
        The file's text.

    Raises:
        ConfigError: an unknown format, or an `engine.env` name no shell or manifest takes.
    """
    renderer = FORMATS.get(format_name)
    if renderer is None:
        raise ConfigError(f"export: unknown format {format_name!r}; allowed: "
                          f"{', '.join(FORMATS)}")
    return renderer(ExportContext.of(study, trial, model, image=image,
                                     max_replicas=max_replicas, sizing=sizing))
