"""The guardrail's comparisons and thresholds on hand-made samples."""

import dataclasses
import json

import pytest

from autotune.config import GuardrailSpec, Scenario
from autotune.errors import ConfigError
from autotune.measure.workloads import Tokenizer
from autotune.tuning.quality import accuracy
from autotune.tuning.quality._comparison import compare
from autotune.tuning.quality._contextfit import fitting, left_out_text
from autotune.tuning.quality.client import Refused
from autotune.tuning.quality.guard import Guard, make_guard
from autotune.tuning.quality.prompts import default_prompts, expected_reference, read_prompts
from autotune.tuning.quality.reference import Reference, Sample, TaskAnswers
from autotune.tuning.quality.template import PLAIN, has_chat_template
from autotune.tuning.quality.verdict import (
    DRIFT_FLOOR,
    Quality,
    constraints,
    drift_verdict,
    judge,
    thresholds,
)


def _s(ids, logprobs, text="t"):
    return Sample(prompt_ids=[1, 2], output_ids=ids, text=text, logprobs=logprobs)


def test_identical_outputs_agree_and_do_not_drift():
    ref = [_s([5, 6, 7, 8], [-1.0, -2.0, -0.5, -0.1])]
    report = compare(ref, [_s([5, 6, 7, 8], [-1.0, -2.0, -0.5, -0.1])], ["p"])
    assert report.drift == 0.0 and report.agreement == 1.0
    assert report.prefix_ratio == 1.0


def test_an_early_flip_collapses_the_prefix_but_not_the_drift():
    ref = [_s([5, 6, 7, 8], [-1.0, -2.0, -0.5, -0.1])]
    # diverges at token 1; the reference tokens' log-probs moved by 0.1, 0.2, 0, 0.1
    got = [_s([5, 9, 7, 8], [-1.1, -2.2, -0.5, -0.2])]
    report = compare(ref, got, ["p"])
    assert report.prefix_ratio == 0.25  # 1 of 4 tokens before the flip
    assert report.agreement == pytest.approx(0.75)  # 3 of 4 ids still matched in order
    assert report.drift == pytest.approx((0.1 + 0.2 + 0.0 + 0.1) / 4)
    assert report.drift_max == pytest.approx(0.2)
    assert report.worst[0]["diverges_at"] == 1


def test_worst_prompts_come_first_and_overall_is_the_mean():
    ref = [_s([1], [-1.0]), _s([2], [-1.0]), _s([3], [-1.0])]
    got = [_s([1], [-1.0]), _s([2], [-3.0]), _s([3], [-1.5])]
    report = compare(ref, got, ["a", "b", "c"])
    assert [w["prompt"] for w in report.worst] == [1, 2, 0]
    assert report.drift == pytest.approx((0 + 2.0 + 0.5) / 3)


def test_thresholds_sit_on_the_noise_floor_and_explicit_values_win():
    noise = {"drift": 0.02, "agreement": 0.9}
    assert thresholds(noise, 3.0, None, None) == {
        "drift": pytest.approx(3 * 0.02 + DRIFT_FLOOR), "agreement": 0.45}
    assert thresholds(noise, 3.0, 0.5, 0.8) == {"drift": 0.5, "agreement": 0.8}


def test_verdict_and_constraints():
    ref = Reference(["p"], 4, [], {"drift": 0.0, "agreement": 1.0},
                    {"drift": 0.05, "agreement": 0.5})
    ok = drift_verdict(Quality(drift=0.01, agreement=0.9), ref)
    bad = drift_verdict(Quality(drift=0.2, agreement=0.9), ref)
    assert ok.passed and not bad.passed
    assert constraints(ok) == {"quality": 0.0}
    assert constraints(bad) == {"quality": 1.0}
    assert constraints(None) == {"quality": 0.0}


