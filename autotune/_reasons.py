"""Why a trial was pruned or failed: every reason a trial record can carry, with its meaning.

A trial's `reason` (and, for a FAIL trial, its `outcome`) is one of these names; `autotune
show` prints the meaning of each one its trials carry. The modules that decide a reason
import its name from here (the engine's log reader, the memory model, the probe phase, the
capacity search, the trial and the study loop), so no reason is spelled in two places and
none is without a meaning. A FAIL trial whose fault was autotune's own (`ERROR`) carries the
exception's type as its reason; that one is not listed.
"""

from __future__ import annotations

# The engine did not start or died (`autotune.engine.log.classify_failure`).
OOM = "oom"
KV_TOO_SMALL = "kv_too_small"
INVALID_FLAG = "invalid_flag"
PORT_IN_USE = "port_in_use"
TIMEOUT = "timeout"
FAILED_TO_START = "failed_to_start"
CRASHED = "crashed"
# Before launch: flags that contradict each other, or that cannot serve the workload.
INVALID_COMBINATION = "invalid_combination"
MAX_MODEL_LEN_TOO_SHORT = "max_model_len_too_short"
WORKLOAD_FIT = "workload_fit"
# During the probe phase (`autotune.tuning.policy.prune`), or Optuna's pruner.
PREEMPTION = "preemption"
KV_SATURATED = "kv_saturated"
FAILURES = "failures"
BEHIND = "behind"
# The capacity search (`autotune.measure.searchplan`).
BELOW_BEST = "below_best_capacity"
# Before launch: the study's own evidence (`autotune.tuning.policy.evidence`).
PREDICTED_BELOW_BEST = "predicted_below_best"
TIED_WITH_BEST = "tied_inside_best"
UNREACHABLE = "slos_missed_at_low_load"
NO_PASSING_RATE = "no_rate_passed"
# After the workload.
NO_SUCCESSFUL_REQUESTS = "no_successful_requests"
GUARDRAIL_ERROR = "guardrail_error"
# The study loop: a trial given back to the queue.
DEFAULTS_FIRST = "defaults_first"
# Outcomes of FAIL trials (`TrialRecord.outcome`).
INTERRUPTED = "interrupted"
ERROR = "error"

REASONS: dict[str, str] = {
    OOM: "out of memory: the engine could not fit weights, activations and KV cache "
         "(or the host killed it)",
    KV_TOO_SMALL: "the KV cache cannot hold one sequence of max-model-len tokens",
    INVALID_FLAG: "vLLM rejected a flag or a flag value",
    PORT_IN_USE: "the engine's port was taken by another process",
    TIMEOUT: "the trial's time (start-up or trial_timeout) was spent",
    FAILED_TO_START: "the engine exited before it served, with no memory, KV-cache or flag "
                     "error in its log; the detail quotes its last error",
    CRASHED: "the engine died while it was being measured",
    INVALID_COMBINATION: "flags that contradict each other; not launched",
    MAX_MODEL_LEN_TOO_SHORT: "max-model-len is below the workload's longest request; "
                             "not launched",
    WORKLOAD_FIT: "the predicted KV cache holds fewer tokens than max-num-seqs requests "
                  "of the workload; not launched",
    PREEMPTION: "the probe phase saw requests preempted (KV cache too small for the batch)",
    KV_SATURATED: "the probe phase saw the KV cache full while requests queued",
    FAILURES: "too many requests failed during the probe phase",
    BEHIND: "Optuna's pruner: the probe phase scored below earlier trials at that point",
    BELOW_BEST: "the capacity search stopped: this trial cannot beat the best capacity so "
                "far",
    PREDICTED_BELOW_BEST: "not launched: a trial the front end limited below the best had "
                          "no fewer API servers or tokens per event",
    TIED_WITH_BEST: "the capacity search stopped: it passed at the best's lower bound and "
                    "failed at its upper bound (a tie)",
    UNREACHABLE: "the SLOs are missed even at a nearly idle load",
    NO_PASSING_RATE: "no rate the capacity search tried met the SLOs while keeping pace",
    NO_SUCCESSFUL_REQUESTS: "no request of the workload succeeded",
    GUARDRAIL_ERROR: "the quality check against the reference outputs could not run",
    DEFAULTS_FIRST: "given back to the queue: vLLM's defaults must run first",
    INTERRUPTED: "the tuner was stopped during the trial; its configuration is queued again",
    ERROR: "autotune itself failed (the reason is the exception's type)",
}


def meaning(reason: str | None) -> str | None:
    """What a stored reason means, or None for one not listed (an exception's type)."""
    return REASONS.get(reason or "")


def legend(names: list[str | None]) -> dict[str, str]:
    """The meaning of each listed reason among `names`, in first-seen order."""
    return {n: REASONS[n] for n in dict.fromkeys(names) if n and n in REASONS}
