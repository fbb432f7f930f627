"""The study read into rows: a trial still waiting shows the configuration it is queued with,
in `show`, `show --json` and the report alike, not "(defaults)"."""

from __future__ import annotations

import io

import optuna
from optuna.trial import TrialState
from rich.console import Console

from autotune.results import views
from autotune.results.report import tables
from autotune.results.summary import Summary
from autotune.tuning.records import writers
from autotune.tuning.records.origin import RELIEF, Origin
from autotune.tuning.records.trialrecord import DEFAULTS, TrialRecord

SCENARIO = {"model": {"tiny": "tiny"}, "engine": {"flags": {"max-model-len": 512}},
            "space": {"max-num-seqs": {"low": 16, "high": 256, "log": True}}}


def _queued_study() -> optuna.Study:
    """vLLM's defaults, a baseline with its own flags and a relief move queued as Optuna
    parameters, all still waiting (a study stopped before they ran)."""
    st = optuna.create_study(direction="maximize")
    st.set_user_attr("scenario", SCENARIO)
    st.enqueue_trial({}, user_attrs=writers.queued(DEFAULTS, {}))
    st.enqueue_trial({}, user_attrs=writers.queued("small", {"max-num-seqs": 64}))
    move = Origin(RELIEF, "relieves kv_cache of #0", source=0, bottleneck="kv_cache",
                  knob="max-num-seqs", before=256, after=16)
    st.enqueue_trial({"max-num-seqs": 16}, skip_if_exists=False,
                     user_attrs=writers.queued_move(None, move.as_dict()))
    return st


def test_a_waiting_trial_reads_the_parameters_it_was_queued_with():
    st = _queued_study()
    waiting = [TrialRecord.of(t) for t in st.get_trials()]
    assert [r.state for r in waiting] == [TrialState.WAITING] * 3
    assert [r.params for r in waiting] == [{}, {}, {"max-num-seqs": 16}]
    assert waiting[2].flags == {}  # nothing ran yet: the record's own flags are empty


def test_a_waiting_trial_shows_its_queued_flags_everywhere():
    st = _queued_study()
    data = Summary.of(st)
    # The scenario's fixed max-model-len holds for every trial: left out of every row.
    assert [r.flags for r in data.trials] == [{}, {"max-num-seqs": 64}, {"max-num-seqs": 16}]
    assert [r.outcome for r in data.trials] == ["waiting"] * 3
    assert data.as_json()["trials"][2]["flags"] == {"max-num-seqs": 16}
    out = io.StringIO()
    views.print_summary(data, Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    assert "relief #0 kv_cache: max-num-seqs 256->16: max-num-seqs=16" in text
    assert "baseline small: max-num-seqs=64" in text
    assert text.count("(defaults)") == 1  # vLLM's defaults alone
    column = next(cell for head, cell, _ in tables.columns(st)
                  if head == "flags beyond the fixed ones")
    assert [column(TrialRecord.of(t)) for t in st.get_trials()] == [
        "(defaults)", "--max-num-seqs 64", "--max-num-seqs 16"]


def test_a_queued_parameter_the_space_cannot_read_shows_no_flags():
    """Parameters outside the stored space (a foreign or edited scenario) name no flags: the
    row falls back to the record's own (empty) flags rather than raising."""
    st = optuna.create_study(direction="maximize")
    st.set_user_attr("scenario", SCENARIO)
    st.enqueue_trial({"no-such-param": 3}, skip_if_exists=False)
    assert Summary.of(st).trials[0].flags == {}
    bare = optuna.create_study(direction="maximize")  # no stored scenario at all
    bare.enqueue_trial({"max-num-seqs": 16}, skip_if_exists=False)
    assert Summary.of(bare).trials[0].flags == {}
