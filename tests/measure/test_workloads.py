"""Workloads: exact random prompts with the tiny model's tokenizer, file formats, chat, the spec."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from pydantic import ValidationError

from autotune.measure.workloads import Tokenizer, build_sessions
from autotune.traffic import WorkloadSpec


@pytest.fixture(scope="module")
def model(tiny_model) -> str:
    return str(tiny_model)


@pytest.fixture(scope="module")
def tok(model) -> Tokenizer:
    return Tokenizer(model)


def _random(tok: Tokenizer, model: str, offset: int = 0, **spec: object) -> list[str]:
    sessions = build_sessions(WorkloadSpec(**spec), model, offset=offset, tokenizer=tok)
    return [s.turns[0].content for s in sessions]


def test_a_process_loads_each_tokenizer_once(model, tok):
    cached = Tokenizer.of(model)
    assert Tokenizer.of(model) is cached  # every trial and capacity step share it
    # and it builds the same prompts as a freshly loaded one
    spec = {"kind": "random", "num_requests": 4, "input_len": 20, "prefix_len": 8}
    assert _random(cached, model, **spec) == _random(tok, model, **spec)
    assert [s.turns[0].content for s in build_sessions(WorkloadSpec(**spec), model)] == \
        _random(tok, model, **spec)


# -- random ------------------------------------------------------------------------------

def test_random_text_has_exactly_n_tokens(tok):
    # The 512-token byte-level vocabulary often decodes to invalid UTF-8 (U+FFFD, three
    # tokens when re-encoded): the hardest case for exact lengths.
    rng = np.random.default_rng(0)
    for n in [1, 2, 3, 5, 8, 13, 64, 300] * 5:
        assert len(tok.encode(tok.random_text(rng, n))) == n


def test_random_prompts_have_input_len_tokens(tok, model):
    sessions = build_sessions(WorkloadSpec(num_requests=30, input_len=64, output_len=9),
                              model, tokenizer=tok)
    assert len(sessions) == 30
    for s in sessions:
        (turn,) = s.turns
        assert len(tok.encode(turn.content)) == turn.prompt_len == 64
        assert turn.max_tokens == 9 and s.system is None and s.history == []


def test_range_ratio_bounds_lengths(tok, model):
    spec = WorkloadSpec(num_requests=100, input_len=40, output_len=20, range_ratio=0.5)
    sessions = build_sessions(spec, model, tokenizer=tok)
    ins = [s.turns[0].prompt_len for s in sessions]
    outs = [s.turns[0].max_tokens for s in sessions]
    assert 20 <= min(ins) < 26 and 54 < max(ins) <= 60  # the whole range is used
    assert 10 <= min(outs) < 13 and 27 < max(outs) <= 30
    assert all(len(tok.encode(s.turns[0].content)) == s.turns[0].prompt_len for s in sessions)


def test_prefix_is_shared_and_counted(tok, model):
    prompts = _random(tok, model, num_requests=20, input_len=16, prefix_len=32)
    prefix = os.path.commonprefix(prompts)
    assert len(tok.encode(prefix)) == 32
    # Prefix and body are made apart, so BPE may merge across the seam: measured on the
    # tiny tokenizer, 1 prompt in 600 came out 1 token short. Allow one token either way.
    lens = [len(tok.encode(p)) for p in prompts]
    assert all(abs(n - 48) <= 1 for n in lens)
    assert sum(n == 48 for n in lens) >= 18


def test_seed_reproduces_prompts(tok, model):
    spec = dict(num_requests=5, input_len=24, prefix_len=8)
    assert _random(tok, model, **spec) == _random(tok, model, **spec)
    assert _random(tok, model, **spec) != _random(tok, model, seed=1, **spec)


def test_offset_changes_prompts_but_not_the_prefix(tok, model):
    spec = dict(num_requests=10, input_len=24, prefix_len=16)
    first, second = _random(tok, model, **spec), _random(tok, model, offset=1, **spec)
    assert set(first).isdisjoint(second)
    prefix = os.path.commonprefix(first)
    assert prefix and all(p.startswith(prefix) for p in second)


def test_count_overrides_num_requests(tok, model):
    assert len(_random(tok, model, num_requests=10, input_len=4)) == 10
    sessions = build_sessions(WorkloadSpec(num_requests=10, input_len=4), model, count=3,
                              tokenizer=tok)
    assert len(sessions) == 3


# -- chat --------------------------------------------------------------------------------

def test_chat_sessions_share_a_system_prompt(tok, model):
    spec = WorkloadSpec(kind="chat", conversations=3, turns=4, system_len=40, input_len=16,
                        output_len=5)
    sessions = build_sessions(spec, model, tokenizer=tok)
    assert len(sessions) == 3 and all(len(s.turns) == 4 for s in sessions)
    assert len({s.system for s in sessions}) == 1
    assert len(tok.encode(sessions[0].system or "")) == 40
    for s in sessions:
        assert s.history == []
        for turn in s.turns:
            assert len(tok.encode(turn.content)) == 16 and turn.max_tokens == 5
    assert len({t.content for s in sessions for t in s.turns}) == 12


def test_chat_without_system_prompt(tok, model):
    spec = WorkloadSpec(kind="chat", conversations=2, turns=1, system_len=0, input_len=8)
    assert all(s.system is None for s in build_sessions(spec, model, tokenizer=tok))


# -- jsonl -------------------------------------------------------------------------------

def _jsonl(tmp_path, *lines: str):
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_rows(tmp_path, model):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"},
                {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]
    path = _jsonl(tmp_path,
                  json.dumps({"prompt": "one", "max_tokens": 5}),
                  json.dumps({"prompt": "two", "output_len": 9}),
                  "",
                  json.dumps({"prompt": "three"}),
                  json.dumps({"messages": messages, "max_tokens": 3}))
    spec = WorkloadSpec(kind="jsonl", api="chat", path=str(path), num_requests=4, output_len=77)
    sessions = {s.turns[0].content: s for s in build_sessions(spec, model)}
    assert set(sessions) == {"one", "two", "three", "u2"}  # each row once
    assert {k: s.turns[0].max_tokens for k, s in sessions.items()} == {
        "one": 5, "two": 9, "three": 77, "u2": 3}
    chat = sessions["u2"]
    assert chat.system == "S" and chat.history == messages[1:3]
    assert sessions["one"].system is None and sessions["one"].history == []


def test_jsonl_repeats_rows_for_more_requests(tmp_path, model):
    path = _jsonl(tmp_path, '{"prompt": "a"}', '{"prompt": "b"}')
    sessions = build_sessions(WorkloadSpec(kind="jsonl", path=str(path), num_requests=7), model)
    assert len(sessions) == 7 and {s.turns[0].content for s in sessions} == {"a", "b"}


@pytest.mark.parametrize("bad, message", [
    ("{not json", "not JSON"),
    ('{"text": "no prompt"}', "needs a 'prompt' or 'messages' key"),
    ('{"messages": [{"role": "assistant", "content": "x"}]}', "must end with a user message"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, model, bad, message):
    path = _jsonl(tmp_path, '{"prompt": "fine"}', bad)
    with pytest.raises(ValueError, match=message) as info:
        build_sessions(WorkloadSpec(kind="jsonl", api="chat", path=str(path)), model)
    assert f"{path}:2:" in str(info.value)


def test_jsonl_messages_need_the_chat_api(tmp_path, model):
    path = _jsonl(tmp_path, '{"messages": [{"role": "user", "content": "x"}]}')
    with pytest.raises(ValueError, match="need `api: chat`"):
        build_sessions(WorkloadSpec(kind="jsonl", path=str(path)), model)


def test_empty_jsonl_is_rejected(tmp_path, model):
    path = _jsonl(tmp_path, "")
    with pytest.raises(ValueError, match="no usable prompts"):
        build_sessions(WorkloadSpec(kind="jsonl", path=str(path)), model)


# -- sharegpt ----------------------------------------------------------------------------

def test_sharegpt(tmp_path, tok, model):
    reply = "Not much, thanks for asking."
    data = [
        {"conversations": [{"from": "human", "value": "What is up?"},
                           {"from": "gpt", "value": reply},
                           {"from": "human", "value": "later turns are ignored"}]},
        {"conversations": [{"from": "human", "value": "a single turn is skipped"}]},
        {"conversations": [{"from": "human", "value": "an empty reply is skipped"},
                           {"from": "gpt", "value": ""}]},
        {"conversation": [{"from": "human", "value": "other key"},
                          {"from": "gpt", "value": "ok"}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    sessions = build_sessions(WorkloadSpec(kind="sharegpt", path=str(path), num_requests=2),
                              model)
    turns = {s.turns[0].content: s.turns[0] for s in sessions}
    assert set(turns) == {"What is up?", "other key"}
    first = turns["What is up?"]
    assert first.max_tokens == len(tok.encode(reply)) > 1
    assert first.prompt_len == len(tok.encode("What is up?"))
    assert turns["other key"].max_tokens == len(tok.encode("ok"))


# -- the spec ----------------------------------------------------------------------------

def test_unknown_key_is_rejected():
    with pytest.raises(ValidationError, match="input_length"):
        WorkloadSpec(input_length=5)


@pytest.mark.parametrize("kind", ["jsonl", "sharegpt"])
def test_file_kinds_need_a_path(kind):
    with pytest.raises(ValidationError, match="needs `path`"):
        WorkloadSpec(kind=kind)


def test_chat_kind_forces_the_chat_api():
    assert WorkloadSpec(kind="chat", api="completions").api == "chat"
    assert WorkloadSpec(kind="random").api == "completions"


@pytest.mark.parametrize("field, value", [("range_ratio", 1.0), ("num_requests", 0),
                                          ("request_rate", 0), ("timeout_s", 0)])
def test_out_of_range_values_are_rejected(field, value):
    with pytest.raises(ValidationError, match=field):
        WorkloadSpec(**{field: value})
