"""Export a measured configuration to a deployment: CLI, vLLM YAML, compose, Kubernetes, JSON.

Only feasible completed trials can be exported (SLOs met, quality guardrail
passed). Every artifact carries the figures it was chosen on and the study and
trial it came from, in comments where the format allows.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

import optuna
import yaml

from autotune.errors import ConfigError
from autotune.flags import to_args
from autotune.measure import capacity
from autotune.tuning import crosscheck, paired
from autotune.tuning.ranking import POLICIES, choose, reference_name  # noqa: F401 (export's API)
from autotune.tuning.record import TrialRecord

FORMATS = ("cli", "vllm-yaml", "compose", "k8s", "json")
PORT = 8000
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def facts(study: optuna.Study, r: TrialRecord) -> dict[str, Any]:
    """What the export says about where it came from and what was measured."""
    m, q = r.metrics, r.quality or {}
    return {
        "study": study.study_name, "trial": r.number,
        "baseline": r.baseline,
        "engine": r.engine_version,
        "device": r.device_name,
        "gain_over_defaults": r.gain,
        "gain_over": reference_name(study),
        "output_throughput": m.get("output_throughput"),
        "request_throughput": m.get("request_throughput"),
        "median_ttft_ms": m.get("median_ttft_ms"), "p95_ttft_ms": m.get("p95_ttft_ms"),
        "median_tpot_ms": m.get("median_tpot_ms"),
        "memory_mib": (r.measures or {}).get("memory_mib"),
        "quality_drift": q.get("drift"), "quality_passed": q.get("passed"),
        "startup_s": r.startup_s,
        "validation": paired.compact(r.validation),
        "validation_vllm": crosscheck.compact(r.validation_vllm),
        "capacity": capacity.describe(m["capacity"]) if m.get("capacity") else None,
    }


def inert(text: str) -> str:
    """`text` on one line with no control characters, for a `#` comment: a newline in a
    study or baseline name must not end the comment and start a command."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in str(text))


