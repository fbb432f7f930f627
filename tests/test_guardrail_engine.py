"""The guardrail on the real CPU engine: the reference passes itself, a numerics change drifts.

`--kv-cache-dtype fp8` would be the natural example, but the CPU build only has fp8 KV on
x86 CPUs with AVX-512 or AMX (seen: "FP8 KV cache on CPU requires x86 with AVX-512 or AMX"
on an AVX2 machine). `--dtype float32` changes the numerics on every CPU: the same random
weights, computed in float32 instead of bfloat16.
"""

from __future__ import annotations

import pytest

from autotune.engine.server import Server
from autotune.measure.loadgen import Target
from autotune.tuning import guardrail

pytestmark = [pytest.mark.engine]

STRICT = 0.001  # nats: far above the reference's own noise (seen ~1e-6), below float32's drift


@pytest.fixture(scope="module")
def reference(eager_server, tiny_model):
    target = Target(eager_server.url, str(tiny_model), eager_server.headers)
    prompts = guardrail.default_prompts()
    ref, report = guardrail.make_reference(target, prompts, 32, factor=3.0, drift=STRICT,
                                           agreement=None, context={"flags": {}})
    return ref, report


def test_reference_measures_its_own_noise(reference):
    ref, report = reference
    assert len(ref.samples) == len(ref.prompts) == 16
    assert all(len(s.output_ids) == 32 and len(s.logprobs) == 32 for s in ref.samples)
    # Batched and one-by-one runs of the same configuration: tiny differences at most.
    assert ref.noise["drift"] < STRICT / 10
    assert ref.thresholds["drift"] == STRICT


def test_the_reference_configuration_passes(eager_server, tiny_model, reference):
    ref, _ = reference
    report = guardrail.check(Target(eager_server.url, str(tiny_model), eager_server.headers), ref)
    assert report["passed"], report
    assert report["drift"] < STRICT / 10 and report["agreement"] == 1.0


@pytest.mark.usefixtures("no_leftover_engine")
def test_float32_drifts_and_is_rejected_under_a_strict_threshold(tiny_model, reference, tmp_path):
    ref, _ = reference
    flags = {"enforce-eager": True, "dtype": "float32"}
    with Server(str(tiny_model), flags, log_path=tmp_path / "e.log") as srv:
        report = guardrail.check(Target(srv.url, str(tiny_model), srv.headers), ref)
    assert report["drift"] > 10 * ref.noise["drift"]  # measurable against the noise floor
    assert report["drift"] > STRICT and not report["passed"]
    assert guardrail.constraints(report)["quality_drift"] > 0
    assert report["worst"][0]["drift"] >= report["drift"]
    # Under the default threshold (3 x noise + 0.01 nats) the same change is accepted.
    lenient = guardrail.thresholds(ref.noise, 3.0, None, None)
    assert report["drift"] < lenient["drift"]
