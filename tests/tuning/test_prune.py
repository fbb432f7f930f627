"""Pruning rules as pure functions: emulation, the memory model's verdict, the probe phase."""

import subprocess
import sys

import pytest

from autotune.config import Hardware, PruneSpec, Scenario
from autotune.measure.measurement import Measurement
from autotune.tuning.policy import prune
from scripts import pressure_seeds
from tests.paths import ROOT

GiB = 2**30


def _scenario(**extra):
    return Scenario.model_validate({"model": {"tiny": "tiny"}, **extra})


def test_emulation_rescales_gpu_memory_utilization():
    h200 = 143_771 * 2**20
    flags = prune.emulate({"gpu-memory-utilization": 0.9}, Hardware(memory_gib=24), h200)
    # 0.9 of a 24 GiB card, as a share of the H200: 0.9 * 24 GiB / 140.4 GiB
    assert flags["gpu-memory-utilization"] == pytest.approx(0.9 * 24 * GiB / h200, abs=1e-6)
    default = prune.emulate({}, Hardware(memory_gib=24), h200)
    assert default["gpu-memory-utilization"] == pytest.approx(0.92 * 24 * GiB / h200, abs=1e-6)
    # vLLM would size these by the H200 (8192, 1024): the 24 GB card's defaults are passed
    assert (default["max-num-batched-tokens"], default["max-num-seqs"]) == (2048, 256)
    assert prune.emulate({"max-num-seqs": 64}, Hardware(memory_gib=24), h200)[
        "max-num-batched-tokens"] == 2048
    small = prune.emulate({"max-num-batched-tokens": 128}, Hardware(memory_gib=24), h200)
    assert (small["max-num-batched-tokens"], small["max-num-seqs"]) == (128, 128)  # vLLM's cap
    big = prune.emulate({}, Hardware(memory_gib=80), h200)
    assert (big["max-num-batched-tokens"], big["max-num-seqs"]) == (8192, 1024)
    assert prune.emulate({"x": 1}, Hardware(), h200) == {"x": 1}  # no emulation asked
    assert prune.emulate({"x": 1}, Hardware(memory_gib=24), None) == {"x": 1}  # no GPU


def test_memory_model_verdict_on_the_cpu_engine(tiny_model):
    scenario = _scenario(workload={"input_len": 256, "output_len": 256})
    small = prune.predict(scenario, str(tiny_model),
                          {"kv-cache-memory-bytes": 500_000, "max-model-len": 2048}, {})
    assert small is not None and not small.fits_one_sequence
    assert prune.before_launch(small, PruneSpec()).startswith("kv_too_small: ")
    assert prune.before_launch(small, PruneSpec(memory_model=False)) is None
    assert prune.before_launch(small, PruneSpec(enabled=False)) is None
    ok = prune.predict(scenario, str(tiny_model),
                       {"kv-cache-memory-bytes": 2_000_000, "max-model-len": 2048,
                        "max-num-seqs": 16}, {})
    assert ok.kv_capacity_tokens == 3840 and ok.fits_one_sequence
    assert prune.before_launch(ok, PruneSpec()) is None
    # 16 requests of 512 tokens do not fit in 3,840: only pruned when the scenario asks
    assert ok.fits_workload is False
    assert prune.before_launch(ok, PruneSpec(workload_fit=True)).startswith("workload_fit")
    # unsized CPU engine: autotune gives it 1 GiB
    unsized = prune.predict(scenario, str(tiny_model), {}, {})
    assert unsized.kv_capacity_tokens == 2_097_152


def test_no_estimate_for_a_hub_id():
    assert prune.predict(_scenario(), "Qwen/Qwen3-4B-Instruct-2507", {}, {}) is None


@pytest.mark.parametrize(("summary", "reason"), [
    ({"completed": 10, "failed": 0, "probes": {"preemptions": 3}}, prune.PREEMPTION),
    ({"completed": 10, "failed": 0,
      "probes": {"kv_cache_usage_max": 1.0, "requests_waiting_max": 4}}, prune.KV_SATURATED),
    ({"completed": 10, "failed": 0,
      "probes": {"kv_cache_usage_max": 1.0, "requests_waiting_max": 0}}, None),
    ({"completed": 9, "failed": 1, "probes": {}}, prune.FAILURES),
    ({"completed": 10, "failed": 0, "probes": {"preemptions": 0}}, None),
])
def test_probe_verdict(summary, reason):
    assert prune.probe_verdict(Measurement.of(summary), PruneSpec()) == reason


