"""The memory model's prediction for one launch (`Estimate`), stored with the trial.

`autotune.tuning.policy.memory` makes it and `autotune.tuning.policy.prune` acts on it; it
is defined here, beside the record that keeps it, because the search policy sits above the
records (a policy module reads trial records, and the record reads none of the policy).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.stored import Stored


@dataclass(frozen=True)
class Estimate(Stored):
    """The prediction for one launch. `reason` is empty when it fits, else starts with the
    pruning reason vLLM's failure would be classified as (`oom`, `kv_too_small`). A trial
    record keeps it (`TrialRecord.memory_estimate`); a figure missing there reads as 0."""

    weights_bytes: int = 0
    kv_bytes_per_token: int = 0
    kv_budget_bytes: int = 0
    kv_capacity_tokens: int = 0  # vLLM's "KV cache size: N tokens"
    max_model_len: int = 0
    longest_model_len: int = 0  # vLLM's "estimated maximum model length" (null block held back)
    fits_one_sequence: bool = False
    fits_workload: bool | None = None
    reason: str = ""
