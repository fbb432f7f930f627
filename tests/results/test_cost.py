"""Money and machines: capacity at SLO, replicas for a load and cost per
million output tokens, checked against the recorded capacity steps of committed studies;
`compare` ranks committed studies of one model; bad options are one line."""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import stat
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.cli.main import main
from autotune.config import Scenario
from autotune.errors import ConfigError
from autotune.measure.capacityrecord import CapacityRecord
from autotune.measure.measurement import Measurement
from autotune.measure.steprecord import StepRecord
from autotune.results import cost, show
from autotune.results.report import page as report_page
from autotune.tuning import ranking
from autotune.tuning.records.trialrecord import TrialRecord
from tests import trials
from tests.cli.test_cli_errors import assert_one_line_error, autotune
from tests.paths import ROOT

STUDIES = ROOT / "studies"
PRICE = 3.5  # per GPU-hour
LOAD = 100.0  # req/s


def copy(tmp_path: Path, name: str) -> Path:
    """A read-only copy of a committed study: nothing the test runs can write to it."""
    path = tmp_path / f"{name}.db"
    shutil.copy(STUDIES / f"{name}.db", path)
    path.chmod(stat.S_IRUSR | stat.S_IRGRP)
    return path


def from_steps(rec: TrialRecord) -> tuple[float, float]:
    """(capacity, output tok/s there) worked out from the recorded steps alone: the highest
    offered rate whose every sustained step passed (a repeat that failed disqualifies its
    rate), and that rate times the output tokens per request of the step that passed there
    (the step's output tok/s over its completed req/s)."""
    cap = rec.capacity
    assert cap is not None
    sustained = [s for s in cap.steps if s.rate is not None]
    rates = {s.rate for s in sustained if all(t.passed for t in sustained if t.rate == s.rate)}
    rate = max(r for r in rates if r is not None)
    step = next(s for s in sustained if s.rate == rate and s.kind != "repeat")
    return rate, rate * step.output_throughput / step.achieved_rps


def numbers(text: str, label: str) -> list[float]:
    """The figures on the table row that starts with `label`."""
    line = next(ln for ln in text.splitlines() if label in ln)
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*",
                                                          line.split(label, 1)[1])]


@pytest.mark.parametrize("name", ["qwen3-4b-h200", "qwen3-4b-24g"])
def test_show_load_matches_the_recorded_steps(tmp_path, capsys, monkeypatch, name):
    db = copy(tmp_path, name)
    st = show.open_existing(str(db))
    winner, reference = ranking.feasible_best(st), ranking.reference_trial(st)
    assert winner is not None and reference is not None
    expected = []
    for rec in (winner, reference):
        rate, out_tps = from_steps(rec)
        expected.append({"number": rec.number, "capacity_rps": rate, "output_tps": out_tps,
                         "replicas": math.ceil(LOAD / rate),
                         "per_million": PRICE / (out_tps * 3600) * 1e6})
    args = ["show", str(db), "--load", "100", "--gpu-hour", "3.5"]

    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["cost"]
    for side, want in zip(("winner", "reference"), expected, strict=True):
        got = data[side]
        assert got["number"] == want["number"] and got["gpus"] == 1
        assert got["capacity_rps"] == pytest.approx(want["capacity_rps"], rel=1e-9)
        assert got["output_tps"] == pytest.approx(want["output_tps"], rel=0.005)
        assert got["replicas"] == want["replicas"]
        assert got["replica_hour"] == pytest.approx(PRICE)
        assert got["load_hour"] == pytest.approx(PRICE * want["replicas"])
        assert got["per_million"] == pytest.approx(want["per_million"], rel=0.005)

    monkeypatch.setenv("COLUMNS", "200")  # one table row a line
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "money and machines at 100 req/s; 3.5 USD per GPU-hour (--gpu-hour)" in text
    rows = {"capacity at SLO req/s": "capacity_rps", "output tok/s at it": "output_tps",
            "replicas for 100 req/s": "replicas", "cost per M output tokens": "per_million"}
    for label, key in rows.items():
        printed = numbers(text, label)
        assert printed == pytest.approx([w[key] for w in expected], rel=0.01), label
    saving = 1 - expected[0]["per_million"] / expected[1]["per_million"]
    printed = re.search(r"([-\d.]+)% of the cost per million output tokens", text)
    assert printed and float(printed[1]) == pytest.approx(100 * saving, abs=0.15)