def test_allowances():
    s = {"completed": 9, "failed": 1, "probes": {"preemptions": 2}}
    spec = PruneSpec(preemption_allowance=2, min_success_rate=0.9)
    assert prune.probe_verdict(Measurement.of(s), spec) is None


def test_gpu_release_wait_is_a_no_op_without_a_gpu():
    assert prune.wait_gpu_released(None, 1.0) == 0.0


def test_max_model_len_below_the_longest_request_is_not_launched(tiny_model, tmp_path):
    from autotune.tuning import trial

    w = _scenario(workload={"prefix_len": 100, "input_len": 1000, "output_len": 200,
                            "range_ratio": 0.5}).workload
    assert prune.longest_request(w) == 100 + 1500 + 300
    assert prune.too_short({"max-model-len": 1899}, w).startswith(
        "max_model_len_too_short: max-model-len 1899 is below the workload's longest "
        "request (1900 tokens)")
    assert prune.too_short({"max-model-len": 1900}, w) is None
    assert prune.too_short({}, w) is None  # the model's own length: the memory model decides
    chat = _scenario(workload={"kind": "chat"}).workload
    assert prune.longest_request(chat) is None and prune.too_short({"max-model-len": 1}, chat) \
        is None
    # a trial with such flags ends before any engine starts
    scenario = _scenario(workload={"input_len": 600, "output_len": 100})
    out = trial.run_trial(scenario, str(tiny_model), {"max-model-len": 512}, tmp_path / "t")
    assert (out.state, out.reason, out.facts.launched) == (
        trial.PRUNED, "max_model_len_too_short", False)
    assert not (tmp_path / "t" / "engine.log").exists()


def test_the_shipped_pressure_study_shows_every_outcome_with_a_clear_behind(tiny_model):
    """The seeded draws of `search_spaces/cpu-pressure.yaml`, replayed with canned engines
    (`scripts/pressure_seeds.py`; the real study is `test_prune_engine.py`): every outcome,
    and its `behind` trial serves one sequence against 16, far below the median at any noise."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "pressure_seeds.py")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "ok", \
        done.stdout + done.stderr
    assert "relief: kv-cache-memory-bytes=2000000 max-num-seqs=1: pruned behind" in done.stdout
    # The layout before (seed 27, max-num-seqs 2, 4 or 16) as the replay gave it: its trial
    # behind served 4 sequences against 16, a coin toss on a busy machine (a real run had no
    # trial behind), which the check names.
    Row = pressure_seeds.Row
    kv, seqs = "kv-cache-memory-bytes", "max-num-seqs"
    before = [Row(0, "baseline", {}, "COMPLETE", "", None),
              Row(1, "baseline", {kv: 4000000, seqs: 4}, "COMPLETE", "", None),
              Row(2, "sampler", {kv: 2000000, seqs: 16}, "PRUNED", "preemption", None),
              Row(3, "relief", {kv: 4000000, seqs: 16}, "COMPLETE", "", None),
              Row(4, "sampler", {kv: 500000, seqs: 4}, "PRUNED", "kv_too_small", None),
              Row(5, "sampler", {kv: 2000000, seqs: 16}, "PRUNED", "preemption", 2),
              Row(6, "relief", {kv: 2000000, seqs: 4}, "PRUNED", "behind", None),
              Row(7, "sampler", {kv: 2000000, seqs: 4}, "PRUNED", "behind", 6)]
    assert pressure_seeds.fault(before) == "#6 is behind with max-num-seqs 4"
    # and as that real run went: #6 completed, nothing behind
    ran = [*before[:6], Row(6, "relief", {kv: 2000000, seqs: 4}, "COMPLETE", "", None),
           Row(7, "sampler", {kv: 2000000, seqs: 4}, "COMPLETE", "", 6)]
    assert pressure_seeds.fault(ran) == "no trial behind"
