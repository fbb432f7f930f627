"""The `k8s` format: a Deployment and a Service on vLLM's image, with the trial's resources,
probes sized by its measured start-up, the model's source as a volume, and where the study
measured limits, the autoscaler, its metrics and alerts (`autoscaling`). Written by the YAML
library; the notes are its comments and the Deployment's annotation."""

from __future__ import annotations

import re
from collections.abc import Mapping

import yaml

from autotune.results.export import _autoscaling as autoscaling
from autotune.results.export._context import ExportContext
from autotune.results.export._plan import HF_CACHE, MODEL_CLAIM, PORT, TOKEN_KEY, TOKEN_SECRET, Plan
from autotune.results.export._provenance import commented

MAX_REPLICAS = 4  # the k8s autoscaler's ceiling when no load sizes it


def label_value(text: str) -> str:
    """A Kubernetes label value (<= 63 of [A-Za-z0-9._-], alphanumeric at both ends); the
    name itself goes into an annotation, where any text is allowed."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("._-")
    return value or "study"


def max_replicas(context: ExportContext) -> int:
    """The autoscaler's ceiling: as asked for, else the replicas the load needs, else
    `MAX_REPLICAS`."""
    return context.max_replicas or (context.sizing.replicas if context.sizing else None) \
        or MAX_REPLICAS


def probe(failures: int) -> dict[str, object]:
    """A probe of vLLM's /health, each written in full (a shared one would be a YAML alias)."""
    return {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 10,
            "failureThreshold": failures}


def storage(deployment: Plan) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The container's volume mounts and the pod's volumes: shared memory, then the Hugging
    Face cache or the model's claim."""
    mounts: list[dict[str, object]] = [{"name": "shm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, object]] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{deployment.shm_gib}Gi"}}]
    if deployment.hub:
        mounts.append({"name": "hf-cache", "mountPath": HF_CACHE})
        # Downloaded at each start; a PersistentVolumeClaim here keeps it across restarts.
        volumes.append({"name": "hf-cache", "emptyDir": {}})
    else:
        mounts.append({"name": "model", "mountPath": deployment.model, "readOnly": True})
        volumes.append({"name": "model", "persistentVolumeClaim": {
            "claimName": MODEL_CLAIM, "readOnly": True}})
    return mounts, volumes


def environment(deployment: Plan) -> list[dict[str, object]]:
    """The container's environment; HF_TOKEN from its optional Secret for a model on the Hub."""
    env: list[dict[str, object]] = [{"name": k, "value": v} for k, v in deployment.env.items()]
    if deployment.hub and "HF_TOKEN" not in deployment.env:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": TOKEN_SECRET, "key": TOKEN_KEY, "optional": True}}})
    return env


def container(context: ExportContext, mounts: list[dict[str, object]]) -> dict[str, object]:
    """vLLM's container: its command, resources and probes (start-up: the measured start-up,
    doubled, at least 120 s)."""
    deployment = context.plan
    startup = int(max(120, 2 * (context.provenance.startup_s or 150)))
    limits: dict[str, object] = {"cpu": str(2 * deployment.cpus),
                                 "memory": f"{deployment.memory_gib}Gi"}
    if deployment.gpus:
        limits["nvidia.com/gpu"] = deployment.gpus
    env = environment(deployment)
    return {
        "name": "vllm", "image": deployment.image,
        "command": ["vllm", "serve"],
        "args": [deployment.model, "--host", "0.0.0.0", "--port", str(PORT), *context.args],
        "ports": [{"containerPort": PORT, "name": "http"}],
        **({"env": env} if env else {}),
        "resources": {"requests": {"cpu": str(deployment.cpus),
                                   "memory": f"{deployment.memory_gib}Gi"},
                      "limits": limits},
        "startupProbe": probe(startup // 10 + 1),
        "readinessProbe": probe(3),
        "livenessProbe": probe(6),
        "volumeMounts": mounts,
    }


def render(context: ExportContext) -> str:
    study, notes = context.provenance.study, context.container_notes
    labels: Mapping[str, str] = {"app": "vllm", "autotune/study": label_value(study),
                                 "autotune/trial": str(context.provenance.trial)}
    mounts, volumes = storage(context.plan)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vllm", "labels": dict(labels),
                     "annotations": {"autotune/measured": " | ".join(notes),
                                     "autotune/study": study}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "vllm"}},
                 "template": {"metadata": {"labels": dict(labels), "annotations": {
                     # vLLM's /metrics, for the Prometheus that feeds the autoscaler
                     "prometheus.io/scrape": "true", "prometheus.io/port": str(PORT),
                     "prometheus.io/path": "/metrics"}}, "spec": {
                     "containers": [container(context, mounts)],
                     "volumes": volumes}}},
    }
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "vllm", "labels": dict(labels)},
               "spec": {"selector": {"app": "vllm"},
                        "ports": [{"port": PORT, "targetPort": PORT, "name": "http"}]}}
    documents = [deployment, service,
                 *autoscaling.manifests(context.limits, labels, max_replicas(context))]
    return commented(notes) + "\n" + yaml.safe_dump_all(documents, sort_keys=False)
