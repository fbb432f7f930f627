"""The k8s export's autoscaling on the measured thresholds: a HorizontalPodAutoscaler, the
prometheus-adapter rules that expose its metrics, and the alerts as a Prometheus rule file.

A HorizontalPodAutoscaler (autoscaling/v2) on Pods metrics, not a KEDA ScaledObject: it is
part of Kubernetes itself (no operator to install, and a schema any validator has), and
prometheus-adapter, which serves Prometheus series as custom metrics, is the common way to
feed it. It scales on the larger of two needs: the queue gauge above the threshold the study
saw where the backlog started to grow, and each pod's request rate above the safe rate."""

from __future__ import annotations

from collections.abc import Mapping

import yaml

from autotune.results._limits import Limits
from autotune.results.export._provenance import inert

# The custom metrics the autoscaler reads, as prometheus-adapter serves them from vLLM's
# /metrics (its rules are in the exported ConfigMap): a queue gauge per pod, and each pod's
# completed requests per second.
RATE_METRIC = "vllm_request_success_per_second"
Manifest = dict[str, object]  # one Kubernetes object, as the YAML library writes it


def adapter_name(metric: str) -> str:
    """`vllm:num_requests_running` as the custom metrics API names it."""
    return metric.replace(":", "_")


def pods_metric(name: str, value: float) -> dict[str, object]:
    """A Pods metric target: the average over the pods (a quantity in thousandths)."""
    return {"type": "Pods", "pods": {"metric": {"name": name}, "target": {
        "type": "AverageValue", "averageValue": f"{max(1, round(value * 1000))}m"}}}


def adapter_rule(series: str, exposed: str, query: str, overrides: Mapping[str, object]
                 ) -> dict[str, object]:
    """A prometheus-adapter rule serving `series` (per pod) as the custom metric `exposed`."""
    return {"seriesQuery": f'{series}{{namespace!="",pod!=""}}',
            "resources": {"overrides": overrides},
            "name": {"matches": f"^{series}$", "as": exposed}, "metricsQuery": query}


def manifests(limits: Limits, labels: Mapping[str, str], max_replicas: int
              ) -> list[Manifest]:
    """The autoscaler, the adapter's rules and the alerts; none without limits."""
    if not limits.available or limits.safe_rps is None:
        return []
    metrics: list[dict[str, object]] = []
    rules: list[dict[str, object]] = []
    # Each series per namespace and pod: one mapping, shared by the rules (the YAML writes
    # it once, with an anchor, and refers to it after).
    over = {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    if limits.queue_metric and limits.queue_threshold is not None:
        metrics.append(pods_metric(adapter_name(limits.queue_metric), limits.queue_threshold))
        rules.append(adapter_rule(limits.queue_metric, adapter_name(limits.queue_metric),
                                  "max(max_over_time(<<.Series>>{<<.LabelMatchers>>}"
                                  "[1m])) by (<<.GroupBy>>)", over))
    metrics.append(pods_metric(RATE_METRIC, limits.safe_rps))
    rules.append(adapter_rule("vllm:request_success_total", RATE_METRIC,
                              "sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) "
                              "by (<<.GroupBy>>)", over))
    hpa: Manifest = {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "vllm", "labels": dict(labels), "annotations": {
            "autotune/thresholds": inert(f"{limits.queue_source}; safe rate: "
                                         f"{limits.safe_source}")}},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                    "name": "vllm"},
                 "minReplicas": 1, "maxReplicas": max_replicas, "metrics": metrics,
                 # A new replica takes minutes to start: scale up at once, down slowly.
                 "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0},
                              "scaleDown": {"stabilizationWindowSeconds": 600}}}}
    adapter: Manifest = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "vllm-autotune-adapter-rules", "labels": dict(labels)},
        "data": {"config.yaml": yaml.safe_dump({"rules": rules}, sort_keys=False)}}
    alerts = {"groups": [{"name": "vllm-autotune", "rules": [
        {"alert": w.name, "expr": w.expr, "for": "2m", "annotations": {"summary": w.why}}
        for w in limits.watch]}]}
    rule_file: Manifest = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "vllm-autotune-alerts", "labels": dict(labels)},
        "data": {"vllm-alerts.yaml": yaml.safe_dump(alerts, sort_keys=False)}}
    return [hpa, adapter, rule_file]
