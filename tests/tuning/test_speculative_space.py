"""Speculation in the search space: ngram's prompt-lookup window, its relation, and trials
whose engine would be one that already ran (async scheduling turned off by the engine)."""

from __future__ import annotations

import optuna
import pytest
from pydantic import ValidationError

from autotune.config import Scenario
from autotune.engine.log import Startup
from autotune.tuning.policy.space import relation_violation, suggest
from autotune.tuning.records.sameengine import same_engine
from autotune.tuning.records.trialrecord import TrialRecord

optuna.logging.set_verbosity(optuna.logging.WARNING)
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


def scenario(speculative: dict) -> Scenario:
    return Scenario.model_validate({"model": {"tiny": "tiny"}, "speculative": speculative})


def test_the_lookup_window_is_searched_only_when_ngram_speculates():
    sc = scenario({"num_speculative_tokens": {"low": 0, "high": 5},
                   "prompt_lookup_max": {"low": 2, "high": 5},
                   "prompt_lookup_min": {"low": 1, "high": 3}})
    assert "prompt_lookup_max" not in sc.speculative.extra  # the searched value replaces it
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen_on = seen_off = 0
    for _ in range(40):
        trial = study.ask()
        flags = suggest(trial, sc)
        config = flags.get("speculative-config")
        if config is None:
            seen_off += 1
            assert "prompt_lookup_max" not in trial.params  # conditional: not drawn
        else:
            seen_on += 1
            assert 2 <= config["prompt_lookup_max"] <= 5 and 1 <= config["prompt_lookup_min"] <= 3
            assert config["method"] == "ngram" and config["num_speculative_tokens"] >= 1
        study.tell(trial, 0.0)
    assert seen_on and seen_off


def test_a_window_whose_minimum_exceeds_its_maximum_is_not_launched():
    bad = {"speculative-config": {**NGRAM, "prompt_lookup_min": 5}}
    assert relation_violation(bad) == "prompt_lookup_min 5 > prompt_lookup_max 4"
    assert relation_violation({"speculative-config": {**NGRAM, "prompt_lookup_min": 2}}) is None


@pytest.mark.parametrize("spec, message", [
    ({"methods": ["eagle"], "prompt_lookup_max": {"low": 2, "high": 4}}, "ngram's"),
    ({"extra": {"num_speculative_tokens": 3}}, "set by the search"),
])
def test_speculative_sections_that_cannot_work_are_refused(spec, message):
    with pytest.raises(ValidationError, match=message):
        scenario(spec)


def _ran(flags: dict, async_logged: bool | None) -> TrialRecord:
    return TrialRecord(number=0, state=optuna.trial.TrialState.COMPLETE, flags=flags,
                       startup=Startup(async_scheduling=async_logged))


def test_a_trial_differing_only_in_async_scheduling_from_one_the_engine_forced_off_is_a_twin():
    forced = _ran({"speculative-config": NGRAM}, False)  # asked default, engine said off
    for asked in (True, False):
        assert same_engine({"speculative-config": NGRAM, "async-scheduling": asked},
                                  forced)
    # the engine did not force it: async on and off are two engines
    honoured = _ran({"async-scheduling": True}, True)
    assert not same_engine({"async-scheduling": False}, honoured)
    # asked off and got off: whether "on" would be forced is not known
    asked_off = _ran({"speculative-config": NGRAM, "async-scheduling": False}, False)
    assert not same_engine({"speculative-config": NGRAM, "async-scheduling": True},
                                  asked_off)
    # anything else that differs is another engine
    assert not same_engine({"speculative-config": {**NGRAM, "num_speculative_tokens": 4},
                                   "async-scheduling": True}, forced)
    assert same_engine({"speculative_config": NGRAM}, forced)  # spelling aside
