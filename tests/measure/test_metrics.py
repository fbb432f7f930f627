"""Unit tests for autotune.measure.metrics: hand-computed examples, and a cross-check against
vLLM's own `calculate_metrics` so the summaries keep `vllm bench serve`'s exact definitions."""

from __future__ import annotations

import math
import random
import warnings

import pytest

from autotune.measure import metrics
from autotune.measure.metrics import RequestResult, goodput_slos, percentile_key


def summarize(*args, **kwargs):
    """The summary as it is stored: vLLM's flat keys, in vLLM's order."""
    return metrics.summarize(*args, **kwargs).as_dict()

# Three successful requests (times in seconds) and two failed ones, over a 2 s run.
#   A: start 0.0, ttft 0.1, gaps [0.02, 0.04] (3 events), e2el 0.16, 3 tokens, prompt 10
#      TPOT = (0.16 - 0.1) / (3 - 1) = 0.03
#   B: start 0.5, ttft 0.3, gaps [0.01, 0.03, 0.05, 0.07] (5 events), e2el 0.46, 5 tokens, prompt 20
#      TPOT = (0.46 - 0.3) / (5 - 1) = 0.04
#   C: start 1.0, ttft 0.2, no gaps (1 event), e2el 0.2, 1 token, prompt 30 -> no TPOT
#   D, E: failed, with timings from a stream that broke mid-way (must be ignored).
A = RequestResult(True, 10, 3, ttft=0.1, itl=[0.02, 0.04], latency=0.16, start_time=0.0)
B = RequestResult(True, 20, 5, ttft=0.3, itl=[0.01, 0.03, 0.05, 0.07], latency=0.46, start_time=0.5)
C = RequestResult(True, 30, 1, ttft=0.2, itl=[], latency=0.2, start_time=1.0)
D = RequestResult(False, 40, 7, ttft=9.0, itl=[9.0], latency=99.0, error="Bad Request")
E = RequestResult(False, 50, 0, start_time=0.2, error="Bad Request")
F = RequestResult(False, 60, 0, start_time=0.3, error="Internal Server Error")
MIXED = [A, B, C, D, E, F]
DURATION = 2.0


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-9, abs=1e-12)


def test_counts_tokens_and_throughputs():
    s = summarize(MIXED, DURATION)
    assert s["duration"] == 2.0
    assert s["completed"] == 3
    assert s["failed"] == 3
    assert s["total_input_tokens"] == 10 + 20 + 30  # failed prompts are not counted
    assert s["total_output_tokens"] == 3 + 5 + 1
    assert s["request_throughput"] == approx(3 / 2.0)  # 1.5 req/s
    assert s["output_throughput"] == approx(9 / 2.0)  # 4.5 tok/s
    assert s["total_token_throughput"] == approx((60 + 9) / 2.0)  # 34.5 tok/s
    assert s["error_counts"] == {"Bad Request": 2, "Internal Server Error": 1}
    assert s["success_rate"] == approx(3 / 6)


def test_ttft_stats():
    s = summarize(MIXED, DURATION)
    # TTFTs [0.1, 0.3, 0.2]: mean 0.2; deviations -0.1, 0.1, 0 -> population var 0.02 / 3.
    assert s["mean_ttft_ms"] == approx(200.0)
    assert s["median_ttft_ms"] == approx(200.0)
    assert s["std_ttft_ms"] == approx(math.sqrt(0.02 / 3) * 1000)  # 81.65 ms
    # Linear percentiles on sorted [0.1, 0.2, 0.3]: rank p/100 * (3 - 1).
    assert s["p50_ttft_ms"] == approx(200.0)  # rank 1
    assert s["p90_ttft_ms"] == approx(280.0)  # rank 1.8: 0.2 + 0.8 * 0.1
    assert s["p95_ttft_ms"] == approx(290.0)  # rank 1.9
    assert s["p99_ttft_ms"] == approx(298.0)  # rank 1.98