def test_reference_round_trips(tmp_path):
    ref = Reference(["p"], 4, [_s([1, 2], [-0.5, -0.25], "你好")], {"drift": 0.0,
                    "agreement": 1.0}, {"drift": 0.01, "agreement": 0.5}, {"model": "m"})
    ref.save(tmp_path / "r" / "ref.json")
    again = Reference.load(tmp_path / "r" / "ref.json")
    assert again == ref


def test_shipped_prompts_cover_languages_and_kinds():
    prompts = default_prompts()
    assert len(prompts) >= 16
    assert any("Python" in p for p in prompts)  # code
    assert sum(any("\u4e00" <= ch <= "\u9fff" for ch in p) for p in prompts) >= 4  # Chinese
    assert max(len(p) for p in prompts) > 1500  # long context
    assert read_prompts(None, 5) == prompts[:5]


class _Tok:
    def encode(self, text):
        return [ord(c) for c in text]


def test_expected_outputs_make_an_agreement_only_reference(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "ab", "expected": "xyz"}\n{"prompt": "c", "expected": "uv"}\n')
    ref = expected_reference(str(path), 10, 2, _Tok(), {"model": "m"})
    assert ref is not None and ref.context["expected_outputs"]
    assert [s.output_ids for s in ref.samples] == [[120, 121], [117, 118]]  # cut to max_tokens
    assert ref.thresholds["agreement"] == 0.5
    same = [Sample(s.prompt_ids, s.output_ids, s.text, []) for s in ref.samples]
    report = drift_verdict(compare(ref.samples, same, ref.prompts), ref)
    assert report.passed and report.drift == 0.0 and report.agreement == 1.0
    other = [Sample([1], [1, 2], "", []), Sample([1], [3, 4], "", [])]
    assert not drift_verdict(compare(ref.samples, other, ref.prompts), ref).passed


def test_prompts_without_expected_outputs_give_no_such_reference(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "ab", "expected": "x"}\n{"prompt": "c"}\n')
    assert expected_reference(str(path), 10, 4, _Tok(), {}) is None


def _ref(tasks=None, template="chat"):
    return Reference(["p"], 4, [], {"drift": 0.001, "agreement": 1.0},
                     {"drift": 0.013, "agreement": 0.5}, template=template, tasks=tasks)


def _tasks(lost, gained, n=200, changed=None):
    ref = [True] * 100 + [False] * (n - 100)
    got = list(ref)
    for i in range(lost):
        got[i] = False
    for i in range(gained):
        got[100 + i] = True
    return accuracy.score(ref, got, changed if changed is not None else lost + gained)


@pytest.mark.parametrize(("drift", "lost", "gained", "require", "said", "passed"), [
    (0.0, 0, 0, "within_budget", "unchanged", True),
    (0.07, 4, 3, "within_budget", "changed", True),       # changed, no drop shown
    (0.07, 4, 3, "unchanged", "changed", False),          # ... rejected when unchanged is due
    (0.15, 30, 2, "within_budget", "worse", False),       # -14 points, interval below 0
    (0.0, 30, 2, "within_budget", "worse", False),        # the task check outranks drift
])
def test_the_verdict_joins_drift_and_the_task_check(drift, lost, gained, require, said,
                                                     passed):
    spec = GuardrailSpec(require=require)
    q = judge(Quality(drift=drift, agreement=1.0), _ref(), _tasks(lost, gained),
                           spec)
    assert (q.verdict, q.passed) == (said, passed)
    assert constraints(q) == {"quality": 0.0 if passed else 1.0}
    assert q.tasks is not None and q.budget == 1.0 and q.template == "chat"
    # what show, the report and export print
    words = q.words()
    assert "% of answers changed; accuracy" in words and "to" in words
    assert {"unchanged": "unchanged", "changed": "within the 1-point budget",
            "worse": "worse: beyond the 1-point budget"}[said] in words
    if require == "unchanged" and said != "unchanged":
        assert "requires unchanged" in words
    # stored and read back as the trial record keeps it
    again = Quality.from_dict(q.as_dict())
    assert again == q and isinstance(again.tasks, accuracy.TaskScore)


