"""Engine identity: whether a configuration would start the engine a trial already ran.

Twins (`autotune.tuning.sharing.heartbeat`), duplicates (`autotune.tuning.study`) and the
configurations a relief move must not propose again (`autotune.tuning.policy.relief`) all
ask it of a trial's record, so it lives beside the record, below all three; the key of a
configuration itself is `autotune._flags.flags_key`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune._flags import flags_key, normalize
from autotune.tuning.records.trialrecord import TrialRecord

ASYNC = "async-scheduling"


def same_engine(flags: Mapping[str, Any], rec: TrialRecord,
                defaults: Mapping[str, Any] | None = None) -> bool:
    """Whether `flags` would start the engine that trial `rec` ran: the same flags (with
    `defaults` filled in, as `flags_key`), or flags that differ only in `--async-scheduling`
    from a trial whose engine turned async scheduling off by itself (vLLM does so for ngram
    speculation and logs it; the record's start-up figures keep what it said). Then any
    setting of the flag runs that engine."""
    if flags_key(flags, defaults) == flags_key(rec.flags, defaults):
        return True
    asked, ran = normalize(dict(flags)), normalize(dict(rec.flags))
    forced_off = rec.startup.async_scheduling is False and ran.get(ASYNC) is not False

    def rest(f: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in f.items() if k != ASYNC}

    return forced_off and \
        flags_key(rest(asked), rest(defaults or {})) == flags_key(rest(ran), rest(defaults or {}))
