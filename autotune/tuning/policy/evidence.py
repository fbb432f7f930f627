"""Losers known before launch: a configuration the study's own measurements already rank
below its best.

A launch costs a whole start-up before its first burst can prune it (48-131 s on the H200),
so a trial the study's evidence condemns is better not launched. The rule here is the one
the measurements support without a model: a trial whose capacity was limited by the front
end (its API-server processes near a full core, read across the knee) carries no more
requests per second than that front end can stream, whatever its other flags: vLLM's
scheduling, batching and KV-cache flags change the engine's work, not the API server's work
per streamed event. A configuration with no more of what relieves the front end
(`relief.RELIEF[FRONT_END]`: API servers, tokens per streamed event) than such a trial is
limited at that trial's capacity at most; if that capacity lies wholly below the best
trial's interval, it cannot beat the best. Other limits (the GPU, the engine core, the KV
cache) depend on nearly every flag, and no trial's evidence carries over to another
configuration there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune._flags import integer
from autotune.measure import bottleneck as bn
from autotune.measure import capacityrecord, capacitytext
from autotune.tuning.policy.relief import DOWN, RELIEF, UP
from autotune.tuning.records.trialrecord import TrialRecord

# vLLM's own values of the front end's flags where a configuration leaves them unset.
_UNSET = {"api-server-count": 1, "stream-interval": 1}


def predicted_loser(flags: Mapping[str, Any], records: Sequence[TrialRecord],
                    best: TrialRecord | None) -> str | None:
    """Why `flags` cannot beat `best` on the study's own evidence (one line naming the trial
    that shows it), or None where nothing shows it."""
    if best is None or best.capacity is None or not best.capacity.low:
        return None
    best_low = capacityrecord.bounds(best.capacity)[0]
    knobs = RELIEF[bn.FRONT_END]
    for r in records:
        cap = r.capacity
        if not r.feasible or cap is None or cap.limit is None or cap.limit.kind != bn.FRONT_END:
            continue
        high = capacityrecord.bounds(cap)[1]
        if high is None or high >= best_low:
            continue  # a floor, or not below the best beyond its interval
        if all(_no_more(flags, r.flags, k.name, k.toward) for k in knobs):
            held = ", ".join(f"{k.name} {_value(flags, k.name)}" for k in knobs)
            return (f"the front end limited #{r.number} at {capacitytext.describe(cap)}, "
                    f"below the best (#{best.number}, {capacitytext.describe(best.capacity)}); "
                    f"this configuration has no more of what relieves it ({held})")
    return None


def _value(flags: Mapping[str, Any], name: str) -> int:
    return integer(flags, name, _UNSET.get(name, 0))


def _no_more(flags: Mapping[str, Any], evidence: Mapping[str, Any], name: str,
             toward: Any) -> bool:
    """`flags` relieve by `name` no more than `evidence` does."""
    mine, theirs = _value(flags, name), _value(evidence, name)
    if toward == UP:
        return mine <= theirs
    if toward == DOWN:
        return mine >= theirs
    return mine == theirs or mine != toward