def test_without_a_task_check_a_change_beyond_the_noise_is_worse():
    q = judge(Quality(drift=0.07, agreement=1.0), _ref(), None, GuardrailSpec())
    assert q.verdict == "worse" and not q.passed and q.budget is None
    assert "no task check" in q.words()
    assert judge(Quality(drift=0.0, agreement=1.0), _ref(), None,
                              GuardrailSpec()).verdict == "unchanged"


def test_quality_cells_and_the_noise_multiple():
    q = judge(Quality(drift=0.07, agreement=0.9), _ref(), _tasks(4, 2),
                           GuardrailSpec())
    assert q.short() == f"changed -1.0 ({q.tasks.difference_low:+.1f}.." \
                        f"{q.tasks.difference_high:+.1f})"
    assert q.noise_multiple() == "70x the noise floor"
    worse = judge(Quality(drift=0.2, agreement=0.9), _ref(), _tasks(30, 0),
                               GuardrailSpec())
    assert worse.short().startswith("WORSE -15.0")
    zero = Quality.from_dict({"drift": 0.0, "noise": {"drift": 0.0}})
    assert zero.noise_multiple() == "noise floor 0"


def test_a_reference_of_an_older_autotune_reads_as_plain_without_tasks(tmp_path):
    old = {"prompts": ["p"], "max_tokens": 4, "samples": [], "noise": {"drift": 0.0,
           "agreement": 1.0}, "thresholds": {"drift": 0.01, "agreement": 0.5},
           "context": {}}
    path = tmp_path / "reference.json"
    path.write_text(json.dumps(old))
    ref = Reference.load(path)
    assert ref.template == "plain" and ref.tasks is None
    new = _ref(TaskAnswers(2, 0, 24, ["a", "b"], [True, False]))
    new.save(path)
    assert Reference.load(path) == new


def test_an_old_plain_reference_is_kept_and_a_contrary_template_is_refused(tmp_path, tiny_model):
    scenario = {"model": {"path": str(tiny_model)}, "guardrail": {"num_prompts": 1,
                                                                  "max_tokens": 4}}
    ref = Reference(default_prompts()[:1], 4, [], {"drift": 0.0, "agreement": 1.0},
                    {"drift": 0.01, "agreement": 0.5})  # plain, as before templates
    ref.save(tmp_path / "reference.json")
    guard = make_guard(Scenario.model_validate(scenario), tmp_path)
    assert guard is not None and guard.template == "plain" and guard.reference is not None
    assert guard.sent(["hi"]) == ["hi"]
    chat = {**scenario, "guardrail": {**scenario["guardrail"], "template": "chat"}}
    with pytest.raises(ConfigError, match="guardrail.template: .* made with plain prompts"):
        make_guard(Scenario.model_validate(chat), tmp_path)


def test_a_new_reference_goes_through_the_chat_template(tmp_path, tiny_model):
    sc = Scenario.model_validate({"model": {"path": str(tiny_model)}})
    guard = make_guard(sc, tmp_path)
    assert guard is not None and guard.template == "chat" and guard.reference is None
    ids = guard.sent(["hello"])[0]
    text = Tokenizer.of(str(tiny_model)).tok.decode(ids)
    assert text.startswith("<|im_start|>") and "hello" in text
    assert text.rstrip().endswith("<|im_start|>assistant")
    plain = Scenario.model_validate({"model": {"path": str(tiny_model)},
                                     "guardrail": {"template": "plain"}})
    assert make_guard(plain, tmp_path / "other").template == "plain"


