"""`autotune validate --client vllm` on real CPU engines: the candidate and the baseline of a
tiny study on fresh engines, each one's capacity at SLO searched with `vllm bench serve`, the
ratio stored beside the study's own and shown by `show`.

The study is written directly (the trials' flags and capacities as `tune` records them)
rather than tuned, so only the two validation engines are started here."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import optuna
import psutil
import pytest
import yaml

from autotune.cli import main as cli
from autotune.engine import cpuplace
from autotune.tuning.records.snapshot import records
from tests.conftest import MULTIPROCESSING, SCENARIO, SESSION_MARK
from tests.measure.test_vllmbench import _trial

# Not `alone`: nothing here compares speeds (a capacity above 0 and the record), so the
# engines may share the host with another worker's.
pytestmark = [pytest.mark.engine]


def _helpers() -> list[psutil.Process]:
    """vllm bench serve helpers started by this test session."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if "autotune.measure.vllmbench" in " ".join(p.info["cmdline"] or []) and \
                    p.environ().get(SESSION_MARK) == os.environ[SESSION_MARK]:
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def study_db(tmp_path) -> Path:
    """Defaults (#0) and max-num-seqs 8 (#1); the search kept short: burst and one step."""
    scenario = yaml.safe_load(SCENARIO)
    scenario["workload"]["capacity"] = {"max_expand": 1, "repeats": 1, "max_steps": 3}
    path = tmp_path / "engine-test.db"
    st = optuna.create_study(study_name="engine-test", storage=f"sqlite:///{path}",
                             direction="maximize")
    st.set_user_attr("scenario", scenario)
    _trial(st, 10.0, baseline="vllm-defaults")
    _trial(st, 12.4, flags={"enforce-eager": True, "max-num-seqs": 8})
    return path


@pytest.mark.parametrize("gpus", [None, "0,1"], ids=["alternating", "side-by-side"])
def test_validate_with_vllms_client(gpus, study_db, tmp_path, capsys, no_leftover_engine):
    """Alternating on one device, or each pair's two runs at once (two GPUs; here two CPU
    engines, which only shows the placement and the record, not a GPU's speed)."""
    db = str(study_db)
    before = records(optuna.load_study(study_name="engine-test",
                                       storage=f"sqlite:///{db}"))

    # Side by side: vLLM's own layout (a model worker process, which binds its threads to the
    # cores validate gives it; the first phase's other engines run it in the engine core)
    # and no binding of the person running the tests: validate places the engines.
    env = {k: v for k, v in os.environ.items() if not gpus or k != cpuplace.VAR}
    env.update({MULTIPROCESSING: "1"} if gpus else {})
    proc = subprocess.run([sys.executable, "-m", "autotune", "validate", db, "--trial", "1",
                           "--client", "vllm", "--repeats", "1", "--step-seconds", "3",
                           *(["--gpus", gpus] if gpus else [])],
                          capture_output=True, text=True, timeout=900, check=False, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not _helpers()

    st = optuna.load_study(study_name="engine-test", storage=f"sqlite:///{db}")
    trials = records(st)
    typed = trials[1].validation_vllm
    assert typed is not None and typed.word() == typed.verdict
    v = typed.as_dict()  # as stored, key for key
    assert (v["client"], v["repeats"], v["against"], v["step_s"]) == \
        ("vllm bench serve", 1, 0, 3.0)
    assert [(r["trial"], r["role"]) for r in v["runs"]] == [(0, "baseline"), (1, "candidate")]
    for r in v["runs"]:  # a fresh engine each, its capacity searched in vLLM's steps
        assert r["capacity"] > 0 and r["startup_s"] > 0 and Path(r["log_path"]).exists()
        # from the capacity the study reported for that trial, not from a burst
        assert r["steps"] and r["steps"][0]["kind"] == "ceiling"
        assert r["steps"][0]["rate"] == trials[r["trial"]].capacity.request_throughput
        assert r["flags"] == trials[r["trial"]].flags
        assert sorted(p.name for p in Path(r["dir"]).glob("step-*.json")) == \
            [f"step-{s['index']:02d}-{s['kind']}.json" for s in r["steps"]]
    base, cand = (r["capacity"] for r in v["runs"])
    assert v["ratio"] == pytest.approx(cand / base) and v["ci_low"] is None
    assert v["verdict"] == "one pair, no interval: no gain shown"
    assert v["study_ratio"] == pytest.approx(
        trials[1].capacity.request_throughput / trials[0].capacity.request_throughput)
    assert Path(v["dir"]).parent == tmp_path / "engine-test" / "validate-vllm"
    if gpus:  # pair 0: the candidate on the first GPU, the baseline on the second
        assert [r["gpu"] for r in v["runs"]] == [1, 0]
        assert v["order"].startswith("pairs side by side on GPUs 0 and 1")
        for r in v["runs"]:  # and each engine computed on cores of its own
            cores = cpuplace.bind(r["gpu"], 2, cpuplace.physical_cores()).split(",")
            assert f"core ids={[int(c) for c in cores]}" in Path(r["log_path"]).read_text()
    else:
        assert v["order"] == "alternating, baseline first"
    assert v["helper_start_s"] > 0 and v["engine_version"].startswith("vllm")
    # Nothing else in the study changed.
    for old, new in zip(before, trials, strict=True):
        assert dataclasses.replace(new, validation_vllm=None) == old

    printed = " ".join(proc.stdout.split())
    assert "run 2/2: trial #1 (candidate): capacity" in printed
    headline = f"autotune's steps: {v['study_ratio']:.3g}x; vllm bench serve: {v['ratio']:.3g}x"
    assert f"capacity of trial #1 / #0: {headline}" in printed
    assert cli.main(["show", db]) == 0
    assert f"re-measured: trial #1 {headline}" in " ".join(capsys.readouterr().out.split())
