"""The study's own user attributes, read once as a `StudyRecord` and written by the setters
below it.

The study keeps the scenario `tune` ran (read back by `storedscenario`), vLLM's parser
defaults of the flags it sets, the guardrail reference (which trial made it, and its
contents, so that a worker on another host checks against the same one), whether the named
baselines are queued, each worker that registered (`worker:<id>`) and the ablations
`explain` ran (`explain:<n>`).

Validations come after their trial has finished, when Optuna refuses changes to the trial;
they are kept here under `validation:<n>` and `validation_vllm:<n>` (`store_validation`), and
`TrialRecord.of` puts them back on their trial. Older studies wrote them on the trial
itself; those still read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna

from autotune._flags import Flags
from autotune.tuning.records._storedscenario import StoredScenario

# The keys of a validation: a study attribute `<key>:<n>`, and the trial record's field.
VALIDATION, VALIDATION_VLLM = "validation", "validation_vllm"
SCENARIO, ENGINE_DEFAULTS, REFERENCE, REFERENCE_DATA = \
    "scenario", "engine_defaults", "reference", "reference_data"
EXPLANATION = "explain"  # `explain:<n>`: the ablation of trial n (`tuning.ablation`)
BASELINES_QUEUED, WORKER = "baselines_enqueued", "worker:"


@dataclass(frozen=True)
class StudyRecord:
    """A study's own user attributes, read once (`of`). Missing ones read as None (or {},
    False, no scenario); `engine_defaults` and `reference_data` are None only where never
    stored."""

    scenario: StoredScenario = field(default_factory=StoredScenario)
    engine_defaults: Flags | None = None
    reference: dict[str, Any] | None = None
    reference_data: Any = None
    baselines_queued: bool = False
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    validations: dict[tuple[str, int], Any] = field(default_factory=dict)
    explanations: dict[int, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, study: optuna.Study) -> StudyRecord:
        a = study.user_attrs
        found: dict[tuple[str, int], Any] = {}
        explained: dict[int, Any] = {}
        for k, v in a.items():
            key, _, number = k.partition(":")
            if key in (VALIDATION, VALIDATION_VLLM) and number.isdigit():
                found[key, int(number)] = v
            elif key == EXPLANATION and number.isdigit():
                explained[int(number)] = v
        return cls(scenario=StoredScenario.read(a.get(SCENARIO)),
                   engine_defaults=a.get(ENGINE_DEFAULTS), reference=a.get(REFERENCE),
                   reference_data=a.get(REFERENCE_DATA),
                   baselines_queued=bool(a.get(BASELINES_QUEUED)),
                   workers={k.removeprefix(WORKER): v for k, v in a.items()
                            if k.startswith(WORKER) and isinstance(v, dict)},
                   validations=found, explanations=explained)

    def validation(self, key: str, number: int) -> Any:
        """Trial `number`'s validation stored with the study (`store_validation`), or None."""
        return self.validations.get((key, number))


def set_scenario(study: optuna.Study, scenario: Mapping[str, Any]) -> None:
    study.set_user_attr(SCENARIO, dict(scenario))


def set_engine_defaults(study: optuna.Study, defaults: Mapping[str, Any]) -> None:
    study.set_user_attr(ENGINE_DEFAULTS, dict(defaults))


def set_reference(study: optuna.Study, path: str, trial: int) -> None:
    """Note which trial made the guardrail reference, and where it keeps it."""
    study.set_user_attr(REFERENCE, {"path": path, "trial": trial})


def set_reference_data(study: optuna.Study, data: Any) -> None:
    """The guardrail reference's contents, for workers on other hosts."""
    study.set_user_attr(REFERENCE_DATA, data)


def set_baselines_queued(study: optuna.Study) -> None:
    study.set_user_attr(BASELINES_QUEUED, True)


def set_worker(study: optuna.Study, worker_id: str, data: Mapping[str, Any]) -> None:
    """Register a worker with the study (`autotune.tuning.sharing.heartbeat.register`)."""
    study.set_user_attr(f"{WORKER}{worker_id}", dict(data))


def store_validation(study: optuna.Study, number: int, key: str, value: Any) -> None:
    """Keep a validation of finished trial `number` (a study user attribute: Optuna allows
    no change to a finished trial). `key` is VALIDATION or VALIDATION_VLLM."""
    if key not in (VALIDATION, VALIDATION_VLLM):
        raise ValueError(f"not a validation key: {key!r}")
    study.set_user_attr(f"{key}:{number}", value)


def store_explanation(study: optuna.Study, number: int, value: Any) -> None:
    """Keep the ablation of finished trial `number` (`autotune.tuning.ablation`)."""
    study.set_user_attr(f"{EXPLANATION}:{number}", value)