def test_the_h200_winner_needs_fewer_replicas_at_500(tmp_path, capsys):
    """The arithmetic at the issue's 500 req/s, where the winner saves whole replicas."""
    db = copy(tmp_path, "qwen3-4b-h200")
    assert main(["show", str(db), "--load", "500", "--gpu-hour", "3.5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["cost"]
    w, d = data["winner"], data["reference"]
    assert (w["replicas"], d["replicas"]) == (math.ceil(500 / w["capacity_rps"]),
                                              math.ceil(500 / d["capacity_rps"]))
    assert data["replicas_saved"] == d["replicas"] - w["replicas"] > 0
    assert data["hour_saved"] == pytest.approx(PRICE * data["replicas_saved"])
    # `json_data` writes the computed figures after the fields, in the order `--json` always had
    assert list(data) == ["price", "load", "winner", "reference", "reference_name",
                          "replicas_saved", "hour_saved", "per_million_saved", "rows", "saving"]
    assert data["rows"][0] == ["trial", f"#{w['number']} on {w['device']}",
                               f"#{d['number']} on {d['device']}"]
    assert data["saving"].startswith("saving over ")


def test_show_without_load_prices_each_ranked_trial(tmp_path, capsys, monkeypatch):
    db = copy(tmp_path, "qwen3-4b-h200")
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["show", str(db)]) == 0
    assert "USD/M tok" not in capsys.readouterr().out  # no price, no column
    assert main(["show", str(db), "--gpu-hour", "3.5", "--gpus", "2"]) == 0
    out = capsys.readouterr().out
    assert "USD/M tok" in out and "money and machines" not in out
    assert main(["show", str(db), "--gpu-hour", "3.5", "--gpus", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "cost" not in data and data["price"]["gpus"] == 2
    for row in data["ranking"]:
        assert row["per_million"] == pytest.approx(
            2 * PRICE / (row["output_throughput"] * 3600) * 1e6)


def test_compare_ranks_two_committed_studies(tmp_path, capsys, monkeypatch):
    """The 24 GiB card and the H200 ran the same model, workload shape and SLOs."""
    small, big = copy(tmp_path, "qwen3-4b-24g"), copy(tmp_path, "qwen3-4b-h200-long")
    assert main(["compare", str(small), str(big), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["priced"] == [] and data["slos"] == {"ttft_p95_ms": 2000.0,
                                                      "tpot_p95_ms": 50.0}
    # No price: by capacity per GPU, the H200 first.
    assert [e["study"] for e in data["unpriced"]] == ["qwen3-4b-h200-long", "qwen3-4b-24g"]
    for e in data["unpriced"]:
        st = show.open_existing(str(small if e["study"] == "qwen3-4b-24g" else big))
        best = ranking.feasible_best(st)
        assert best is not None and e["winner"]["number"] == best.number
        assert e["capacity_rps_per_gpu"] == pytest.approx(from_steps(best)[0])
        assert list(e) == ["study", "device", "price", "winner", "capacity_rps_per_gpu",
                           "missing"]
    assert data["unpriced"][1]["device"] == "NVIDIA H200 as a 24-GiB card"

    monkeypatch.setenv("COLUMNS", "200")
    assert main(["compare", str(small), str(big), "--load", "10", "--gpu-hour",
                 "qwen3-4b-24g=1.2", "--gpu-hour", "qwen3-4b-h200-long=3.5"]) == 0
    out = capsys.readouterr().out
    # Priced: the cheaper card's lower capacity still costs less per token.
    first, second = (out.index(n) for n in ("qwen3-4b-24g  ", "qwen3-4b-h200-long"))
    assert first < second
    assert "no price" not in out
    assert main(["compare", str(small), str(big), "--load", "10", "--json", "--gpu-hour",
                 "qwen3-4b-24g=1.2", "--gpu-hour", "qwen3-4b-h200-long=3.5"]) == 0
    priced = json.loads(capsys.readouterr().out)["priced"]
    for e, price in zip(priced, (1.2, 3.5), strict=True):
        w = e["winner"]
        assert w["per_million"] == pytest.approx(price / (w["output_tps"] * 3600) * 1e6)
        assert w["replicas"] == math.ceil(10 / w["capacity_rps"])
        assert w["load_hour"] == pytest.approx(price * w["replicas"])


def test_compare_refuses_other_slos_and_other_models(tmp_path):
    h200, small = copy(tmp_path, "qwen3-4b-h200"), copy(tmp_path, "qwen3-4b-24g")
    smol = copy(tmp_path, "smollm2-h200-chat")
    proc, _ = autotune("compare", str(small), str(h200), cwd=tmp_path)
    assert_one_line_error(proc, "the SLOs differ", "qwen3-4b-24g (TTFT p95 ≤ 2000 ms",
                          "qwen3-4b-h200 (TTFT p95 ≤ 500 ms")
    proc, _ = autotune("compare", str(small), str(smol), cwd=tmp_path)
    assert_one_line_error(proc, "qwen3-4b-24g tuned random weights in Qwen3-4B",
                          "smollm2-h200-chat tuned", "--any-model")
    proc, _ = autotune("compare", str(small), str(smol), "--any-model", cwd=tmp_path)
    assert_one_line_error(proc, "the SLOs differ")


@pytest.mark.parametrize("args, words", [
    (["show", "S", "--load", "0"], "argument --load: must be a number above 0"),
    (["show", "S", "--gpu-hour", "x"], "argument --gpu-hour: 'x' is not a number"),
    (["report", "S", "--load", "-5"], "argument --load"),
    (["export", "S", "--load", "nan"], "argument --load"),
    (["show", "S", "--gpus", "0"], "argument --gpus: must be at least 1"),
    (["compare", "S", "S", "--gpu-hour", "x"], "'x' is not NAME=PRICE"),
    (["compare", "S", "S", "--gpu-hour", "s=0"], "'s=0' is not NAME=PRICE"),
], ids=["show-load", "show-price", "report-load", "export-load", "show-gpus",
        "compare-price", "compare-zero"])
def test_bad_options_are_one_line(tmp_path, args, words):
    db = copy(tmp_path, "qwen3-4b-24g")
    proc, _ = autotune(*[str(db) if a == "S" else a for a in args], cwd=tmp_path)
    assert_one_line_error(proc, words)


def test_load_and_price_checked_in_the_library():
    with pytest.raises(ConfigError, match="above 0 req/s"):
        cost.replicas(0, 10.0)
    with pytest.raises(ConfigError, match="no capacity at SLO"):
        cost.replicas(10, 0.0)
    with pytest.raises(ConfigError, match="above 0"):
        cost.price_of(None, gpu_hour=-1.0)
    assert cost.replicas(100, 100 / 3) == 3  # not 4 by a float's last bit
    assert cost.replicas(100, 50.0) == 2 and cost.replicas(101, 50.0) == 3


def _capacity(low: float | None, high: float | None, out_per_request: float = 100.0) -> dict:
    steps = [StepRecord(0, "burst", None, False, 12.0, 1200.0)]
    if low:
        steps.append(StepRecord(1, "bisect", low, True, low * 0.9, low * 0.9 * out_per_request))
    return CapacityRecord(request_throughput=low or 0.0,
                          output_throughput=(low or 0.0) * out_per_request, low=low, high=high,
                          steps=tuple(steps)).as_dict()


def _trial(st: optuna.Study, flags: dict, capacity: dict | None, **fields) -> TrialRecord:
    value = capacity["low"] or 0.0 if capacity else 1.0
    return trials.add(st, values=[value], constraints={"slo": -1.0}, flags=flags,
                      measures={"throughput": 1.0, "latency_ms": 1.0, "memory_mib": 1.0},
                      metrics=Measurement.of({"capacity": capacity} if capacity
                                             else {"completed": 4}),
                      **fields)


def _priced(gpu_hour: float, currency: str) -> Scenario:
    """A scenario as a study stores it, with its price."""
    return Scenario.model_validate({"model": {"tiny": "tiny"},
                                    "cost": {"gpu_hour": gpu_hour, "currency": currency}})


def test_gpus_price_and_trials_that_cannot_serve():
    st = optuna.create_study(direction="maximize")
    tp = _trial(st, {"tensor-parallel-size": 2, "pipeline-parallel-size": 2}, _capacity(8, 9),
                device={"name": "NVIDIA L4"})
    on_cpu = _trial(st, {}, _capacity(2, None), engine_version="vllm-cpu-0.11.0")
    fixed = _trial(st, {}, None)
    none_met = _trial(st, {}, _capacity(None, 0.5))
    stored = cost.price_of(_priced(0.8, "EUR"))
    assert (stored.gpu_hour, stored.currency, stored.source) == (0.8, "EUR",
                                                                 "the scenario's cost")
    c = cost.trial_cost(tp, stored, load=20)
    assert (c.gpus, c.replicas, c.device) == (4, 3, "NVIDIA L4")
    assert c.replica_hour == pytest.approx(3.2) and c.load_hour == pytest.approx(9.6)
    assert c.per_million == pytest.approx(3.2 / (800 * 3600) * 1e6)
    # --gpu-hour and --gpus win over the scenario's; the currency stays the scenario's.
    over = cost.trial_cost(tp, cost.price_of(_priced(0.8, "EUR"), gpu_hour=2.0, gpus=1))
    assert (over.gpus, over.replica_hour, over.currency) == (1, 2.0, "EUR")
    # vLLM's CPU build holds no GPU: one machine a replica, at the price of its hour;
    # every rate passed: a floor.
    cpu = cost.trial_cost(on_cpu, cost.price_of(None, gpu_hour=1.0), load=5)
    assert (cpu.device, cpu.gpus, cpu.replicas, cpu.floor) == ("cpu", 0, 3, True)
    assert (cpu.replica_hour, cpu.load_hour) == (1.0, 3.0)
    # No price: replicas still, and the missing price said.
    bare = cost.trial_cost(tp, cost.price_of(None), load=20)
    assert bare.replicas == 3 and bare.per_million is None and bare.missing == cost.NO_PRICE
    # No capacity, or no rate met the SLOs: said, never divided by.
    for rec, why in ((fixed, "no capacity search"), (none_met, "no rate met the SLOs")):
        c = cost.trial_cost(rec, stored, load=20)
        assert c.capacity_rps is None and c.replicas is None and why in c.missing
        assert why in c.line()


def _priced_study(path: Path, name: str, currency: str, baseline: str) -> optuna.Study:
    st = optuna.create_study(study_name=name, direction="maximize",
                             storage=f"sqlite:///{path}")
    st.set_user_attr("scenario", {"model": {"tiny": "tiny"}, "engine": {"flags": {}}, "objective": {
        "slos": {"ttft_p95_ms": 500.0}}, "cost": {"gpu_hour": 2.0, "currency": currency}})
    _trial(st, {}, _capacity(4, 5), baseline=baseline, gain=0.0, device={"name": "GPU"})
    _trial(st, {"max-num-seqs": 64}, _capacity(6, 7), gain=0.5, device={"name": "GPU"})
    return st


def test_a_hostile_currency_and_names_are_escaped_in_the_report(tmp_path, capsys,
                                                                monkeypatch):
    evil = "<b>€</b>"
    st = _priced_study(tmp_path / "x.db", "<script>s</script>", evil, "<i>base</i>")
    page = report_page.build(st, load=10.0)
    for text in (evil, "<i>base</i>", "<script>s</script>"):
        assert text not in page
    assert f"{html.escape(evil)} per M output tokens" in page  # the trials table's column
    section = page.split("Money and machines at 10 req/s", 1)[1].split("</section>", 1)[0]
    assert html.escape(evil) in section and "replicas for 10 req/s" in section
    # The stored price is used when the command line gives none; no [markup] in the terminal.
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["show", str(tmp_path / "x.db"), "--load", "10"]) == 0
    out = capsys.readouterr().out
    assert f"2 {evil} per GPU-hour (the scenario's cost)" in out
    assert f"4.00 {evil}" in out and f"{evil}/M tok" in out


def test_export_sizes_the_autoscaler_for_a_load(tmp_path, capsys):
    db = copy(tmp_path, "qwen3-4b-h200")
    st = show.open_existing(str(db))
    rec = ranking.choose(st)
    want = math.ceil(500 / from_steps(rec)[0])
    base = ["export", str(db), "--trial", str(rec.number)]

    def hpa(*extra: str) -> int:
        assert main([*base, "--format", "k8s", *extra]) == 0
        docs = list(yaml.safe_load_all(capsys.readouterr().out))
        return next(d for d in docs if d["kind"] == "HorizontalPodAutoscaler")["spec"][
            "maxReplicas"]

    assert hpa() == 4  # no load: the old default
    assert hpa("--load", "500") == want
    assert hpa("--load", "500", "--max-replicas", "3") == 3  # an explicit one wins
    assert main([*base, "--format", "cli", "--load", "500"]) == 0
    line = f"# money and machines: {want} replicas of 1 GPU, each serving at most its " \
        f"capacity at SLO ({from_steps(rec)[0]:.3g} req/s) for 500 req/s"
    assert f"{line}; {cost.NO_PRICE}\n" in capsys.readouterr().out
    assert main([*base, "--format", "cli", "--load", "500", "--gpu-hour", "3.5"]) == 0
    assert f"{line}; {cost.money(cost.per_million(3.5, from_steps(rec)[1]), 'USD')} per " \
        f"million output tokens, {cost.money(3.5 * want, 'USD')} an hour at that load" \
        in capsys.readouterr().out
    assert main([*base, "--format", "json", "--load", "500"]) == 0
    assert json.loads(capsys.readouterr().out)["sizing"]["replicas"] == want


def test_no_winner_is_said_not_sized(tmp_path, capsys):
    path = tmp_path / "none.db"
    st = optuna.create_study(study_name="none", direction="maximize",
                             storage=f"sqlite:///{path}")
    st.set_user_attr("scenario", {"model": {"tiny": "tiny"}, "engine": {"flags": {}}})
    trials.add(st, values=[0.0], constraints={"slo": 1.0}, flags={},
               metrics=Measurement.of({"capacity": _capacity(None, 0.5)}))  # nothing met the SLOs
    assert main(["show", str(path), "--load", "10", "--gpu-hour", "1"]) == 0
    assert "money and machines: no single winner to size" in capsys.readouterr().out
    assert "No single winner to size" in report_page.build(st, load=10.0)


def test_a_cpu_replica_holds_a_machine_not_a_gpu():
    """vLLM's CPU build is priced as one machine so that it has a cost; it holds no GPU."""
    cpu = cost.TrialCost(0, "cpu", 0, 5.0, 500.0, False, "USD", None, None)
    gpu = cost.TrialCost(1, "NVIDIA H200", 2, 5.0, 500.0, False, "USD", None, None)
    assert (cpu.holds, gpu.holds) == ("one CPU machine", "2 GPUs")
    assert "replicas of one CPU machine" in cpu.line()


def _cpu_study(path: Path, name: str = "tiny-cpu") -> optuna.Study:
    """A priced study measured on vLLM's CPU build: its defaults and a winner."""
    st = optuna.create_study(study_name=name, direction="maximize",
                             storage=f"sqlite:///{path}")
    st.set_user_attr("scenario", {"model": {"tiny": "tiny"}, "engine": {"flags": {}},
                                  "objective": {"slos": {"e2el_p95_ms": 2500.0}}})
    for flags, capacity, baseline in (({}, _capacity(4, 5), "vllm-defaults"),
                                      ({"max-num-seqs": 64}, _capacity(8, 9), None)):
        _trial(st, flags, capacity, baseline=baseline, gain=0.0, device={"name": "cpu"},
               engine_version="vllm-cpu-0.32.0")
    return st


def test_a_cpu_study_is_priced_by_the_machine_hour_everywhere(tmp_path, capsys,
                                                               monkeypatch):
    """`--gpu-hour` on a study of vLLM's CPU build is the price of one hour of the
    machine: `show`, the report and the JSON export say so, with 0 GPUs, not 1."""
    st = _cpu_study(tmp_path / "cpu.db")
    assert cost.Price(2.5, source="--gpu-hour").text(cpu=True) == \
        "2.5 USD per hour of one CPU machine (--gpu-hour)"
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["show", str(tmp_path / "cpu.db"), "--load", "20", "--gpu-hour", "2.5"]) == 0
    out = capsys.readouterr().out
    assert "2.5 USD per hour of one CPU machine (--gpu-hour)" in out
    assert "GPU-hour" not in out.split("money and machines", 1)[1]
    assert "one CPU machine" in out and "GPU(s)" not in out
    # 8 req/s x 100 tokens a request, one machine at 2.5 an hour
    assert f"{cost.per_million(2.5, 800):#.3g} USD per million output tokens" in out
    page = report_page.build(st, load=20.0, gpu_hour=2.5)
    assert "Price: 2.5 USD per hour of one CPU machine (--gpu-hour)" in page
    assert "per GPU-hour" not in page.split("Money and machines", 1)[1]
    target = tmp_path / "plan.json"
    assert main(["export", str(tmp_path / "cpu.db"), "--format", "json", "--gpu-hour", "2.5",
                 "--load", "20", "-o", str(target)]) == 0
    data = json.loads(target.read_text())
    assert (data["device"], data["sizing"]["device"]) == ("cpu", "cpu")
    assert data["sizing"]["gpus"] == 0 == data["deployment"]["gpus"]
    assert data["sizing"]["replica_hour"] == 2.5
    assert "vLLM's CPU build" in data["recheck"]["needs"] and "GPU" not in \
        data["recheck"]["needs"]


def test_compare_says_a_cpu_study_holds_no_gpu(tmp_path, capsys, monkeypatch):
    _cpu_study(tmp_path / "a.db", "cpu-a")
    _cpu_study(tmp_path / "b.db", "cpu-b")
    assert main(["compare", str(tmp_path / "a.db"), str(tmp_path / "b.db"), "--json",
                 "--gpu-hour", "cpu-a=2"]) == 0
    data = json.loads(capsys.readouterr().out)
    priced, unpriced = data["priced"][0], data["unpriced"][0]
    assert priced["winner"]["gpus"] == 0 and priced["winner"]["replica_hour"] == 2.0
    assert unpriced["capacity_rps_per_gpu"] is None  # no GPU to divide by
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["compare", str(tmp_path / "a.db"), str(tmp_path / "b.db"), "--gpu-hour",
                 "cpu-a=2"]) == 0
    out = capsys.readouterr().out
    assert "cpu-a: measured on vLLM's CPU build: a replica is one CPU machine, no GPU; 2 USD " \
        "per hour of one CPU machine (--gpu-hour)" in out
    assert "cpu-b: measured on vLLM's CPU build: a replica is one CPU machine, no GPU\n" in out