def comment_lines(f: Mapping[str, Any]) -> list[str]:
    """The comment lines of an export, each made inert (names are user data)."""
    def num(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    return [inert(line) for line in [
        f"autotune: study {f['study']}, trial {f['trial']}"
        + (f" ({f['baseline']})" if f["baseline"] else "")
        + f", {f['engine']} on {f['device']}",
        f"measured: {num(f['output_throughput'], '.1f')} output tok/s, "
        f"{num(f['request_throughput'], '.2f')} req/s, TTFT p50/p95 "
        f"{num(f['median_ttft_ms'], '.1f')}/{num(f['p95_ttft_ms'], '.1f')} ms, TPOT p50 "
        f"{num(f['median_tpot_ms'], '.2f')} ms, memory {num(f['memory_mib'], '.0f')} MiB",
        f"gain over {f['gain_over']} {num(f['gain_over_defaults'], '+.1%')}; quality drift "
        f"{num(f['quality_drift'], '.4f')} nats ("
        + ("passed" if f["quality_passed"] else "not checked") + ")",
    ] + ([f"capacity at SLO: {f['capacity']}"] if f.get("capacity") else []) \
      + ([f"validated: {paired.one_line(f['validation'])}"] if f.get("validation") else []) \
      + ([f"re-measured: {crosscheck.headline(f['validation_vllm'])}"]
         if f.get("validation_vllm") else [])]


def render(study: optuna.Study, r: TrialRecord, fmt: str, model: str,
           image: str | None = None) -> str:
    """The artifact for trial `r` in format `fmt`. Every name and value is data: quoted for
    the shell, emitted by the YAML or JSON library, and made inert in comments."""
    flags: dict[str, Any] = dict(r.flags)
    env: dict[str, str] = {k: str(v) for k, v in r.env.items()}
    if bad := [k for k in env if not ENV_NAME.fullmatch(k)]:
        raise ConfigError(f"export: engine.env name {bad[0]!r} is not an environment variable "
                          "name (letters, digits and _, not starting with a digit)")
    f = facts(study, r)
    notes = comment_lines(f)
    args = to_args(flags)
    version = str(f["engine"] or "").rsplit("-", 1)[-1]
    image = image or (f"vllm/vllm-openai:v{version}" if version[:1].isdigit()
                      else "vllm/vllm-openai:latest")
    if fmt == "cli":
        lines = [*(f"# {n}" for n in notes)]
        groups = [" ".join(shlex.quote(a) for a in to_args({k: v})) for k, v in flags.items()]
        lines += [" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
                  + (" " if env else "") + "vllm serve " + shlex.quote(model)
                  + "".join(f" \\\n    {g}" for g in groups)]
        return "\n".join(lines) + "\n"
    if fmt == "vllm-yaml":
        head = [*(f"# {n}" for n in notes),
                f"# use: vllm serve {inert(shlex.quote(model))} --config THIS_FILE"]
        body = yaml.safe_dump(flags, sort_keys=False, allow_unicode=True) if flags else "{}\n"
        return "\n".join(head) + "\n" + body
    if fmt == "json":
        return json.dumps({**f, "model": model, "flags": flags, "env": env,
                           "command": ["vllm", "serve", model, *args]}, indent=2) + "\n"
    if fmt == "compose":
        return _compose(notes, model, args, env, image)
    if fmt == "k8s":
        return _k8s(notes, model, args, env, image, f)
    raise ConfigError(f"export: unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")


def _compose(notes: list[str], model: str, args: list[str], env: dict[str, str],
             image: str) -> str:
    service = {
        "image": image,
        "command": [model, "--host", "0.0.0.0", "--port", str(PORT), *args],
        "ports": [f"{PORT}:{PORT}"],
        "ipc": "host",
        "environment": env or None,
        "deploy": {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]}}},
        "healthcheck": {"test": ["CMD", "curl", "-fsS", f"http://localhost:{PORT}/health"],
                        "interval": "15s", "timeout": "5s", "retries": 3,
                        "start_period": "300s"},
    }
    doc = {"services": {"vllm": {k: v for k, v in service.items() if v is not None}}}
    return "\n".join(f"# {n}" for n in notes) + "\n" + yaml.safe_dump(doc, sort_keys=False)


def _k8s(notes: list[str], model: str, args: list[str], env: dict[str, str], image: str,
         f: Mapping[str, Any]) -> str:
    labels = {"app": "vllm", "autotune/study": label_value(str(f["study"])),
              "autotune/trial": str(f["trial"])}
    startup = int(max(120, 2 * (f.get("startup_s") or 150)))  # measured start-up, doubled
    probe = {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 10}
    container = {
        "name": "vllm", "image": image,
        "args": [model, "--host", "0.0.0.0", "--port", str(PORT), *args],
        "ports": [{"containerPort": PORT, "name": "http"}],
        "env": [{"name": k, "value": v} for k, v in env.items()] or None,
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "startupProbe": {**_copy(probe), "failureThreshold": startup // 10 + 1},
        "readinessProbe": {**_copy(probe), "failureThreshold": 3},
        "livenessProbe": {**_copy(probe), "failureThreshold": 6},
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vllm", "labels": dict(labels),
                     "annotations": {"autotune/measured": " | ".join(notes),
                                     "autotune/study": str(f["study"])}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "vllm"}},
                 "template": {"metadata": {"labels": dict(labels)}, "spec": {
                     "containers": [{k: v for k, v in container.items() if v is not None}],
                     "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}]}}},
    }
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "vllm", "labels": dict(labels)},
               "spec": {"selector": {"app": "vllm"},
                        "ports": [{"port": PORT, "targetPort": PORT, "name": "http"}]}}
    return "\n".join(f"# {n}" for n in notes) + "\n" + yaml.safe_dump_all(
        [deployment, service], sort_keys=False)


def _copy(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy, so YAML writes each probe in full instead of as an alias."""
    return json.loads(json.dumps(value))


def label_value(text: str) -> str:
    """A Kubernetes label value (<= 63 of [A-Za-z0-9._-], alphanumeric at both ends); the
    name itself goes into an annotation, where any text is allowed."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("._-")
    return value or "study"
