"""Scores and constraints, checked against arithmetic done by hand."""

from __future__ import annotations

import math

import pytest

from autotune.config import Objective
from autotune.measure.measurement import Measurement
from autotune.tuning.policy.objective import (
    constraint_names,
    constraints,
    directions,
    gain,
    measures,
    memory_mib,
    values,
    weighted_score,
)
from autotune.tuning.records.measures import Measures

BASE = Measures(throughput=100.0, latency_ms=200.0, memory_mib=1000.0)
EQUAL = {"throughput": 1.0, "latency": 1.0}


# --- weighted_score ----------------------------------------------------------------------


def test_baseline_scores_zero_against_itself():
    assert weighted_score(BASE, BASE, {"throughput": 1.0, "latency": 1.0, "memory": 0.2}) == 0.0


def test_double_throughput_same_latency():
    # (1 * ln(200/100) + 1 * ln(200/200)) / (1 + 1) = ln 2 / 2
    m = Measures(200.0, 200.0, None)
    assert weighted_score(m, BASE, EQUAL) == pytest.approx(math.log(2) / 2)


def test_latency_ratio_is_baseline_over_trial():
    # half the latency is a gain: (1 * ln(100/100) + 1 * ln(200/100)) / 2 = ln 2 / 2
    faster = Measures(100.0, 100.0, None)
    assert weighted_score(faster, BASE, EQUAL) == pytest.approx(math.log(2) / 2)
    # twice the latency is a loss of the same size
    slower = Measures(100.0, 400.0, None)
    assert weighted_score(slower, BASE, EQUAL) == pytest.approx(-math.log(2) / 2)


def test_unequal_weights():
    # throughput x3 (w 2), latency x2 worse (w 1), memory x0.5 i.e. half the memory (w 1):
    # (2 ln 3 + 1 ln(200/400) + 1 ln(1000/500)) / (2 + 1 + 1) = (2 ln 3 - ln 2 + ln 2) / 4
    m = Measures(300.0, 400.0, 500.0)
    weights = {"throughput": 2.0, "latency": 1.0, "memory": 1.0}
    assert weighted_score(m, BASE, weights) == pytest.approx(2 * math.log(3) / 4)


def test_memory_term_is_left_out_without_memory():
    # memory unknown: only throughput counts, (1 ln 2) / 1, not (1 ln 2 + 0) / 2
    m = Measures(200.0, 200.0, None)
    weights = {"throughput": 1.0, "memory": 1.0}
    assert weighted_score(m, BASE, weights) == pytest.approx(math.log(2))
    base_without_memory = Measures(100.0, 200.0, None)
    m_with_memory = Measures(200.0, 200.0, 10.0)
    assert weighted_score(m_with_memory, base_without_memory, weights) == pytest.approx(
        math.log(2))


@pytest.mark.parametrize(
    "m",
    [Measures(200.0, 0.0, 500.0), Measures(200.0, -1.0, 500.0)],
)
def test_zero_or_negative_values_are_skipped(m):
    # latency 0 or negative is no data: (1 ln 2 + 1 ln 2) / 2 over throughput and memory only
    weights = {"throughput": 1.0, "latency": 1.0, "memory": 1.0}
    assert weighted_score(m, BASE, weights) == pytest.approx(math.log(2))


def test_zero_baseline_throughput_is_skipped():
    base = Measures(0.0, 200.0, None)
    m = Measures(50.0, 100.0, None)
    # only latency: ln(200/100) / 1
    assert weighted_score(m, base, EQUAL) == pytest.approx(math.log(2))


def test_no_usable_term_scores_zero():
    assert weighted_score(Measures(0.0, 0.0, None), BASE, EQUAL) == 0.0
    assert weighted_score(Measures(200.0, 100.0, None), BASE, {"memory": 1.0}) == 0.0


def test_zero_weight_terms_do_not_dilute():
    m = Measures(200.0, 400.0, None)
    assert weighted_score(m, BASE, {"throughput": 1.0, "latency": 0.0}) == pytest.approx(
        math.log(2))


# --- gain ----------------------------------------------------------------------------------


def test_gain():
    assert gain(0.0) == 0.0
    assert gain(math.log(2)) == pytest.approx(1.0)
    assert gain(0.1) == pytest.approx(0.10517, abs=1e-5)
    assert gain(-math.log(2)) == pytest.approx(-0.5)


# --- values and directions -----------------------------------------------------------------


