"""Choosing and rendering exports from a hand-built study database."""

from __future__ import annotations

import json
import shlex

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune.cli.main import build_parser
from autotune.errors import ConfigError
from autotune.measure.measurement import Measurement
from autotune.results import _limits as limits
from autotune.results.export import _recheck as recheck
from autotune.results.export import formats
from autotune.tuning import ranking
from autotune.tuning.ranking import choose
from autotune.tuning.records.snapshot import Snapshot, records
from autotune.verify import validate
from tests import trials
from tests.paths import ROOT


def _trial(st, value, thr, lat, *, feasible=True, state=TrialState.COMPLETE, flags=None,
           ttft=100.0):
    trials.add(st, state, values=[value], constraints={"slo": -1.0 if feasible else 1.0},
               params={"max-num-seqs": 64},
               distributions={"max-num-seqs": CategoricalDistribution([64])},
               flags=flags or {"max-num-seqs": 64},
               measures={"throughput": thr, "latency_ms": lat, "memory_mib": 1000.0},
               metrics=Measurement.of({"output_throughput": thr, "p95_ttft_ms": ttft,
                                       "median_ttft_ms": 50.0}),
               engine_version="vllm-0.26.0", device={"name": "NVIDIA H200"},
               command=["vllm", "serve", "/models/q", "--max-num-seqs", "64"],
               gain=value, timings={"startup_s": 90.0}, env={"A": "1"},
               quality={"drift": 0.01, "passed": True})


@pytest.fixture
def study():
    st = optuna.create_study(study_name="s", direction="maximize")
    _trial(st, 0.0, 100.0, 50.0)  # 0: defaults
    _trial(st, 0.3, 200.0, 80.0, ttft=400.0)  # 1: fastest
    _trial(st, 0.2, 150.0, 30.0)  # 2: lowest latency
    _trial(st, 0.9, 900.0, 10.0, feasible=False)  # 3: infeasible, never chosen
    _trial(st, 0.0, 0, 0, state=TrialState.PRUNED)  # 4: pruned
    return st


def test_policies_choose_among_feasible_trials(study):
    assert choose(study, policy="max-throughput").number == 1
    assert choose(study, policy="min-latency").number == 2
    assert choose(study, policy="balanced").number == 1  # best weighted score
    assert choose(study, policy="max-throughput",
                         slos={"ttft_p95_ms": 200}).number == 2  # trial 1 misses the SLO


def test_only_feasible_trials_ship(study):
    for number in (3, 4):
        with pytest.raises(ConfigError, match="not a feasible completed trial"):
            choose(study, trial=number)
    with pytest.raises(ConfigError, match="no trial 9"):
        choose(study, trial=9)
    with pytest.raises(ConfigError, match="meets ttft_p95_ms<=1"):
        choose(study, slos={"ttft_p95_ms": 1})


def test_every_format_carries_the_figures_and_origin(study):
    t = choose(study, trial=1)
    cli = formats.render(study, t, "cli", "/models/q")
    assert "study s, trial 1" in cli and "200.0 output tok/s" in cli
    assert "A=1 vllm serve /models/q \\\n    --max-num-seqs 64" in cli
    cfg = formats.render(study, t, "vllm-yaml", "/models/q")
    assert yaml.safe_load(cfg) == {"max-num-seqs": 64} and cfg.startswith("# autotune:")
    data = json.loads(formats.render(study, t, "json", "/models/q"))
    assert data["trial"] == 1 and data["command"][-2:] == ["--max-num-seqs", "64"]
    compose = yaml.safe_load(formats.render(study, t, "compose", "/models/q"))
    svc = compose["services"]["vllm"]
    assert svc["image"] == "vllm/vllm-openai:v0.26.0"
    assert svc["command"][-2:] == ["--max-num-seqs", "64"]
    assert "/health" in svc["healthcheck"]["test"][-1]
    docs = list(yaml.safe_load_all(formats.render(study, t, "k8s", "/models/q")))
    deployment, service = docs
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c["startupProbe"]["failureThreshold"] * 10 >= 180  # twice the measured start-up
    assert deployment["metadata"]["labels"]["autotune/trial"] == "1"
    assert service["spec"]["ports"][0]["port"] == 8000
    with pytest.raises(ConfigError, match="unknown format"):
        formats.render(study, t, "helm", "/models/q")


