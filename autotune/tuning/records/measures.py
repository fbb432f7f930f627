"""What a trial is scored on (`Measures`), stored with the trial.

`autotune.tuning.policy.objective` makes and scores them; they are defined here, beside the
record that keeps them, because the search policy sits above the records (a policy module
reads trial records, and the record reads none of the policy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.stored import Stored


@dataclass(frozen=True)
class Measures(Stored):
    """What a trial is scored on, kept in its record (`measures`); a figure missing from a
    stored record reads as NaN (memory: None), not as a measured 0."""

    throughput: float = math.nan
    latency_ms: float = math.nan
    memory_mib: float | None = None
