"""The guardrail and speculation on a real model: SmolLM2-135M-Instruct on the CPU engine.

A random-weight model cannot tell whether a configuration changes answers (its logits are
chaotic) or whether prompt lookup pays (its text never repeats the prompt). These tests
serve real weights: vLLM's defaults make the guardrail's reference as a study's trial 0
does, with the default thresholds (3 x the noise floor + 0.01 nats); configurations that
only reschedule the same greedy computation must pass it, ngram speculation (lossless under
greedy) must pass it and accept drafts on copy-heavy text, and a model whose RoPE base
differs from its checkpoint's (a wrong `rope_theta` in a deployment's config) must fail it.
An fp8 KV cache is not the degradation here: the CPU build refuses it on CPUs without
AVX-512 or AMX, such as these machines.
"""

from __future__ import annotations

import pytest

from autotune import tinymodel
from autotune.config import GuardrailSpec, Scenario
from autotune.engine.server import Server
from autotune.measure.loadgen import Target
from autotune.measure.speculation import Speculation
from autotune.tuning import guardrail, trial

pytestmark = [pytest.mark.engine]

# float32: without AVX-512 BF16 the CPU build computes bf16 several times slower.
EAGER = {"enforce-eager": True, "dtype": "float32"}
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}


@pytest.fixture(scope="module")
def real_model() -> str:
    """Built by `make setup` from the cached wheel (reused here)."""
    return str(tinymodel.build(preset="smollm2-135m").path)


@pytest.fixture(scope="module")
def reference(real_model, tmp_path_factory):
    # Half the shipped prompts, shorter answers: the mechanism is the study's, at a cost
    # the suite can carry (the 16 x 48 default, one by one for the noise floor, took ~2 min
    # of one core here); docs/real-model.md has the full set over 10 repeats.
    spec = GuardrailSpec(num_prompts=8, max_tokens=32)
    log = tmp_path_factory.mktemp("real") / "reference.log"
    with Server(real_model, EAGER, log_path=log) as srv:
        ref, noise = guardrail.make_reference(
            Target(srv.url, real_model, srv.headers), guardrail.default_prompts()[
                :spec.num_prompts], spec.max_tokens, factor=spec.noise_factor, drift=None,
            agreement=None, context={"flags": EAGER})
    return ref, noise


def _check(model: str, flags: dict, ref: guardrail.Reference, log) -> dict:
    with Server(model, {**EAGER, **flags}, log_path=log) as srv:
        return guardrail.check(Target(srv.url, model, srv.headers), ref)


def test_a_real_model_answers_and_measures_its_noise_floor(reference):
    ref, noise = reference
    # Real answers, not random tokens. The guardrail sends its prompts as plain completions
    # (no chat template), and an instruct model ends some of them at once (3 of these 8,
    # 7 of the 16 on the H200): those still count, by the log-probability of that end.
    answered = [s for s in ref.samples if s.text.strip()]
    assert len(answered) >= 3
    assert any("def " in s.text for s in answered)  # the quicksort prompt gets Python
    assert all(len(s.logprobs) == len(s.output_ids) > 0 for s in ref.samples)
    # batched against one by one: small against the threshold it sets
    assert ref.noise["drift"] < ref.thresholds["drift"] / 2
    assert noise["agreement"] > 0.5


@pytest.mark.usefixtures("no_leftover_engine")
def test_a_speculative_rescheduled_trial_records_its_acceptance_and_passes_the_guardrail(
        real_model, reference, tmp_path):
    """One trial as a study runs it (`trial.run_trial`): the copy-heavy workload with ngram
    speculation and flags that only reschedule the same greedy computation (block size,
    max-num-seqs, prefix caching), checked against the defaults' reference: all of them
    must leave the answers as they are (one engine for all, to keep the suite's time)."""
    ref, _ = reference
    scenario = Scenario.model_validate({
        "model": {"tiny": "smollm2-135m"}, "engine": {"flags": EAGER},
        "workload": {"kind": "text", "dataset": "edit", "num_requests": 4,
                     "max_concurrency": 4, "mode": "fixed"},
        "prune": {"enabled": False}, "budget": {"trial_timeout": "10m"}})
    guard = guardrail.Guard(scenario.guardrail, ref.prompts, ref)
    flags = {**EAGER, "speculative-config": NGRAM, "block-size": 32, "max-num-seqs": 4,
             "enable-prefix-caching": False}
    outcome = trial.run_trial(scenario, real_model, flags, tmp_path / "0", guard)
    assert outcome.state == trial.COMPLETE, (outcome.reason, outcome.facts.detail)
    assert outcome.quality.passed, outcome.quality  # greedy speculation: the same tokens
    assert outcome.summary["completed"] == 4
    spec = Speculation.from_dict(outcome.facts.speculation)
    assert spec.drafts > 0 and len(spec.accepted_per_position) == 4
    assert spec.acceptance_rate > 0.2, spec  # rewriting text copies much of the prompt
    assert spec.mean_acceptance_length > 1.5
    assert spec.drafted_share > 0.2  # a good share of the answers came from the drafts
    # vLLM turns async scheduling off with ngram, and says so
    assert outcome.facts.startup.async_scheduling is False


@pytest.mark.usefixtures("no_leftover_engine")
def test_a_wrong_rope_base_is_rejected(real_model, reference, tmp_path):
    ref, _ = reference
    # transformers 5 keeps RoPE in `rope_parameters`: an override of `rope_theta` alone is
    # ignored by vLLM 0.32 (seen: drift 0.0), this one is not
    wrong = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    report = _check(real_model, {"hf-overrides": wrong}, ref, tmp_path / "e.log")
    assert not report["passed"], report
    assert report["drift"] > 3 * ref.thresholds["drift"]
    assert guardrail.constraints(report)["quality_drift"] > 0
