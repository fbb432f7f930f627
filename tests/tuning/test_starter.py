"""A scenario from one command line (`autotune.tuning.starter`, `autotune init`): the ranges
it chooses for recorded cards, that the installed vLLM's parser takes every value, that the
written file is the scenario it built (hostile names included), and its errors."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import config
from autotune.cli.main import main
from autotune.engine.info import engine_info
from autotune.tinymodel import PRESETS
from autotune.tuning import starter

# GPU facts as the committed studies recorded them (NVML's name and total memory).
from autotune.tuning.policy import memory, space

H200 = starter.Card("NVIDIA H200", 143771 / 1024, cores=16)
RTX_4090D = starter.Card("NVIDIA GeForce RTX 4090 D", 24564 / 1024, cores=16)
QWEN3_4B = memory.ModelShape.from_config(PRESETS["qwen3-4b"])
TINY = memory.ModelShape.from_config(PRESETS["tiny"])


@pytest.fixture(scope="module")
def cuda():
    """The installed engine's flags and choices, read as on a GPU machine."""
    return dataclasses.replace(engine_info(), device="cuda")


def _build(card, info, **asked):
    return starter.build(starter.Asked("/models/Qwen3-4B-Instruct-2507", {"ttft_p95_ms": 500},
                                       **asked), card=card, engine=info, shape=QWEN3_4B)


def test_a_24_gb_card_and_an_h200_get_ranges_of_their_own(cuda):
    small, big = _build(RTX_4090D, cuda), _build(H200, cuda)
    seqs = {c: s.scenario.space["max-num-seqs"].choices for c, s in (("24", small), ("141", big))}
    # the 24 GB card's fp8 KV cache holds ~150 requests of 1,408 tokens, the H200's ~1,300
    assert max(seqs["24"]) == 256 and max(seqs["141"]) == 1024 and min(seqs["24"]) == 16
    assert 32768 not in small.scenario.space["max-num-batched-tokens"].choices
    assert 32768 in big.scenario.space["max-num-batched-tokens"].choices
    for s in (small, big):
        assert s.scenario.space["gpu-memory-utilization"].choices == [0.85, 0.9, 0.95]
        assert s.scenario.space["kv-cache-dtype"].choices == ["auto", "fp8"]
        # the model's 262,144-token context would not fit one sequence in a 24 GB cache
        assert s.scenario.engine.flags["max-model-len"] == 2048
        assert s.scenario.budget.explain and s.scenario.budget.validate_ is not None
    texts = {c.key: c.text for c in small.choices}
    assert texts["max-num-seqs"].startswith("max-num-seqs 16-256: a 24 GiB card holds about")
    assert "in fp8" in texts["max-num-seqs"]
    assert "more than this card's KV cache holds for one sequence" in texts["max-model-len"]
    assert small.scenario.name == "qwen3-4b-instruct-2507-rtx-4090-d"
    assert big.scenario.name == "qwen3-4b-instruct-2507-h200"


def test_an_emulated_card_is_sized_as_the_small_card(cuda):
    emulated = _build(H200, cuda, memory_gib=24)
    assert emulated.scenario.hardware.memory_gib == 24
    assert emulated.scenario.space["max-num-seqs"].choices == \
        _build(RTX_4090D, cuda).scenario.space["max-num-seqs"].choices
    assert 32768 not in emulated.scenario.space["max-num-batched-tokens"].choices


@pytest.mark.parametrize("card", [H200, RTX_4090D, starter.Card("cpu", None, cores=2)])
@pytest.mark.parametrize("workload", ["random", "chat", "text", "trace"])
def test_the_installed_vllm_takes_every_value_chosen(card, workload, cuda, tmp_path):
    info = engine_info() if card.memory_gib is None else cuda
    start = starter.build(starter.Asked("/models/Qwen3-4B-Instruct-2507", {"ttft_p95_ms": 500},
                                        workload), card=card, engine=info, shape=QWEN3_4B)
    space.check_against_engine(start.scenario, info, tmp_path / "scenario.yaml")
    # every point of the space is a combination vLLM takes, not only each value alone
    names = list(start.scenario.space)
    points = itertools.product(*(start.scenario.space[n].choices for n in names))
    fixed = start.scenario.engine.flags
    assert all(space.relation_violation({**fixed, **dict(zip(names, p, strict=True))}) is None
               for p in points)


def test_the_written_file_is_the_scenario_even_for_a_hostile_model_name(tmp_path):
    model = tmp_path / 'we"ird: #model\n- {x}'
    model.mkdir()
    (model / "config.json").write_text("{}")
    start = starter.build(starter.Asked(str(model), {"e2el_p95_ms": 2500}),
                          card=starter.Card("cpu", None), engine=engine_info(), shape=TINY)
    path = tmp_path / "s" / "scenario.yaml"
    path.parent.mkdir()
    path.write_text(start.yaml())
    loaded = config.load(path)
    assert loaded.model.path == str(model) and loaded.model_dump() == start.scenario.model_dump()
    assert config.check_study_name(str(start.scenario.name)) == start.scenario.name
    # comments carry no user text: every comment line is one of the choices or the header
    comments = [line for line in start.yaml().splitlines() if line.startswith("#")]
    assert not any("we\"ird" in line for line in comments)


