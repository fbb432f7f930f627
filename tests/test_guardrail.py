"""The guardrail's comparisons and thresholds on hand-made samples."""

import pytest

from autotune.tuning import guardrail
from autotune.tuning.guardrail import Reference, Sample


def _s(ids, logprobs, text="t"):
    return Sample(prompt_ids=[1, 2], output_ids=ids, text=text, logprobs=logprobs)


def test_identical_outputs_agree_and_do_not_drift():
    ref = [_s([5, 6, 7, 8], [-1.0, -2.0, -0.5, -0.1])]
    report = guardrail.compare(ref, [_s([5, 6, 7, 8], [-1.0, -2.0, -0.5, -0.1])], ["p"])
    assert report["drift"] == 0.0 and report["agreement"] == 1.0
    assert report["prefix_ratio"] == 1.0


def test_an_early_flip_collapses_the_prefix_but_not_the_drift():
    ref = [_s([5, 6, 7, 8], [-1.0, -2.0, -0.5, -0.1])]
    # diverges at token 1; the reference tokens' log-probs moved by 0.1, 0.2, 0, 0.1
    got = [_s([5, 9, 7, 8], [-1.1, -2.2, -0.5, -0.2])]
    report = guardrail.compare(ref, got, ["p"])
    assert report["prefix_ratio"] == 0.25  # 1 of 4 tokens before the flip
    assert report["agreement"] == pytest.approx(0.75)  # 3 of 4 ids still matched in order
    assert report["drift"] == pytest.approx((0.1 + 0.2 + 0.0 + 0.1) / 4)
    assert report["drift_max"] == pytest.approx(0.2)
    assert report["worst"][0]["diverges_at"] == 1


def test_worst_prompts_come_first_and_overall_is_the_mean():
    ref = [_s([1], [-1.0]), _s([2], [-1.0]), _s([3], [-1.0])]
    got = [_s([1], [-1.0]), _s([2], [-3.0]), _s([3], [-1.5])]
    report = guardrail.compare(ref, got, ["a", "b", "c"])
    assert [w["prompt"] for w in report["worst"]] == [1, 2, 0]
    assert report["drift"] == pytest.approx((0 + 2.0 + 0.5) / 3)


def test_thresholds_sit_on_the_noise_floor_and_explicit_values_win():
    noise = {"drift": 0.02, "agreement": 0.9}
    assert guardrail.thresholds(noise, 3.0, None, None) == {
        "drift": pytest.approx(3 * 0.02 + guardrail.DRIFT_FLOOR), "agreement": 0.45}
    assert guardrail.thresholds(noise, 3.0, 0.5, 0.8) == {"drift": 0.5, "agreement": 0.8}


def test_verdict_and_constraints():
    ref = Reference(["p"], 4, [], {"drift": 0.0, "agreement": 1.0},
                    {"drift": 0.05, "agreement": 0.5})
    ok = guardrail.verdict({"drift": 0.01, "agreement": 0.9}, ref)
    bad = guardrail.verdict({"drift": 0.2, "agreement": 0.9}, ref)
    assert ok["passed"] and not bad["passed"]
    assert guardrail.constraints(ok) == pytest.approx({"quality_drift": -0.04,
                                                       "quality_agreement": -0.4})
    assert guardrail.constraints(bad)["quality_drift"] > 0
    assert guardrail.constraints(None) == {"quality_drift": 0.0, "quality_agreement": 0.0}


def test_reference_round_trips(tmp_path):
    ref = Reference(["p"], 4, [_s([1, 2], [-0.5, -0.25], "你好")], {"drift": 0.0,
                    "agreement": 1.0}, {"drift": 0.01, "agreement": 0.5}, {"model": "m"})
    ref.save(tmp_path / "r" / "ref.json")
    again = Reference.load(tmp_path / "r" / "ref.json")
    assert again == ref


def test_shipped_prompts_cover_languages_and_kinds():
    prompts = guardrail.default_prompts()
    assert len(prompts) >= 16
    assert any("Python" in p for p in prompts)  # code
    assert sum(any("\u4e00" <= ch <= "\u9fff" for ch in p) for p in prompts) >= 4  # Chinese
    assert max(len(p) for p in prompts) > 1500  # long context
    assert guardrail.read_prompts(None, 5) == prompts[:5]


class _Tok:
    def encode(self, text):
        return [ord(c) for c in text]


def test_expected_outputs_make_an_agreement_only_reference(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "ab", "expected": "xyz"}\n{"prompt": "c", "expected": "uv"}\n')
    ref = guardrail.expected_reference(str(path), 10, 2, _Tok(), {"model": "m"})
    assert ref is not None and ref.context["expected_outputs"]
    assert [s.output_ids for s in ref.samples] == [[120, 121], [117, 118]]  # cut to max_tokens
    assert ref.thresholds["agreement"] == 0.5
    same = [Sample(s.prompt_ids, s.output_ids, s.text, []) for s in ref.samples]
    report = guardrail.verdict(guardrail.compare(ref.samples, same, ref.prompts), ref)
    assert report["passed"] and report["drift"] == 0.0 and report["agreement"] == 1.0
    other = [Sample([1], [1, 2], "", []), Sample([1], [3, 4], "", [])]
    assert not guardrail.verdict(guardrail.compare(ref.samples, other, ref.prompts), ref)["passed"]


def test_prompts_without_expected_outputs_give_no_such_reference(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "ab", "expected": "x"}\n{"prompt": "c"}\n')
    assert guardrail.expected_reference(str(path), 10, 4, _Tok(), {}) is None
