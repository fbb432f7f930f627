"""Trace workloads: both formats, kept arrival gaps, shared prefixes from hash_ids, the
windows a step replays, the shipped trace's shape, and bad files as one error line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from autotune import _traces as traces
from autotune import config
from autotune.errors import ConfigError
from autotune.measure import loadgen, workloads
from autotune.measure.workloads import Tokenizer
from autotune.stored import json_data
from autotune.traffic import WorkloadSpec
from tests import azure

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,879,0
2023-11-16 18:15:56.5000000,91,7
"""


def _mooncake(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


MOONCAKE = _mooncake([
    {"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [0, 1]},
    {"timestamp": 1500, "input_length": 150, "output_length": 20, "hash_ids": [0, 1, 2]},
    {"timestamp": 1500, "input_length": 90, "output_length": 5, "hash_ids": [0, 3]},
    {"timestamp": 4000, "input_length": 120, "output_length": 8},
])


@pytest.fixture(scope="module")
def tok(tiny_model) -> Tokenizer:
    return Tokenizer.of(str(tiny_model))


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_an_azure_csv_keeps_its_arrival_gaps(tmp_path, tok):
    path = _write(tmp_path, "azure.csv", AZURE)
    trace = traces.load(path, 512)
    assert [r.at_s for r in trace.requests] == pytest.approx([0, 4.314579, 4.31941, 9.81941])
    assert [(r.input_tokens, r.output_tokens) for r in trace.requests] == \
        [(374, 44), (396, 109), (879, 0), (91, 7)]
    assert trace.mean_rate == pytest.approx(4 / 9.81941)
    # Every prompt is its own (no hash ids): no two requests share a block.
    blocks = [b for r in trace.requests for b in r.blocks]
    assert len(blocks) == len(set(blocks)) == 1 + 1 + 2 + 1
    spec = WorkloadSpec(kind="trace", path=path, num_requests=4, time_scale=2)
    sessions = workloads.build_sessions(spec, "unused", tokenizer=tok)
    # twice as fast: every recorded gap halved; an empty recorded reply asks for one token
    assert [s.at for s in sessions] == pytest.approx([0, 2.1572895, 2.159705, 4.909705])
    assert loadgen.due_times(sessions, spec) == [s.at for s in sessions]
    assert [len(s.turns[0].token_ids or ()) for s in sessions] == [374, 396, 879, 91]
    assert [s.turns[0].max_tokens for s in sessions] == [44, 109, 1, 7]
    assert all(s.turns[0].prompt_len == len(s.turns[0].token_ids or ()) for s in sessions)
    # seconds instead of date-times, and the columns in any case
    plain = _write(tmp_path, "plain.csv", "timestamp,contexttokens,generatedtokens\n"
                   "10.5,5,6\n12,7,8\n")
    assert [r.at_s for r in traces.load(plain, 512).requests] == [0, 1.5]


def test_mooncake_hash_ids_become_shared_prompt_prefixes(tmp_path, tok):
    path = _write(tmp_path, "mooncake.jsonl", MOONCAKE)
    spec = WorkloadSpec(kind="trace", path=path, num_requests=4, block_tokens=64)
    ids = [s.turns[0].token_ids or () for s in
           workloads.build_sessions(spec, "unused", tokenizer=tok)]
    assert [len(i) for i in ids] == [100, 150, 90, 120]
    assert ids[1][:100] == ids[0]  # blocks 0 and 1: the whole first prompt
    assert ids[2][:64] == ids[0][:64] and ids[2][64:] != ids[0][64:90]  # block 0 only
    assert ids[3][:64] != ids[0][:64]  # no hash ids: a prompt of its own
    assert not set(ids[0]) & set(tok.specials)
    # Another step (offset) brings other tokens for the same blocks: a capacity step is
    # not flattered by the previous step's prefix cache.
    other = workloads.build_sessions(spec, "unused", tokenizer=tok, offset=7919)
    again = workloads.build_sessions(spec, "unused", tokenizer=tok)
    assert other[0].turns[0].token_ids != ids[0]
    assert [s.turns[0].token_ids for s in again] == ids  # seeded
    # ms timestamps, recorded order kept for equal times
    assert [s.at for s in again] == [0, 1.5, 1.5, 4.0]


def test_a_step_replays_stretches_that_keep_the_recorded_pace():
    trace = traces.of(WorkloadSpec(kind="trace", dataset="day"))
    assert trace.block_tokens == 64
    for n in (24, 100, 400):
        picked = trace.sample(n)
        assert picked == trace.sample(n)  # the same requests for every step of a search
        span = n / trace.mean_rate
        assert picked[-1][0] <= span
        assert [at for at, _ in picked] == sorted(at for at, _ in picked)
        # within a third of the mean rate: the lulls are kept along with the bursts
        assert 0.67 < len(picked) / n < 1.33, (n, len(picked))
    # Stretches from every part of the day: the night's as well as the afternoon's.
    hours = {int(r.at_s / trace.duration_s * 4) for _, r in trace.sample(100)}
    assert hours == {0, 1, 2, 3}
    # More than the trace holds: the whole trace again, after one mean gap.
    whole = trace.sample(len(trace.requests) + 3)
    assert [r for _, r in whole[-3:]] == list(trace.requests[:3])
    assert whole[len(trace.requests)][0] == pytest.approx(
        trace.duration_s + 1 / trace.mean_rate)


def test_a_replay_says_which_part_of_the_trace_it_sent(tmp_path):
    """A 360-request trace replayed for 100 requests sends stretches of it, and more or
    fewer than 100 requests: the run says how many, and what share of the recorded time."""
    path = azure.write(tmp_path / "azure.csv")  # 360 requests over 2m16s
    trace = traces.load(path, 512)
    part = trace.replay(100)
    assert part.requests == len(trace.sample(100)) != 100
    assert (part.trace_requests, part.stretches, part.trace_s) == (360, 4, 136.3)
    assert part.share == pytest.approx(100 / 360, abs=1e-4)  # 4 stretches of 9.5 s
    assert part.density == pytest.approx(part.requests / 100, rel=1e-3)
    assert part.text().startswith(f"replayed {part.requests} of 360 requests: 4 stretches, "
                                  "28 % of the trace's 2m16s")
    assert f"{part.density:.2f}x its mean rate" in part.text()
    assert part.short() == f"{part.requests}/360 (28 %)"
    whole = trace.replay(360)
    assert (whole.requests, whole.stretches, whole.share) == (360, 0, 1.0)
    assert whole.text() == "replayed all 360 requests: the whole trace's 2m16s"
    again = trace.replay(2340)  # a 20-s step at 117 req/s: the trace six and a half times
    assert (again.requests, again.stretches) == (2340, 0)
    assert 6 < again.share < 6.6 and again.text().startswith(
        "replayed 2340 requests: the whole trace of 360, ")
    # as the summary and a step's record keep it, and as an older record without it reads
    assert traces.Replay.from_dict(json_data(part)) == part
    assert traces.Replay.from_dict({"requests": 93}).text().startswith("replayed 93 ")
    spec = WorkloadSpec(kind="trace", path=str(path), num_requests=100)
    assert workloads.replayed(spec) == part and workloads.replayed(WorkloadSpec()) is None


def test_the_shipped_trace_is_bursty_daily_and_shares_prefixes():
    trace = traces.of(WorkloadSpec(kind="trace", dataset="day"))
    at = np.array([r.at_s for r in trace.requests])
    gaps = np.diff(at)
    assert gaps.std() / gaps.mean() > 1.5  # Poisson: 1
    hourly = np.histogram(at, bins=24)[0]
    assert hourly[12:18].mean() > 3 * hourly[:6].mean()  # afternoon against night
    first = Counter(r.blocks[0] for r in trace.requests)
    assert len(first) < len(trace.requests) / 10  # a few system prompts start most prompts
    assert all(r.input_tokens + r.output_tokens < 4096 for r in trace.requests)


@pytest.mark.parametrize("name, text, message", [
    ("t.csv", "time,in,out\n1,2,3\n", "needs the columns TIMESTAMP, ContextTokens, "
     "GeneratedTokens (missing: TIMESTAMP, ContextTokens, GeneratedTokens; found: time, in, "
     "out)"),
    ("t.csv", AZURE.replace("2023-11-16 18:15:50.9951690", "yesterday"),
     ":3: TIMESTAMP 'yesterday' is neither seconds nor an ISO date-time"),
    ("t.csv", AZURE.replace(",396,", ",-4,"), ":3: ContextTokens must be a whole number of "
     "tokens >= 1 (got '-4')"),
    ("t.csv", AZURE.replace(",109", ",1.5"), ":3: GeneratedTokens must be a whole number of "
     "tokens >= 0"),
    ("t.jsonl", MOONCAKE + "{oops\n", ":5: not JSON"),
    ("t.jsonl", MOONCAKE + '{"timestamp": 9}\n', ":5: needs the keys timestamp, input_length, "
     "output_length (missing: input_length, output_length)"),
    ("t.jsonl", MOONCAKE + '[1, 2]\n', ":5: a trace line is a JSON object"),
    ("t.jsonl", MOONCAKE.replace('"timestamp": 4000', '"timestamp": "soon"'),
     ":4: timestamp must be a number of milliseconds (got 'soon')"),
    ("t.jsonl", MOONCAKE.replace("[0, 3]", "[0, -3]"),
     ":3: hash_ids must be a list of whole numbers >= 0"),
    ("t.jsonl", _mooncake([{"timestamp": 0, "input_length": 5, "output_length": 5}]),
     "a trace needs at least two requests (found 1)"),
    ("t.jsonl", _mooncake([{"timestamp": 7, "input_length": 5, "output_length": 5}] * 3),
     "every request has the same timestamp"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "at least two requests (found 0)"),
])
def test_a_bad_trace_is_one_line_naming_the_file_and_line(tmp_path, name, text, message):
    path = _write(tmp_path, name, text)
    with pytest.raises(ConfigError) as err:
        traces.load(path, 512)
    assert str(err.value).startswith(path) and message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_bad_trace_stops_bench_and_a_scenario_before_any_engine(tmp_path):
    bad = _write(tmp_path, "bad.csv", AZURE.replace("374", "many"))
    proc = subprocess.run([sys.executable, "-m", "autotune", "bench", "--url",
                           "http://127.0.0.1:9", "--workload", "trace", "--path", bad],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"autotune: error: bench: --path: {bad}:2: ContextTokens "
                                   "must be a whole number of tokens >= 1 (got 'many')")
    binary = tmp_path / "trace.bin"
    binary.write_bytes(b"\x00\xff\xfe")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"model: {{tiny: tiny}}\nworkload: {{kind: trace, path: {binary}}}\n"
                        "objective: {slos: {e2el_p95_ms: 900}}\n")
    with pytest.raises(ConfigError, match=rf"s.yaml: workload.path: {binary}: not a text file"):
        config.load(scenario)


@pytest.mark.parametrize("fields, message", [
    ({"kind": "trace"}, "needs exactly one of `path`"),
    ({"kind": "trace", "dataset": "day", "path": "x.csv"}, "needs exactly one of `path`"),
    ({"kind": "trace", "dataset": "chat"}, "allowed: day"),
    ({"kind": "trace", "dataset": "day", "api": "chat"}, "allowed: api: completions"),
    ({"kind": "random", "dataset": "day"}, r"or 'trace' \(day\)"),
    ({"kind": "trace", "dataset": "day", "time_scale": 0}, "greater than 0"),
])
def test_a_trace_workload_is_named_once(fields, message):
    with pytest.raises(ValidationError, match=message):
        WorkloadSpec(**fields)
    day = WorkloadSpec(kind="trace", dataset="day")
    assert (day.block_tokens, day.api, day.time_scale) == (64, "completions", 1.0)
    assert WorkloadSpec(kind="trace", path="x.jsonl").block_tokens == 512  # Mooncake's


def test_a_trace_burst_and_its_warm_up_are_sent_at_once(tok):
    spec = WorkloadSpec(kind="trace", dataset="day", num_requests=6, warmup_requests=3,
                        time_scale=math.inf)
    from autotune.measure import bench

    measured, warmup = bench.prepare(spec, "unused", tokenizer=tok)
    assert [s.at for s in measured] == [0.0] * len(measured)
    paced, warm = bench.prepare(spec.model_copy(update={"time_scale": 1.0}), "unused",
                                tokenizer=tok)
    assert max(s.at or 0 for s in paced) > 0 and {s.at for s in warm} == {0.0}
    assert workloads.pace(spec) == pytest.approx(traces.of(spec).mean_rate)
    assert workloads.pace(WorkloadSpec()) is None


def test_a_trace_step_for_vllms_timed_trace_dataset(tmp_path):
    from autotune.measure import vllmbench

    path = _write(tmp_path, "mooncake.jsonl", MOONCAKE)
    spec = WorkloadSpec(kind="trace", path=path, block_tokens=64)
    first, second = tmp_path / "0.jsonl", tmp_path / "1.jsonl"
    assert vllmbench.write_trace(spec, 10, 2.0, 0, first) == 10  # the trace twice over
    assert vllmbench.write_trace(spec, 10, math.inf, 1, second) == 10
    rows = [json.loads(line) for line in first.read_text().splitlines()]
    assert [r["timestamp"] for r in rows[:4]] == [0, 750, 750, 2000]  # ms, twice as fast
    assert rows[0]["hash_ids"] == [0, 1] and rows[2]["hash_ids"] == [0, 3]
    assert [r["output_length"] for r in rows[:4]] == [10, 20, 5, 8]
    burst = [json.loads(line) for line in second.read_text().splitlines()]
    assert {r["timestamp"] for r in burst} == {0}
    # the next step's blocks are other ids: its prefixes are not in the cache already
    assert not {b for r in burst for b in r["hash_ids"]} & {b for r in rows
                                                          for b in r["hash_ids"]}
    argv = vllmbench.step_args(spec, vllmbench.Endpoint("http://h:1", "m", "m"),
                               vllmbench.Invocation(None, 10, 0, trace_file=first))
    at = argv.index("--dataset-name")
    assert argv[at:at + 8] == ["--dataset-name", "timed_trace", "--dataset-path", str(first),
                               "--timed-trace-chunk-hash-size", "64",
                               "--timed-trace-sec-multiplier", "0.001"]
    assert "--backend" in argv and argv[argv.index("--backend") + 1] == "openai"
    assert "timed_trace" in (vllmbench.dataset_args(spec)[1] or "")


def test_a_traces_longest_request_sizes_max_model_len():
    from autotune.tuning import starter
    from autotune.tuning.policy import prune

    day = WorkloadSpec(kind="trace", dataset="day")
    trace = traces.of(day)
    longest = max(r.input_tokens + max(1, r.output_tokens) for r in trace.requests)
    assert prune.longest_request(day) == longest
    assert "longest request" in (prune.too_short({"max-model-len": longest - 1}, day) or "")
    assert prune.too_short({"max-model-len": longest}, day) is None
    # `init --workload trace` fixes max-model-len to hold it
    from autotune.engine.info import engine_info

    start = starter.build(starter.Asked("/models/tiny", {"e2el_p95_ms": 2500}, "trace"),
                          card=starter.Card("cpu", None, 2), engine=engine_info(), shape=None)
    assert start.scenario.engine.flags["max-model-len"] >= longest
