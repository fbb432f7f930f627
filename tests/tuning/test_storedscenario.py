"""The stored scenario read back into the scenario model: a current one as it is, an older
one with what no longer validates left out, and none where there is nothing to read."""

from __future__ import annotations

import optuna
import pytest

from autotune.config import Scenario
from autotune.tuning import ranking
from autotune.tuning.records._storedscenario import StoredScenario

STORED = Scenario.model_validate({
    "model": {"tiny": "tiny"}, "engine": {"flags": {"max_num_seqs": 8}},
    "objective": {"slos": {"ttft_p95_ms": 500.0}}, "hardware": {"memory_gib": 24},
}).model_dump(mode="json", by_alias=True)


def test_a_current_scenario_reads_as_it_was_stored():
    read = StoredScenario.read(STORED)
    assert read.problem is None and read.scenario is not None
    assert read.scenario.model_dump(mode="json", by_alias=True) == STORED
    assert read.scenario.engine.flags == {"max-num-seqs": 8}


def test_an_older_scenario_keeps_what_still_validates():
    old = {**STORED, "retired": True,
           "objective": {**STORED["objective"], "latency": "no_such_p95"},
           "workload": {**STORED["workload"], "gone_knob": 3}}
    read = StoredScenario.read(old)
    assert read.scenario is not None and read.problem is not None
    assert read.scenario.objective.latency == "ttft_p95"  # the default, for the failing one
    assert read.scenario.objective.slos == {"ttft_p95_ms": 500.0}
    assert read.scenario.hardware.memory_gib == 24


@pytest.mark.parametrize("raw", [None, {}, [], "x", {"engine": {"flags": {}}},
                                 {**STORED, "model": {"tiny": "tiny", "path": "/m"}}])
def test_nothing_to_read_is_no_scenario(raw):
    assert StoredScenario.read(raw).scenario is None


def test_a_foreign_study_ranks_without_one():
    st = optuna.create_study()
    assert ranking.stored_scenario(st) is None
    assert ranking.fixed_flags(st) == {} and ranking.emulated_gib(st) is None
    st.set_user_attr("scenario", STORED)
    assert ranking.fixed_flags(st) == {"max-num-seqs": 8} and ranking.emulated_gib(st) == 24
