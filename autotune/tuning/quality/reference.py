"""The guardrail's reference as it is stored: the reference configuration's greedy outputs
and their log-probabilities (`Sample`), its task check's answers (`TaskAnswers`), the noise
floor and thresholds (`Reference`), read from any version of its JSON file and written
back; and where that file lives (`reference_path`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.config import Scenario
from autotune.tuning.quality.template import PLAIN


@dataclass
class Sample:
    """One prompt's greedy output and the teacher-forced log-probs of its tokens."""

    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    logprobs: list[float]


@dataclass
class TaskAnswers:
    """The reference configuration's answers to the task check (`autotune.tuning.quality.tasks`):
    which items (count and seed), its answer texts and which of them were right."""

    items: int
    seed: int
    max_tokens: int
    outputs: list[str]
    correct: list[bool]
    left_out: list[int] = field(default_factory=list)  # items too long for the engine


@dataclass
class Reference:
    """What every trial is compared with: the reference configuration's greedy outputs
    and their log-probs, the noise floor and thresholds, how the prompts were sent
    (`template`: "chat" through the model's chat template, "plain" as they are; a
    reference written before templates existed reads as plain) and its task answers
    (None where it was made before the task check, or without it)."""

    prompts: list[str]
    max_tokens: int
    samples: list[Sample]
    noise: dict[str, float]
    thresholds: dict[str, float]
    context: dict[str, Any] = field(default_factory=dict)  # model, engine, flags
    template: str = PLAIN
    tasks: TaskAnswers | None = None
    # Prompts too long for the reference engine's context: their samples are empty and
    # no check compares them.
    left_out: list[int] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), ensure_ascii=False))

    @classmethod
    def load(cls, path: Path) -> Reference:
        return cls.of(json.loads(path.read_text()))

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Reference:
        """A reference from its JSON data (`save`'s), of any version."""
        raw = dict(raw)
        raw["samples"] = [Sample(**s) for s in raw["samples"]]
        if raw.get("tasks") is not None:
            raw["tasks"] = TaskAnswers(**raw["tasks"])
        return cls(**raw)


def reference_path(scenario: Scenario, study_dir: Path) -> Path:
    """Where the guardrail's reference lives: the scenario's file, else the study's folder."""
    return Path(scenario.guardrail.reference) if scenario.guardrail.reference \
        else study_dir / "reference.json"
