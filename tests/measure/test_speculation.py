"""Speculative decoding's counters, as vLLM's `/metrics` writes them, and their use in a
trial's record, `show`, the report and the dashboard."""

import optuna
import pytest

from autotune.engine import log as enginelog
from autotune.measure import speculation
from autotune.measure.measurement import Measurement
from autotune.results import dashboard, show
from autotune.results.report import page as report_page
from autotune.results.summary import Summary, TrialRow
from autotune.stored import json_data
from autotune.tuning.records.snapshot import records
from autotune.tuning.records.trialrecord import DEFAULTS
from tests import trials

# vLLM 0.32's CPU build after one request with ngram x4 (seen here), model label shortened.
PAGE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7961121635192492e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 25.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="10"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 4.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 60.0
"""


def test_counters_are_read_with_positions_in_numeric_order():
    c = speculation.Counters.parse(PAGE)
    assert (c.drafts, c.draft_tokens, c.accepted, c.generated) == (10, 40, 25, 60)
    assert c.per_position == (9, 7, 5, 4, 1)  # position 10 after 3, not after 1


def test_the_window_follows_vllms_definitions():
    before = speculation.Counters(2, 8, 5, (2, 2, 1, 0, 0), 20)
    spec = speculation.between(before, speculation.Counters.parse(PAGE))
    assert (spec.drafts, spec.draft_tokens, spec.accepted_tokens) == (8, 32, 20)
    assert spec.acceptance_rate == pytest.approx(20 / 32)  # accepted / drafted
    assert spec.mean_acceptance_length == pytest.approx(1 + 20 / 8)  # 1 + accepted / drafts
    assert spec.drafted_share == pytest.approx(20 / 40)  # accepted / generated tokens
    assert spec.accepted_per_position == [pytest.approx(7 / 8), pytest.approx(5 / 8),
                                          pytest.approx(4 / 8), pytest.approx(4 / 8),
                                          pytest.approx(1 / 8)]
    again = speculation.Speculation.from_dict(json_data(spec))
    assert again == spec and json_data(again)["acceptance_rate"] == spec.acceptance_rate


def test_no_drafts_is_no_speculation():
    empty = speculation.Counters.parse("")
    assert empty == speculation.Counters()
    assert speculation.between(empty, empty) is None
    page = speculation.Counters.parse(PAGE)
    assert speculation.between(page, page) is None  # on, but nothing drafted in the window


def test_the_engines_word_on_async_scheduling():
    on = "(APIServer pid=1) INFO 12-01 08:02:07 [vllm.py:9] Asynchronous scheduling is enabled."
    off = ("(APIServer pid=4884) WARNING 12-01 08:02:16 [vllm.py:1605] Async scheduling not "
           "supported with ngram-based speculative decoding and will be disabled.")
    assert enginelog.parse_startup(on).async_scheduling is True
    assert enginelog.parse_startup(off).async_scheduling is False
    assert enginelog.parse_startup(on + "\n" + off).async_scheduling is False  # last wins
    assert enginelog.parse_startup("KV cache size: 3,840 tokens").async_scheduling is None


def _study(tmp_path):
    st = optuna.create_study(direction="maximize", storage=f"sqlite:///{tmp_path / 's.db'}",
                             study_name="spec")
    spec = json_data(speculation.Speculation(100, 400, 250, [0.9, 0.7, 0.5, 0.4], 500))
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    trials.add(st, values=[1.0], constraints={"completed": 0.0}, baseline=DEFAULTS,
               flags={}, outcome="complete", metrics=Measurement.of({"median_tpot_ms": 9.0}))
    trials.add(st, values=[1.2], constraints={"completed": 0.0}, outcome="complete",
               flags={"speculative-config": ngram}, speculation=spec,
               metrics=Measurement.of({"median_tpot_ms": 6.0}))
    return st


def test_show_report_and_dashboard_carry_the_acceptance(tmp_path):
    st = _study(tmp_path)
    plain, spec = records(st)
    assert plain.speculation is None and spec.speculation.acceptance_rate == 0.625
    assert show.speculation_text(spec) == \
        "acceptance 62% (3.50 tokens a step, 50% of the output)"
    rows = [TrialRow.of(r) for r in (plain, spec)]
    assert rows[0].speculation is None
    assert rows[1].speculation is not None
    assert rows[1].speculation.mean_acceptance_length == 3.5
    assert json_data(rows[1])["speculation"]["mean_acceptance_length"] == 3.5  # --json
    html = report_page.build(st)
    assert "Speculative decoding" in html and "62% (3.50 tokens a step, 50% of the output)" in html
    attrs = dashboard.attributes(st)
    assert attrs[1]["autotune:spec_acceptance_rate"] == 0.625
    assert "autotune:spec_acceptance_rate" not in attrs[0]
    # stored as short scalars too, for a plain optuna-dashboard
    assert st.trials[1].user_attrs["spec_acceptance_length"] == 3.5


def test_show_prints_the_acceptance_column(tmp_path):
    from rich.console import Console

    from autotune.results import views

    st = _study(tmp_path)
    console = Console(width=200, record=True)
    views.print_summary(Summary.of(st), console)
    text = console.export_text()
    assert "spec acc" in text and "62% x3.50" in text