def test_values_weighted():
    objective = Objective(weights=EQUAL)
    m = Measures(200.0, 200.0, 900.0)
    assert values(m, BASE, objective) == [pytest.approx(math.log(2) / 2)]
    # the first measured trial is its own baseline
    assert values(m, None, objective) == [0.0]
    assert directions(objective) == ["maximize"]


def test_values_pareto():
    objective = Objective(mode="pareto")
    assert values(Measures(150.0, 120.0, 900.0), BASE, objective) == [150.0, 120.0, 900.0]
    assert values(Measures(150.0, 120.0, None), None, objective) == [150.0, 120.0, 0.0]
    assert directions(objective) == ["maximize", "minimize", "minimize"]


# --- constraints ---------------------------------------------------------------------------


def test_constraints_are_ms_over_each_limit_then_failures():
    objective = Objective(slos={"ttft_p95_ms": 500, "tpot_mean_ms": 50})
    summary = {"p95_ttft_ms": 650.0, "mean_tpot_ms": 20.0, "failed": 0}
    assert constraints(Measurement.of(summary), objective) == {
        "slo:ttft_p95_ms": 150.0, "slo:tpot_mean_ms": -30.0, "failed_requests": 0.0}


def test_missing_metric_is_far_over():
    objective = Objective(slos={"ttft_p95_ms": 500, "itl_p99_ms": 80})
    found = constraints(Measurement.of({"p95_ttft_ms": 100.0}), objective)
    assert list(found.values()) == [-400.0, 1e9, 0.0]


def test_failed_requests_make_a_positive_term():
    objective = Objective(slos={"ttft_p95_ms": 500})
    clean = constraints(Measurement.of({"p95_ttft_ms": 100.0, "failed": 0}), objective)
    failing = constraints(Measurement.of({"p95_ttft_ms": 100.0, "failed": 3}), objective)
    assert clean == {"slo:ttft_p95_ms": -400.0, "failed_requests": 0.0}
    assert failing == {"slo:ttft_p95_ms": -400.0, "failed_requests": 3.0}
    # every trial has the same constraints, whatever happened (GPSampler compares them)
    assert set(clean) == set(failing) == set(constraint_names(objective))


def test_no_slos_leaves_only_the_failure_term():
    assert constraints(Measurement.of({"failed": 2}), Objective()) == {"failed_requests": 2.0}
    assert all(c <= 0 for c in constraints(Measurement.of({}), Objective()).values())


# --- measures ------------------------------------------------------------------------------


def summary(**probes: float) -> Measurement:
    return Measurement.of({"output_throughput": 123.0, "request_throughput": 4.0,
                           "total_token_throughput": 456.0, "p95_ttft_ms": 80.0,
                           "mean_ttft_ms": 60.0, "p99_itl_ms": 9.0, "probes": probes})


def test_measures_reads_the_configured_keys():
    m = measures(summary(rss_mib_max=700.0), Objective())
    assert m == Measures(throughput=123.0, latency_ms=80.0, memory_mib=700.0)
    m = measures(summary(), Objective(throughput="total_token_throughput", latency="itl_p99"))
    assert (m.throughput, m.latency_ms, m.memory_mib) == (456.0, 9.0, None)
    assert measures(summary(), Objective(latency="ttft_mean")).latency_ms == 60.0


def test_measures_as_dict_round_trips():
    m = Measures(1.0, 2.0, None)
    assert Measures(**m.as_dict()) == m


def test_measures_needs_its_metrics():
    with pytest.raises(KeyError):
        measures(Measurement.of({"output_throughput": 1.0}), Objective())


@pytest.mark.parametrize(
    ("probes", "expected"),
    [
        ({"gpu_memory_engine_mib_max": 10.0, "gpu_memory_used_mib_max": 20.0,
          "rss_mib_max": 30.0}, 10.0),
        ({"gpu_memory_used_mib_max": 20.0, "rss_mib_max": 30.0}, 20.0),
        ({"rss_mib_max": 30.0}, 30.0),
        ({"gpu_memory_engine_mib_max": 0, "gpu_memory_used_mib_max": None, "rss_mib_max": 30.0},
         30.0),
        ({}, None),
    ],
)
def test_memory_preference(probes, expected):
    assert memory_mib(Measurement.of({"probes": probes})) == expected


def test_memory_without_probes():
    assert memory_mib(Measurement()) is None
    assert memory_mib(Measurement.of({"probes": None})) is None
