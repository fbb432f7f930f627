"""The shipped real-text workloads (`kind: text`) and how both clients read them."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from autotune.measure import vllmbench, workloads
from autotune.traffic import DATASETS, WorkloadSpec
from autotune.tuning.policy.space import relation_violation  # noqa: F401 - the layer imports cleanly


@pytest.mark.parametrize("dataset", DATASETS)
def test_each_shipped_workload_is_48_chat_prompts_of_the_articles_size(dataset):
    rows = [json.loads(line) for line in
            workloads.dataset_path(dataset).read_text().splitlines()]
    assert len(rows) == 48
    assert all(set(r) == {"prompt", "output_tokens"} and r["output_tokens"] == 128
               for r in rows)
    # about 512 tokens each (scripts/make_workloads.py counts with SmolLM2's tokenizer;
    # here ~4 characters a token, loosely)
    assert all(1200 < len(r["prompt"]) < 3600 for r in rows)
    assert len({r["prompt"] for r in rows}) == len(rows)


def test_a_text_workload_is_sent_through_the_chat_api_and_ends_where_the_model_does():
    spec = WorkloadSpec(kind="text", dataset="edit", num_requests=5)
    assert spec.api == "chat" and spec.ignore_eos is False
    assert WorkloadSpec(kind="text", dataset="chat", ignore_eos=True).ignore_eos is True
    sessions = workloads.build_sessions(spec, "unused: no tokenizer is needed")
    assert len(sessions) == 5 and all(s.turns[0].max_tokens == 128 for s in sessions)
    edit = workloads.build_sessions(spec, "x")
    assert [s.turns[0].content for s in edit] == [s.turns[0].content for s in sessions]


@pytest.mark.parametrize("fields, message", [
    ({"kind": "text"}, "needs it"),
    ({"kind": "random", "dataset": "edit"}, "goes with workload kind 'text'"),
    ({"kind": "text", "dataset": "poems"}, "edit"),
])
def test_a_text_workload_names_one_shipped_dataset(fields, message):
    with pytest.raises(ValidationError, match=message):
        WorkloadSpec(**fields)


def test_vllm_bench_serve_reads_the_same_file_as_its_custom_dataset():
    spec = WorkloadSpec(kind="text", dataset="chat")
    args, note = vllmbench.dataset_args(spec)
    assert note is None
    assert args[:4] == ["--dataset-name", "custom", "--dataset-path",
                        str(workloads.dataset_path("chat"))]
    # each row's output_tokens; the prompt goes out as the user's message as it is
    assert args[4:] == ["--custom-output-len", "-1", "--skip-chat-template"]
    step = vllmbench.step_args(spec, vllmbench.Endpoint("http://127.0.0.1:1", "m", "m"),
                               vllmbench.Invocation(2.0, 10, 0))
    assert "openai-chat" in step and "--ignore-eos" not in step


def test_autotune_bench_takes_the_text_workload(capsys):
    from autotune.cli import main as cli

    assert cli.main(["bench", "--url", "http://127.0.0.1:1", "--workload", "text"]) == 2
    err = capsys.readouterr().err
    assert "`dataset` goes with workload kind 'text', which needs it (allowed: edit, chat)" \
        in err and "Value error" not in err and err.count("\n") == 1
