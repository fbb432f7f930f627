"""The compile key a study holds: the flags added to each trial so that vLLM derives the same
key for trials it would compile alike, and nothing where they would not be alike."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.config import Scenario
from autotune.engine.defaults import Machine
from autotune.tuning.policy.compilekey import (
    BOUNDED,
    CAPTURE,
    SCHEDULED,
    STABLE,
    VLLM,
    CompileKey,
)

H200 = Machine("cuda", "NVIDIA H200", 143_771.0)
CARD_24G = Machine("cuda", "NVIDIA GeForce RTX 4090 D", 24_564.0)
CPU = Machine("cpu")
SEQS = {"choices": [64, 128, 256, 512, 1024]}
TOKENS = {"choices": [2048, 4096, 8192, 16384, 32768]}


def scenario(key: str = STABLE, **sections: Any) -> Scenario:
    engine = {"compile_key": key, **sections.pop("engine", {})}
    return Scenario.model_validate({"model": {"tiny": "tiny"}, "engine": engine, **sections})


def test_stable_pins_the_capture_sizes_of_the_most_sequences():
    key = CompileKey.of(scenario(space={"max-num-seqs": SEQS}), H200, scheduled_flag=True)
    # vLLM's own for 1024 sequences: min(2 x 1024, 512); every trial gets that
    assert key.capture == 512 and key.batched_bound is None
    for seqs in (64, 128, 1024):
        assert key.flags({"max-num-seqs": seqs}) == {"compilation-config": {CAPTURE: 512}}
    assert key.flags({}) == {"compilation-config": {CAPTURE: 512}}  # the defaults' trial


def test_a_space_of_few_sequences_pins_what_its_largest_would_capture():
    sc = scenario(space={"max-num-seqs": {"low": 4, "high": 32, "log": True}})
    # vLLM's default max-num-seqs on a 24 GB card is 256: the defaults' trial can launch it
    assert CompileKey.of(sc, CARD_24G, True).capture == 512
    fixed = scenario(space={"max-num-seqs": {"low": 4, "high": 32}},
                     engine={"flags": {"max-num-seqs": 32}})
    assert CompileKey.of(fixed, CARD_24G, True).capture == 64  # fixed: every trial's bound


def test_speculative_tokens_scale_the_pin_as_vllm_scales_its_own():
    key = CompileKey.of(scenario(space={"max-num-seqs": {"choices": [16, 64]}},
                                 engine={"flags": {"max-num-seqs": 64}}), H200, True)
    spec = {"speculative-config": {"method": "ngram", "num_speculative_tokens": 3}}
    assert key.flags({"max-num-seqs": 16, **spec}) == {"compilation-config": {CAPTURE: 512}}
    assert key.flags({"max-num-seqs": 16}) == {"compilation-config": {CAPTURE: 128}}


def test_bounded_holds_the_largest_budget_and_schedules_the_trials_own():
    sc = scenario(BOUNDED, space={"max-num-seqs": SEQS, "max-num-batched-tokens": TOKENS})
    key = CompileKey.of(sc, H200, scheduled_flag=True)
    assert key.batched_bound == 32768 and key.batched_default == 8192
    assert key.flags({"max-num-batched-tokens": 4096}) == {
        "compilation-config": {CAPTURE: 512}, "max-num-batched-tokens": 32768, SCHEDULED: 4096}
    # vLLM's defaults (8192 on an H200) scheduled under the same bound
    assert key.flags({})[SCHEDULED] == 8192
    # the bound itself needs no budget of its own
    assert SCHEDULED not in key.flags({"max-num-batched-tokens": 32768})


@pytest.mark.parametrize("flags", [
    {"enable-chunked-prefill": False, "max-num-batched-tokens": 4096},  # must cover a prompt
    {"max-num-batched-tokens": 4096, SCHEDULED: 2048},  # the trial's own budget
    {"max-num-batched-tokens": 4096,  # a draft's tokens are scheduled beside the budget
     "speculative-config": {"method": "ngram", "num_speculative_tokens": 2}},
])
def test_bounded_leaves_a_budget_vllm_must_derive_itself(flags):
    sc = scenario(BOUNDED, space={"max-num-batched-tokens": TOKENS})
    assert "max-num-batched-tokens" not in CompileKey.of(sc, H200, True).flags(flags)


def test_bounded_needs_the_engines_flag_and_a_budget_that_varies():
    sc = scenario(BOUNDED, space={"max-num-batched-tokens": TOKENS})
    assert CompileKey.of(sc, H200, scheduled_flag=False).batched_bound is None
    one = scenario(BOUNDED, engine={"flags": {"max-num-batched-tokens": 4096}})
    assert CompileKey.of(one, H200, True).batched_bound is None  # nothing varies


def test_the_cpu_build_captures_no_graphs_but_can_bound_its_budget():
    sc = scenario(BOUNDED, space={"max-num-batched-tokens": {"choices": [256, 2048]}})
    key = CompileKey.of(sc, CPU, True)
    assert key.capture is None
    assert key.flags({"max-num-batched-tokens": 256}) == {"max-num-batched-tokens": 2048,
                                                          SCHEDULED: 256}


def test_nothing_is_held_where_vllm_derives_all_or_nothing_compiles():
    key = CompileKey.of(scenario(VLLM, space={"max-num-seqs": SEQS}), H200, True)
    assert key.flags({"max-num-seqs": 64}) == {}
    stable = CompileKey.of(scenario(space={"max-num-seqs": SEQS}), H200, True)
    assert stable.flags({"enforce-eager": True}) == {}
    mine = {"compilation-config": {"cudagraph_capture_sizes": [1, 2]}}
    assert stable.flags(mine) == {}  # the user's own compilation config stays theirs


def test_blackwell_keeps_vllms_own_capture_sizes():
    key = CompileKey.of(scenario(space={"max-num-seqs": SEQS}), Machine("cuda", "NVIDIA B200",
                                                                        183_000.0), True)
    assert key.capture is None