def test_a_capacity_trial_exports_its_capacity_not_its_steps_figure():
    """The export's figures are the decision's: the capacity at SLO in `capacitytext.describe`'s
    words with its ratio to vLLM's defaults, and the throughputs at that rate (the step's
    own request throughput read 33.67 where `show` said 27.6)."""
    from autotune.measure import capacitytext
    from tests.paths import ROOT

    st = optuna.load_study(study_name="qwen3-4b-h200-guided-2",
                           storage=f"sqlite:///{ROOT / 'studies' / 'qwen3-4b-h200-guided-2.db'}")
    rec = records(st)[1]
    assert rec.capacity is not None
    out = formats.render(st, rec, "cli", "Qwen/Qwen3-4B-Instruct-2507")
    figure = capacitytext.describe(rec.capacity)
    assert f"# capacity at SLO: {figure}; 1.34x vLLM defaults at 69.1 req/s" in out
    assert f"# at that rate: {rec.capacity.output_throughput:.1f} output tok/s" in out
    assert "# measured:" not in out
    facts = json.loads(formats.render(st, rec, "json", "Qwen/Qwen3-4B-Instruct-2507"))
    assert facts["request_throughput"] == rec.capacity.request_throughput
    assert facts["capacity"] == figure


@pytest.mark.parametrize("db", sorted((ROOT / "studies").glob("*.db")), ids=lambda p: p.stem)
def test_the_recheck_command_of_every_committed_export_is_accepted(db):
    """The re-check an export prints parses with autotune's own parser, and `validate`
    takes its trial and baseline (no engine: `pick` is what refuses). qwen3-4b-24g, whose
    vLLM defaults did not start, printed `--trial 1` with no `--against` and was refused
    ("the study has no completed vLLM-defaults trial"). An export of the reference itself
    is an A/A run, and its condition says so instead of a ratio that cannot move."""
    st = optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")
    snap = Snapshot.of(st)
    try:
        chosen = choose(snap)
    except ConfigError:
        pytest.skip("no feasible trial to export")
    check = recheck.recheck(snap, chosen, limits.derive(chosen, recheck.slos_of(snap)))
    words = shlex.split(check.command)
    assert words[:2] == ["autotune", "validate"]
    args = build_parser().parse_args(words[1:])
    candidate, against = validate.pick(st, trial=args.trial, policy=args.policy,
                                       against=args.against)
    assert candidate.number == chosen.number
    ref = ranking.reference_trial(snap)
    if ref is not None and ref.number == chosen.number:
        assert against.number == chosen.number
        assert "A/A run" in check.no_longer_holds_if
        assert "no longer beats" not in check.no_longer_holds_if
    else:
        assert "no longer beats" in check.no_longer_holds_if


def test_the_flags_held_for_the_compile_cache_ship_with_the_trial():
    """A trial launched with the study's compile key held measured those flags too: every
    format carries them, and a comment says why they are there."""
    st = optuna.create_study(study_name="warm", direction="maximize")
    held = {"compilation-config": {"max_cudagraph_capture_size": 512},
            "max-num-batched-tokens": 32768, "max-num-scheduled-tokens": 4096}
    trials.add(st, values=[0.0], constraints={"slo": -1.0}, flags={"max-num-batched-tokens": 4096},
               measures={"throughput": 1.0, "latency_ms": 1.0, "memory_mib": 1.0},
               metrics=Measurement.of({"output_throughput": 1.0}), engine_version="vllm-0.26.0",
               device={"name": "NVIDIA H200"},
               startup={"launch": "warm", "warm": {"flags": held, "cache": "/c",
                                                  "env": {"VLLM_WORKER_MULTIPROC_METHOD":
                                                          "fork"}}})
    r = records(st)[0]
    data = json.loads(formats.render(st, r, "json", "/models/q"))
    assert data["flags"] == held  # the trial's own 4096 is scheduled under the bound
    assert data["env"] == {}  # the launcher's start-up environment is no part of a deployment
    cli = formats.render(st, r, "cli", "/models/q")
    assert "--max-num-scheduled-tokens 4096" in cli
    assert "--compilation-config '{\"max_cudagraph_capture_size\":512}'" in cli
    assert "# measured with --compilation-config " in cli and "held by the study for its " \
        "compile cache" in cli
    body = yaml.safe_load(formats.render(st, r, "vllm-yaml", "/models/q"))
    assert body["max-num-batched-tokens"] == 32768 and body["max-num-scheduled-tokens"] == 4096