def test_tpot_excludes_one_token_outputs():
    s = summarize(MIXED, DURATION)
    # Only A (0.03) and B (0.04); C has 1 output token.
    assert s["mean_tpot_ms"] == approx(35.0)
    assert s["median_tpot_ms"] == approx(35.0)
    assert s["std_tpot_ms"] == approx(5.0)  # population std of [30, 40] ms
    assert s["p90_tpot_ms"] == approx(39.0)  # rank 0.9: 30 + 0.9 * 10
    assert s["p99_tpot_ms"] == approx(39.9)


def test_itl_pooled_over_requests():
    s = summarize(MIXED, DURATION)
    # A's 3 events give 2 gaps, B's 5 events give 4: pooled 10, 20, 30, 40, 50, 70 ms (sorted).
    assert s["mean_itl_ms"] == approx(220 / 6)  # 36.67 ms
    assert s["median_itl_ms"] == approx(35.0)  # (30 + 40) / 2
    # Deviations from 110/3, times 3: -80, -50, -20, 10, 40, 100 -> sum of squares 21000 / 9.
    assert s["std_itl_ms"] == approx(math.sqrt(21000 / 9 / 6))  # 19.72 ms
    assert s["p90_itl_ms"] == approx(60.0)  # rank 0.9 * 5 = 4.5: 50 + 0.5 * 20
    assert s["p50_itl_ms"] == approx(35.0)


def test_e2el_stats():
    s = summarize(MIXED, DURATION)
    # E2ELs [0.16, 0.46, 0.2] (failed D's 99 s ignored); sorted [0.16, 0.2, 0.46].
    assert s["mean_e2el_ms"] == approx(820 / 3)  # 273.33 ms
    assert s["median_e2el_ms"] == approx(200.0)
    mean = 820 / 3
    assert s["std_e2el_ms"] == approx(
        math.sqrt(((160 - mean) ** 2 + (460 - mean) ** 2 + (200 - mean) ** 2) / 3)
    )
    assert s["p90_e2el_ms"] == approx(408.0)  # rank 1.8: 200 + 0.8 * 260


def test_peak_tokens_and_concurrency():
    s = summarize(MIXED, DURATION)
    # Buckets of 1 s from the first send (0.0) to ceil(1.2) + 1 = 3 buckets.
    # Events: A at 0.1, 0.12, 0.16; B at 0.8, 0.81, 0.84, 0.89, 0.96; C at 1.2 -> [8, 1, 0].
    assert s["max_output_tokens_per_s"] == 8.0
    # Active seconds: A [0], B [0] (0.5..0.96), C [1] -> [2, 1, 0].
    assert s["max_concurrent_requests"] == 2


def test_key_names_match_vllm_save_result():
    s = summarize(MIXED, DURATION, percentiles=(50, 99.9))
    expected = [
        "duration",
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "request_goodput",
        "output_throughput",
        "total_token_throughput",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
    ]
    for metric in ("ttft", "tpot", "itl", "e2el"):
        expected += [f"mean_{metric}_ms", f"median_{metric}_ms", f"std_{metric}_ms"]
        expected += [f"p50_{metric}_ms", f"p99.9_{metric}_ms"]
    expected += ["error_counts", "success_rate", "slos", "good_completed"]
    assert list(s) == expected


def test_percentile_key():
    assert percentile_key("ttft", 99) == "p99_ttft_ms"
    assert percentile_key("ttft", 99.0) == "p99_ttft_ms"
    assert percentile_key("itl", 99.9) == "p99.9_itl_ms"
    assert percentile_key("e2el", 0.5) == "p0.5_e2el_ms"


def test_zero_output_tokens_counts_as_one():
    # vLLM without a tokenizer: a successful request with no usage count is 1 token, no TPOT.
    r = RequestResult(True, 5, 0, ttft=0.1, itl=[0.1], latency=0.2)
    s = summarize([r], 1.0)
    assert s["total_output_tokens"] == 1
    assert s["mean_tpot_ms"] == 0.0
    assert s["mean_itl_ms"] == approx(100.0)


def test_all_failed_gives_zeros_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = summarize([D, E, F], DURATION, slos={"ttft_ms": 100})
    assert (s["completed"], s["failed"]) == (0, 3)
    assert s["total_input_tokens"] == 0 and s["total_output_tokens"] == 0
    assert s["request_throughput"] == 0.0
    assert s["request_goodput"] == 0.0 and s["good_completed"] == 0
    assert s["max_output_tokens_per_s"] == 0.0 and s["max_concurrent_requests"] == 0
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for key in (f"mean_{metric}_ms", f"std_{metric}_ms", percentile_key(metric, 99)):
            assert s[key] == 0.0
    assert s["success_rate"] == 0.0


