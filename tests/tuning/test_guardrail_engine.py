"""The guardrail on the real CPU engine: the reference passes itself, a numerics change drifts.

The tiny model has a ChatML template, so prompts go through it; its random weights answer no
task item right, so these tests judge drift and the scenario's "unchanged" requirement; the
task check's verdicts on a real model are tests/tuning/test_realmodel_engine.py's.

`--kv-cache-dtype fp8` would be the natural example, but the CPU build only has fp8 KV on
x86 CPUs with AVX-512 or AMX (seen: "FP8 KV cache on CPU requires x86 with AVX-512 or AMX"
on an AVX2 machine). `--dtype float32` changes the numerics on every CPU: the same random
weights, computed in float32 instead of bfloat16.
"""

from __future__ import annotations

import pytest

from autotune.config import GuardrailSpec
from autotune.engine.server import Server
from autotune.measure.loadgen import Target
from autotune.tuning.quality import checking
from autotune.tuning.quality.guard import Guard
from autotune.tuning.quality.prompts import default_prompts
from autotune.tuning.quality.template import CHAT
from autotune.tuning.quality.verdict import constraints, thresholds

pytestmark = [pytest.mark.engine]

STRICT = 0.001  # nats: far above the reference's own noise (seen ~1e-6), below float32's drift
# A scenario that wants the answers unchanged: any change beyond the noise is rejected. (The
# random model answers none of the task check's items, so no change could be "worse".)
SPEC = GuardrailSpec(max_tokens=32, drift_threshold=STRICT, tasks=40, require="unchanged")


def _guard(tiny_model, ref=None) -> Guard:
    return Guard(SPEC, default_prompts(), ref, CHAT,
                           str(tiny_model))


@pytest.fixture(scope="module")
def reference(eager_server, tiny_model):
    target = Target(eager_server.url, str(tiny_model), eager_server.headers)
    ref, own = checking.make_reference(target, _guard(tiny_model), context={"flags": {}})
    return ref, own


def test_reference_measures_its_own_noise(reference):
    ref, own = reference
    assert len(ref.samples) == len(ref.prompts) == 16
    assert all(len(s.output_ids) == 32 and len(s.logprobs) == 32 for s in ref.samples)
    # Batched and one-by-one runs of the same configuration: tiny differences at most.
    assert ref.noise["drift"] < STRICT / 10
    assert ref.thresholds["drift"] == STRICT
    # chat-templated (the tiny model has ChatML), with the task check's answers
    assert ref.template == "chat"
    assert len({s.prompt_ids[0] for s in ref.samples}) == 1  # all start with the template
    assert ref.tasks is not None and len(ref.tasks.outputs) == len(ref.tasks.correct) == 40
    assert own.made_reference and own.verdict == "unchanged" and own.passed
    assert own.tasks is not None and own.tasks.items == 40


def test_the_reference_configuration_passes(eager_server, tiny_model, reference):
    ref, _ = reference
    q = checking.check(Target(eager_server.url, str(tiny_model), eager_server.headers),
                        _guard(tiny_model, ref))
    assert q.passed and q.verdict == "unchanged", q
    assert q.drift < STRICT / 10 and q.agreement == 1.0
    assert q.tasks is not None and q.tasks.changed == 0 and q.tasks.difference == 0.0


@pytest.mark.usefixtures("no_leftover_engine")
def test_float32_drifts_and_is_rejected_under_a_strict_threshold(tiny_model, reference, tmp_path):
    """Also on a context shorter than two of the prompts: those are left out and named,
    the rest are judged (one engine for both: each start is ~40 s of two cores)."""
    ref, _ = reference
    flags = {"enforce-eager": True, "dtype": "float32", "max-model-len": 1024}
    with Server(str(tiny_model), flags, log_path=tmp_path / "e.log") as srv:
        q = checking.check(Target(srv.url, str(tiny_model), srv.headers),
                            _guard(tiny_model, ref))
    assert q.drift > 10 * ref.noise["drift"]  # measurable against the noise floor
    assert q.drift > STRICT and q.verdict == "changed" and not q.passed
    assert constraints(q) == {"quality": 1.0}
    assert "requires unchanged" in q.words()
    assert q.worst[0]["drift"] >= q.drift
    # prompts 13 and 14 (2,039 and 1,329 tokens through the template) do not fit 1,024
    assert q.left_out == ["guardrail prompt 13 (2,039 tokens), 14 (1,329 tokens) + 32 to "
                          "answer: longer than the engine's 1,024-token context, left out"]
    assert q.left_out[0] in q.words()
    # Under the default threshold (3 x noise + 0.01 nats) the same change is unchanged.
    lenient = thresholds(ref.noise, 3.0, None, None)
    assert q.drift < lenient["drift"]
