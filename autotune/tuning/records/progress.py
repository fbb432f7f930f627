"""How far a run of the study has come (`Progress`), what the live view shows after each
trial.

The loop (`autotune.tuning.study`) and the parent of `tune --gpus`' workers
(`autotune.tuning.sharing.workers`) make it and `autotune.results.views` shows it; it is
made of trial records, so it lives beside them, and neither the workers nor the views
import the loop for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.tuning.records.trialrecord import TrialRecord


@dataclass
class Progress:
    """What the live view shows after each trial."""

    done: int
    planned: int
    elapsed_s: float
    deadline_s: float | None
    last: TrialRecord | None
    best: TrialRecord | None
    reference: TrialRecord | None = None  # what gains are over: vLLM's defaults, if run
