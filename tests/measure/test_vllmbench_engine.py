"""The `vllm bench serve` helper against a real CPU engine (the session's shared one): a
paced Poisson step and a burst through one process, a bad step answered without killing it, and
nothing left behind."""

from __future__ import annotations

import json

import psutil
import pytest

from autotune.measure import vllmbench
from autotune.traffic import WorkloadSpec

pytestmark = pytest.mark.engine


def test_helper_runs_steps_on_a_cpu_engine(eager_server, tiny_model, tmp_path,
                                           no_leftover_engine):
    model, srv = str(tiny_model), eager_server
    spec = WorkloadSpec(num_requests=12, input_len=32, output_len=16, max_concurrency=4)
    with vllmbench.Helper(tmp_path / "helper.log") as helper:
        proc = helper.proc
        assert helper.version and helper.start_s > 0
        results = []
        for rate, n in ((4.0, 12), (None, 12)):  # 3 s of Poisson arrivals, then a burst
            argv = vllmbench.step_args(spec, vllmbench.Endpoint(srv.url, model, model),
                                       vllmbench.Invocation(rate, n, 1, result_dir=tmp_path,
                                                            result_filename=f"{rate}.json"))
            results.append(helper.step(argv, api_key=srv.api_key, timeout_s=300))
        with pytest.raises(vllmbench.VllmBenchError, match="invalid choice"):
            helper.step(["--backend", "nope"])
        # the helper survives a bad step; a step without the key is refused by the server
        refused = helper.step(argv, api_key=None, timeout_s=300)
    key = srv.api_key
    for r in results:
        assert (r.completed, r.failed) == (12, 0)
        assert r.request_throughput > 0 and r.output_throughput > 0
        for k in ("p50_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "p95_tpot_ms", "p95_itl_ms",
                  "p95_e2el_ms"):
            assert r.latencies[k] > 0, k
        assert vllmbench.judge(r, {"ttft_p95_ms": 60000}) == []
    # vLLM's own keys, which the summary keeps as they came
    assert results[0].other["request_rate"] == 4.0 and results[1].other["request_rate"] == "inf"
    # The Poisson step was paced: vLLM's client scales its random gaps so that the last
    # request leaves num_prompts / rate after the first is due (12 / 4 = 3 s), a lower bound
    # that a busy host can only lengthen. (Burst against Poisson throughput is no test on a
    # host shared with the other worker's engines: a burst once took 3.5 s there.)
    assert results[0].duration >= 12 / 4.0 * 0.99, results[0].duration
    assert refused.completed == 0 and vllmbench.judge(refused, {"ttft_p95_ms": 1e9})
    saved = json.loads((tmp_path / "4.0.json").read_text())
    assert saved["num_prompts"] == 12 and saved["completed"] == 12
    # it exited by itself when its stdin closed, and the key never reached its log
    assert proc.returncode == 0 and not psutil.pid_exists(proc.pid)
    assert key not in (tmp_path / "helper.log").read_text()
