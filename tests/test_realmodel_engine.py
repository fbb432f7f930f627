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
from autotune.config import GuardrailSpec
from autotune.engine.server import Server
from autotune.measure import bench, speculation
from autotune.measure.loadgen import Target
from autotune.traffic import WorkloadSpec
from autotune.tuning import guardrail

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
    spec = GuardrailSpec()
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
    texts = " ".join(s.text for s in ref.samples)
    assert "Paris" in texts or "def " in texts  # real answers, not random tokens
    assert all(len(s.logprobs) == len(s.output_ids) > 0 for s in ref.samples)
    # batched against one by one: small against the threshold it sets
    assert ref.noise["drift"] < ref.thresholds["drift"] / 2
    assert noise["agreement"] > 0.5


@pytest.mark.usefixtures("no_leftover_engine")
def test_configurations_that_only_reschedule_pass(real_model, reference, tmp_path):
    ref, _ = reference
    flags = {"block-size": 32, "max-num-seqs": 4, "enable-prefix-caching": False}
    report = _check(real_model, flags, ref, tmp_path / "e.log")
    assert report["passed"], report


@pytest.mark.usefixtures("no_leftover_engine")
def test_ngram_speculation_passes_and_accepts_drafts_on_copy_heavy_text(real_model, reference,
                                                                       tmp_path):
    ref, _ = reference
    with Server(real_model, {**EAGER, "speculative-config": NGRAM},
                log_path=tmp_path / "e.log") as srv:
        target = Target(srv.url, real_model, srv.headers)
        report = guardrail.check(target, ref)
        before = speculation.Counters.parse(srv.get_text("/metrics") or "")
        work = WorkloadSpec(kind="text", dataset="edit", num_requests=4, max_concurrency=4,
                            mode="fixed")
        summary = bench.benchmark(target, work, tokenizer_model=real_model)
        spec = speculation.between(before,
                                   speculation.Counters.parse(srv.get_text("/metrics") or ""))
        said = srv.figures.async_scheduling
    assert report["passed"], report  # greedy speculation returns the target's own tokens
    assert summary["completed"] == 4
    assert spec is not None and spec.drafts > 0
    assert spec.acceptance_rate > 0.2, spec  # rewriting text copies much of the prompt
    assert spec.mean_acceptance_length > 1.5
    assert len(spec.accepted_per_position) == 4
    assert said is False  # vLLM turns async scheduling off with ngram, and says so


@pytest.mark.usefixtures("no_leftover_engine")
def test_a_wrong_rope_base_is_rejected(real_model, reference, tmp_path):
    ref, _ = reference
    report = _check(real_model, {"hf-overrides": {"rope_theta": 10000.0}}, ref,
                    tmp_path / "e.log")
    assert not report["passed"], report
    assert report["drift"] > 3 * ref.thresholds["drift"]
    assert guardrail.constraints(report)["quality_drift"] > 0