def _init(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune", "init", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _init_here(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`autotune init ARGS` in this process: its exit code, stdout and stderr. Each `init`
    process imports transformers' AutoTokenizer (4 s of a CPU) to size max-model-len; the
    command's own process is tested by the first call below and by the refusals."""
    code = main(["init", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_init_writes_says_why_and_refuses_to_overwrite_another_scenario(tiny_model, tmp_path,
                                                                         monkeypatch, capsys):
    first = _init("--model", str(tiny_model), "--slo", "e2el_p95_ms=2500", "--studies-dir",
                  str(tmp_path), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    path = tmp_path / "tiny-cpu" / "scenario.yaml"
    assert f"wrote {path}" in first.stdout and "max-num-seqs 4-64" in first.stdout
    assert config.load(path).objective.slos == {"e2el_p95_ms": 2500}
    # the guardrail's prompt 13 is 2,039 tokens through the tiny model's template, + 48 to
    # answer + 1 to score: 2,048 would leave it 9 tokens and its check an HTTP 400
    assert config.load(path).engine.flags["max-model-len"] == 4096
    assert "the quality check's longest prompt and answer 2,088" in first.stdout
    monkeypatch.chdir(tmp_path)
    code, out, _ = _init_here("--model", str(tiny_model), "--slo", "e2el_p95_ms=2500",
                              "--studies-dir", str(tmp_path), capsys=capsys)
    assert code == 0 and "already written, the same scenario" in out
    code, _, err = _init_here("--model", str(tiny_model), "--slo", "e2el_p95_ms=900",
                              "--studies-dir", str(tmp_path), capsys=capsys)
    assert code == 2 and "exists and says otherwise" in err and err.count("\n") == 1, err
    assert config.load(path).objective.slos == {"e2el_p95_ms": 2500}  # left as it was


@pytest.mark.parametrize("args, words", [
    (["--slo", "ttft_p95=500"], "--slo: SLO 'ttft_p95' must end in _ms"),
    ([], "--model needs at least one --slo"),
    (["--slo", "ttft_p95_ms=500", "--workload", "nope"], "--workload 'nope': not one of"),
    (["--slo", "ttft_p95_ms=500", "--memory-gib", "24"], "--memory-gib emulates a smaller"),
])
def test_bad_input_is_one_line_and_exit_2(args, words, tiny_model, tmp_path):
    proc = _init("--model", str(tiny_model), *args, "--studies-dir", str(tmp_path),
                 cwd=tmp_path)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("args, words", [
    ([], "give a scenario file or --model"),
    (["x.yaml", "--model", "m", "--slo", "ttft_p95_ms=5"], "give a scenario file or --model"),
    (["x.yaml", "--slo", "ttft_p95_ms=5"], "--slo, --workload and --memory-gib go with"),
])
def test_tune_takes_a_file_or_a_model(args, words, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "autotune", "tune", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr


def test_a_trace_file_is_told_from_a_file_of_prompts(tmp_path):
    csv = tmp_path / "azure.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2,3,4\n")
    timed = tmp_path / "mooncake.jsonl"
    timed.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n')
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello", "max_tokens": 4}\n')
    assert starter.workload_of(str(csv), cpu=True) == {"kind": "trace", "path": str(csv)}
    assert starter.workload_of(str(timed), cpu=False) == {"kind": "trace", "path": str(timed)}
    assert starter.workload_of(str(prompts), cpu=True) == {"kind": "jsonl",
                                                           "path": str(prompts)}
    shipped = starter.workload_of("trace", cpu=True)
    assert (shipped["kind"], shipped["dataset"]) == ("trace", "day")


def test_the_quality_check_sizes_max_model_len(tiny_model):
    """What the guardrail needs of one sequence, as the tiny model's tokenizer counts it,
    and a build that fits it (or the model's own context, where that is all there is)."""
    need = starter.check_tokens(str(tiny_model))
    assert need == 2039 + 48 + 1
    asked = starter.Asked(str(tiny_model), {"e2el_p95_ms": 2500})
    build = starter.build(asked, card=starter.Card("cpu", None), engine=engine_info(),
                          shape=TINY, check=need)
    assert build.scenario.engine.flags["max-model-len"] == 4096
    tight = dataclasses.replace(TINY, max_position_embeddings=2048)
    build = starter.build(asked, card=starter.Card("cpu", None), engine=engine_info(),
                          shape=tight, check=need)
    assert "max-model-len" not in build.scenario.engine.flags  # the model's own 2,048
