"""The warm-restart check on the real CPU engine, run as the README gives it: one
configuration launched as the study launches it and as vLLM derives it, two pairs of both
orders, each run searching its capacity.

What the CPU build can show: the warm side holds max-num-batched-tokens at the space's
bound with the trial's budget scheduled, keeps its compiled code in a cache of its own and
loads it on its second start (a hit), while vLLM's side holds nothing and never touches
that cache; the KV cache is the same size on both sides; and the capacities agree within
what two pairs of 3-s steps on shared cores can tell. The figures are printed: on two
cores they are the machinery's evidence, not a measurement to quote (the GPU's are in
docs/results-h200.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.engine import compilecache
from tests import readme
from tests.paths import ROOT

pytestmark = [pytest.mark.engine, pytest.mark.alone,
              pytest.mark.usefixtures("no_leftover_engine")]


def test_a_warm_restart_measures_what_vllms_own_launch_does(tiny_model, tmp_path):
    command, = [c for c in readme.block("### Warm restarts") if "warm_restart.py" in c]
    out = tmp_path / "check"
    done = readme.run(f"{command} --out {out} --json {tmp_path / 'check.json'}", ROOT,
                      timeout=900)
    print(done.text[-4000:])
    assert done.returncode == 0, done.text[-4000:]
    check = json.loads((tmp_path / "check.json").read_text())
    runs = check["runs"]
    assert [r["side"] for r in runs] == ["vllm", "warm", "warm", "vllm"]
    warm = [r for r in runs if r["side"] == "warm"]
    own = [r for r in runs if r["side"] == "vllm"]
    # the warm side holds the space's bound and schedules the configuration's own budget
    assert all(r["held"] == {"max-num-batched-tokens": 2048, "max-num-scheduled-tokens": 256}
               for r in warm)
    assert all(r["held"] == {} for r in own)
    # its first start fills its cache, its second loads it; vLLM's side never used it
    assert [r["compile_cache"] for r in warm] == [compilecache.MISS, compilecache.HIT]
    assert all("compile" in r["phases"] for r in runs)
    assert (out / "compile-cache").is_dir() and (out / "vllm-cache").is_dir()
    for r in own:
        assert str(out / "compile-cache") not in Path(r["log_path"]).read_text()
    # the same KV cache (its size is VLLM_CPU_KVCACHE_SPACE's on the CPU build)
    kv = next(f for f in check["figures"] if f["name"] == "KV cache tokens")
    assert kv["per_pair"] == [1.0, 1.0]
    # every run measured an engine that served, with or without a rate that held
    assert all(r["outcome"] in ("complete", "pruned (no_rate_passed)") for r in runs)
    cap = next(f for f in check["figures"] if f["name"] == "capacity")
    if cap["low"] is not None:
        # two pairs of a coarse search on shared cores give a wide interval; a real change
        # of several times would still leave it (a factor of 2 is one search step)
        assert cap["low"] <= 2.0 and cap["high"] >= 0.5, cap