def test_no_requests():
    s = summarize([], 1.0)
    assert (s["completed"], s["failed"], s["success_rate"], s["error_counts"]) == (0, 0, 0.0, {})


@pytest.mark.parametrize("duration", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_duration_raises(duration):
    with pytest.raises(ValueError, match="duration_s"):
        summarize(MIXED, duration)


def test_no_slos_means_no_goodput():
    # vLLM writes "request_goodput": null when --goodput is not given.
    for slos in (None, {}):
        s = summarize(MIXED, DURATION, slos=slos)
        assert s["request_goodput"] is None
        assert s["good_completed"] is None
        assert s["slos"] == {}


def test_goodput_boundary_is_inclusive():
    # Good when slo_ms / 1000 >= value: B's TTFT is exactly 0.3 s = 300 ms.
    s = summarize(MIXED, DURATION, slos={"ttft_ms": 300})
    assert s["good_completed"] == 3
    assert s["request_goodput"] == approx(3 / 2.0)
    assert s["slos"] == {"ttft_ms": 300.0}
    s = summarize(MIXED, DURATION, slos={"ttft_ms": 299.999})
    assert s["good_completed"] == 2  # A (0.1) and C (0.2)
    assert s["request_goodput"] == approx(2 / 2.0)


def test_goodput_requires_every_slo():
    # ttft <= 250 ms: A, C. e2el <= 300 ms: A (160), C (200). B fails both.
    s = summarize(MIXED, DURATION, slos={"ttft_ms": 250, "e2el_ms": 300})
    assert s["good_completed"] == 2
    # ttft <= 350 ms: all three; e2el <= 180 ms: only A.
    s = summarize(MIXED, DURATION, slos={"ttft_ms": 350, "e2el_ms": 180})
    assert s["good_completed"] == 1
    assert s["request_goodput"] == approx(1 / 2.0)


def test_goodput_one_token_output_has_tpot_zero():
    # TPOTs: A 30 ms, B 40 ms, C (1 token) counted as 0 ms for goodput.
    s = summarize(MIXED, DURATION, slos={"tpot_ms": 35})
    assert s["good_completed"] == 2  # A and C
    s = summarize(MIXED, DURATION, slos={"tpot_ms": 1})
    assert s["good_completed"] == 1  # only C, whatever its latency
    assert s["request_goodput"] == approx(0.5)


def test_summarize_rejects_unknown_or_bad_slo():
    with pytest.raises(ValueError, match="ttft_ms, tpot_ms, e2el_ms"):
        summarize(MIXED, DURATION, slos={"ttft": 100})
    with pytest.raises(ValueError, match="positive"):
        summarize(MIXED, DURATION, slos={"e2el_ms": 0})


@pytest.mark.parametrize(
    "specs, expected",
    [
        (["ttft_ms=500"], {"ttft_ms": 500.0}),
        (["ttft:500"], {"ttft_ms": 500.0}),
        (["tpot_ms:50", "e2el=2000.5"], {"tpot_ms": 50.0, "e2el_ms": 2000.5}),
        ([" ttft_ms = 1e3 "], {"ttft_ms": 1000.0}),
        ([], {}),
    ],
)
def test_goodput_slos_accepts(specs, expected):
    assert goodput_slos(specs) == expected


@pytest.mark.parametrize(
    "spec, message",
    [
        ("ttft", "expected KEY=MILLISECONDS"),
        ("latency=5", "allowed: ttft_ms, tpot_ms, e2el_ms"),
        ("ttft_ms=fast", "not a number"),
        ("ttft_ms=", "not a number"),
        ("ttft_ms=0", "positive"),
        ("tpot:-5", "positive"),
        ("e2el_ms=nan", "positive"),
        ("e2el_ms=inf", "positive"),
    ],
)
def test_goodput_slos_rejects(spec, message):
    with pytest.raises(ValueError, match=message):
        goodput_slos([spec])


def test_goodput_slos_rejects_duplicates():
    with pytest.raises(ValueError, match="twice"):
        goodput_slos(["ttft_ms=1", "ttft:2"])


# --- Cross-check against vLLM's own calculate_metrics -----------------------------------------


@pytest.fixture(scope="module")
def vllm_bench():
    """vLLM's benchmark module (a pure import, no engine; takes ~15 s on CPU)."""
    return pytest.importorskip("vllm.benchmarks.serve", reason="vLLM is not installed")


def _synthetic(seed: int) -> list[RequestResult]:
    """A mix of failures, 1-token, 0-token and long outputs spread over several seconds."""
    rng = random.Random(seed)
    out = [A, B, C, D, E, F]
    for i in range(60):
        start = rng.uniform(0, 8)
        if rng.random() < 0.1:
            error = f"error {i % 3}"
            out.append(RequestResult(False, rng.randint(1, 99), 0, start_time=start, error=error))
            continue
        tokens = rng.choice([0, 1, 2, rng.randint(3, 40)])
        events = max(1, tokens - rng.randint(0, 2))  # a few events bundle several tokens
        ttft = rng.uniform(0.01, 0.8)
        itl = [rng.uniform(0.001, 0.1) for _ in range(events - 1)]
        latency = ttft + sum(itl)
        out.append(RequestResult(True, rng.randint(1, 500), tokens, ttft, itl, latency, start))
    return out


@pytest.mark.parametrize(
    "results, slos",
    [
        (_synthetic(1), None),
        (_synthetic(2), {"ttft_ms": 400, "tpot_ms": 50, "e2el_ms": 1500}),
        (_synthetic(3), {"tpot_ms": 20}),
        (MIXED, {"ttft_ms": 300}),  # exactly on the boundary for B
        ([D, E, F], {"e2el_ms": 100}),  # all failed
    ],
)
def test_matches_vllm_calculate_metrics(vllm_bench, results, slos):
    from vllm.benchmarks.datasets import SampleRequest
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput

    percentiles = [25, 50, 90, 99, 99.9]
    duration = 9.25
    outputs = [
        RequestFuncOutput(
            generated_text=r.generated_text,
            success=r.success,
            latency=r.latency,
            output_tokens=r.output_tokens,
            ttft=r.ttft,
            itl=list(r.itl),
            prompt_len=r.prompt_len,
            error=r.error,
            start_time=r.start_time,
        )
        for r in results
    ]
    inputs = [SampleRequest(prompt="x", prompt_len=r.prompt_len) for r in results]
    # vLLM's --goodput names are "ttft", "tpot", "e2el" (ms).
    goodput = {k.removesuffix("_ms"): v for k, v in (slos or {}).items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # vLLM warns when every request failed
        m, _ = vllm_bench.calculate_metrics(
            input_requests=inputs,
            outputs=outputs,
            dur_s=duration,
            tokenizer=None,
            selected_percentiles=percentiles,
            goodput_config_dict=goodput,
        )
    # The result dict as vllm/benchmarks/serve.py:benchmark() assembles it for --save-result.
    theirs = {
        "duration": duration,
        "completed": m.completed,
        "failed": m.failed,
        "total_input_tokens": m.total_input,
        "total_output_tokens": m.total_output,
        "request_throughput": m.request_throughput,
        "request_goodput": m.request_goodput if goodput else None,
        "output_throughput": m.output_throughput,
        "total_token_throughput": m.total_token_throughput,
        "max_output_tokens_per_s": m.max_output_tokens_per_s,
        "max_concurrent_requests": m.max_concurrent_requests,
    }
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std"):
            theirs[f"{stat}_{metric}_ms"] = getattr(m, f"{stat}_{metric}_ms")
        for p, value in getattr(m, f"percentiles_{metric}_ms"):
            p_word = str(int(p)) if int(p) == p else str(p)
            theirs[f"p{p_word}_{metric}_ms"] = value

    ours = summarize(results, duration, slos=slos, percentiles=percentiles)
    assert set(theirs) <= set(ours)
    for key, value in theirs.items():
        if value is None:
            assert ours[key] is None, key
        else:
            assert ours[key] == pytest.approx(float(value), rel=1e-9, abs=1e-12), key
