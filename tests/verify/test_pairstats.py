"""Paired-run statistics: t quantiles, log-ratio intervals, gains and their wording."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from autotune._remeasurements import Validation
from autotune.verify import pairstats


def test_t_quantiles_match_the_tables():
    assert pairstats.t975(1) == pytest.approx(12.706, abs=1e-3)
    assert pairstats.t975(2) == pytest.approx(4.303, abs=1e-3)
    assert pairstats.t975(30) == pytest.approx(2.042, abs=1e-3)
    # beyond the table the expansion takes over smoothly, and tends to the normal quantile
    assert pairstats.t975(31) == pytest.approx(2.0395, abs=2e-4)
    assert pairstats.t975(60) == pytest.approx(2.0003, abs=2e-4)
    assert pairstats.t975(10_000) == pytest.approx(1.960, abs=1e-3)
    values = [pairstats.t975(df) for df in range(1, 100)]
    assert values == sorted(values, reverse=True)
    with pytest.raises(ValueError):
        pairstats.t975(0)


def test_log_interval_is_a_t_interval():
    iv = pairstats.log_interval([0.1, 0.2, 0.3])
    half = 4.3027 * 0.1 / math.sqrt(3)
    assert (iv.mean, iv.n) == (pytest.approx(0.2), 3)
    assert iv.low == pytest.approx(0.2 - half) and iv.high == pytest.approx(0.2 + half)
    one = pairstats.log_interval([0.4])
    assert (one.mean, one.low, one.high) == (0.4, None, None)


def test_ratios_are_geometric_means_of_the_pairs():
    logs = pairstats.log_ratios([110.0, 242.0], [100.0, 200.0])  # x1.1 and x1.21
    assert logs == pytest.approx([math.log(1.1), math.log(1.21)])
    r = pairstats.ratio(logs, "higher")
    assert r.ratio == pytest.approx(math.sqrt(1.1 * 1.21))
    assert r.ci_low < r.ratio < r.ci_high and r.better == "higher"
    same = pairstats.ratio(pairstats.log_ratios([90.0, 45.0], [100.0, 50.0]), "lower")
    assert same.ratio == pytest.approx(0.9) and same.ci_low == pytest.approx(0.9)
    assert pairstats.log_ratios([1.0, None], [1.0, 1.0]) is None
    assert pairstats.log_ratios([1.0, 0.0], [1.0, 1.0]) is None


def test_gain_is_relative_and_the_verdict_reads_the_interval():
    g = pairstats.gain([0.1, 0.1, 0.1])
    assert g.gain == pytest.approx(math.exp(0.1) - 1) == g.ci_low == g.ci_high
    assert g.word() == "gain"
    assert pairstats.gain([-0.2, -0.21, -0.19]).word() == "loss"
    assert pairstats.gain([-0.1, 0.2]).word() == "within noise"
    assert pairstats.gain([0.1]).word() == "no CI"


def test_one_line_says_when_there_is_no_interval():
    v = replace(pairstats.gain([0.05, 0.10, 0.15]), metric="weighted score", against=0,
                repeats=3)
    line = v.line()
    assert line.startswith("+10.5% weighted score (95% CI ") and "vs #0, 3 paired runs" in line
    assert "no CI with 1 pair" in replace(pairstats.gain([0.1]), against=0, repeats=1).line()


def test_a_stored_validation_reads_back_typed_and_writes_back_as_stored():
    """Studies keep validations as JSON objects: read as records (a key this version does
    not know is left out), written back key for key; the headline drops the runs."""
    stored = {"gain": 0.1, "ci_low": 0.02, "ci_high": 0.2, "metric": "weighted score",
              "against": 0, "candidate": 3, "repeats": 2, "made_by_a_later_version": 1,
              "per_metric": {"throughput": {"key": "output_throughput", "ratio": 1.1,
                                            "ci_low": 1.0, "ci_high": 1.2, "better": "higher"}},
              "runs": [{"trial": 0, "role": "baseline", "pair": 0, "throughput": 10.0,
                        "log_path": "/x"}]}
    v = Validation.from_dict(stored)
    assert v.per_metric["throughput"].ratio == 1.1 and v.runs[0].throughput == 10.0
    assert v.as_dict() == {k: val for k, val in stored.items() if k != "made_by_a_later_version"}
    assert v.headline().runs == () and "runs" not in v.headline().as_dict()
