"""The compile key a study may hold: `bounded` launches every trial at the study's largest
max-num-batched-tokens with its own budget scheduled; `vllm`, the default, holds nothing."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.config import Scenario
from autotune.engine.defaults import Machine
from autotune.tuning.policy.compilekey import BOUNDED, SCHEDULED, VLLM, CompileKey

H200 = Machine("cuda", "NVIDIA H200", 143_771.0)
CPU = Machine("cpu")
TOKENS = {"choices": [2048, 4096, 8192, 16384, 32768]}


def scenario(key: str = BOUNDED, **sections: Any) -> Scenario:
    engine = {"compile_key": key, **sections.pop("engine", {})}
    return Scenario.model_validate({"model": {"tiny": "tiny"}, "engine": engine, **sections})


def test_the_default_holds_nothing():
    sc = Scenario.model_validate({"model": {"tiny": "tiny"},
                                  "space": {"max-num-batched-tokens": TOKENS}})
    assert sc.engine.compile_key == VLLM
    key = CompileKey.of(sc, H200, scheduled_flag=True)
    assert key.batched_bound is None and key.flags({"max-num-batched-tokens": 4096}) == {}


def test_bounded_holds_the_largest_budget_and_schedules_the_trials_own():
    key = CompileKey.of(scenario(space={"max-num-batched-tokens": TOKENS}), H200, True)
    assert key.batched_bound == 32768 and key.batched_default == 8192
    assert key.flags({"max-num-batched-tokens": 4096, "max-num-seqs": 64}) == {
        "max-num-batched-tokens": 32768, SCHEDULED: 4096}
    assert key.flags({})[SCHEDULED] == 8192  # vLLM's defaults: 8192 on an H200
    assert key.flags({"max-num-batched-tokens": 32768}) == {}  # the bound itself


def test_the_bound_counts_every_budget_a_trial_can_launch_with():
    sc = scenario(space={"max-num-batched-tokens": {"low": 1024, "high": 4096}},
                  baselines=[{"name": "big", "flags": {"max-num-batched-tokens": 65536}}])
    assert CompileKey.of(sc, H200, True).batched_bound == 65536  # a baseline's
    fixed = scenario(space={"max-num-seqs": {"choices": [4, 8]}},
                     engine={"flags": {"max-num-batched-tokens": 4096}})
    assert CompileKey.of(fixed, H200, True).batched_bound is None  # nothing varies


@pytest.mark.parametrize("flags", [
    {"enable-chunked-prefill": False, "max-num-batched-tokens": 4096},  # must cover a prompt
    {"max-num-batched-tokens": 4096, SCHEDULED: 2048},  # the trial's own budget
    {"max-num-batched-tokens": 4096,  # a draft's tokens are scheduled beside the budget
     "speculative-config": {"method": "ngram", "num_speculative_tokens": 2}},
    {"max-num-batched-tokens": 4096, "enforce-eager": True},  # nothing is compiled
])
def test_bounded_leaves_a_budget_vllm_must_derive_itself(flags):
    key = CompileKey.of(scenario(space={"max-num-batched-tokens": TOKENS}), H200, True)
    assert key.flags(flags) == {}


def test_bounded_needs_the_engines_flag():
    sc = scenario(space={"max-num-batched-tokens": TOKENS})
    assert CompileKey.of(sc, H200, scheduled_flag=False).batched_bound is None


def test_the_cpu_build_is_bounded_by_its_own_default_too():
    key = CompileKey.of(scenario(space={"max-num-batched-tokens": {"choices": [256, 1024]}}),
                        CPU, True)
    assert key.batched_bound == 2048  # the CPU build's default, for vLLM's defaults' trial
    assert key.flags({"max-num-batched-tokens": 256}) == {"max-num-batched-tokens": 2048,
                                                          SCHEDULED: 256}