@pytest.mark.parametrize("where", ["file", "config", "extra-folder", "none", "empty-config"])
def test_a_local_models_chat_template_is_found_where_transformers_finds_it(tmp_path, tiny_model,
                                                                           where):
    """The folder is read without loading the tokenizer, and must agree with it."""
    import shutil

    from transformers import AutoTokenizer

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    template = (model / "chat_template.jinja").read_text()
    (model / "chat_template.jinja").unlink()
    config = json.loads((model / "tokenizer_config.json").read_text())
    if where == "file":
        (model / "chat_template.jinja").write_text(template)
    elif where == "config":
        config["chat_template"] = template
    elif where == "extra-folder":
        (model / "additional_chat_templates").mkdir()
        (model / "additional_chat_templates" / "tool_use.jinja").write_text(template)
    elif where == "empty-config":
        config["chat_template"] = ""
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    said = has_chat_template(str(model))
    assert said == bool(AutoTokenizer.from_pretrained(str(model)).chat_template)
    assert said == (where in ("file", "config", "extra-folder"))


def test_items_longer_than_the_engines_context_are_left_out_and_named():
    # prompt + answer + the scoring request's one more token must fit
    assert fitting([10, 2039, 1329, 40], 48, 2048) == [0, 2, 3]
    assert fitting([10, 2039, 1329, 40], 48, 1024) == [0, 3]
    assert fitting([10, 2039], 48, None) == [0, 1]  # the context unknown: all
    text = left_out_text("guardrail prompt", [1, 2], [10, 2039, 1329], 48, 2048)
    assert text == ("guardrail prompt 2 (2,039 tokens), 3 (1,329 tokens) + 48 to answer: "
                    "longer than the engine's 2,048-token context, left out")
    assert left_out_text("task item", [], [10], 24, 2048) is None
    many = left_out_text("task item", range(5), [9999] * 5, 24, 100)
    assert many is not None and "and 2 more" in many
    q = Quality(drift=0.0, agreement=1.0, passed=True, verdict=accuracy.UNCHANGED,
                left_out=[text])
    assert q.words().endswith(text)


def test_a_check_autotune_could_not_send_is_no_rejection():
    """A check the engine refused as autotune built it (HTTP 4xx) is `not_checked`: the
    trial stands (no quality constraint broken) and says why."""
    q = Quality(not_checked="guardrail request failed: HTTP 400: too long")
    assert constraints(q) == {"quality": 0.0}
    assert q.words() == "not checked: guardrail request failed: HTTP 400: too long"
    assert Quality.from_dict(json.loads(json.dumps(q.as_dict()))).not_checked == q.not_checked


def test_a_reference_made_before_items_were_left_out_reads_with_none_left_out(tmp_path):
    ref = Reference(["p"], 4, [_s([1, 2], [-0.5, -0.25])], {"drift": 0.0, "agreement": 1.0},
                    {"drift": 0.01, "agreement": 0.5})
    data = json.loads(json.dumps(dataclasses.asdict(ref)))
    data.pop("left_out")
    path = tmp_path / "reference.json"
    path.write_text(json.dumps(data))
    assert Reference.load(path).left_out == []


def test_a_refused_check_leaves_the_trial_standing_and_an_engine_failure_prunes(monkeypatch):
    """`trial._quality`: the engine refusing autotune's request (HTTP 4xx, `Refused`) is
    `not_checked` (the trial completes); the engine failing under the check (HTTP 5xx, a
    dropped connection) is an `error`, which prunes it as guardrail_error."""
    from autotune.measure.loadgen import Target
    from autotune.tuning import trial
    from autotune.tuning.quality import checking

    guard = Guard(GuardrailSpec(), ["p"], None, PLAIN, "m")
    facts = trial.EngineRun({})
    target = Target("http://127.0.0.1:9", "m", {})

    def refused(*a, **k):
        raise Refused("guardrail request failed: HTTP 400: prompt too long")

    monkeypatch.setattr(checking, "make_reference", refused)
    quality, ref = trial._quality(target, guard, facts, "m", lambda: None)
    assert ref is None and quality.error is None and quality.not_checked
    assert constraints(quality) == {"quality": 0.0}

    def failed(*a, **k):
        raise RuntimeError("guardrail request failed: HTTP 500: EngineCore encountered")

    monkeypatch.setattr(checking, "make_reference", failed)
    quality, _ = trial._quality(target, guard, facts, "m", lambda: None)
    assert quality.error is not None and quality.error.startswith("RuntimeError: ")
