"""Relief moves: from what limited a trial to the flag that relieves it, and why.

Every measured trial names what limited the engine (`autotune.measure.bottleneck`), but a
sampler sees the flags as anonymous dimensions and finds a move such as "more API servers
for a saturated front end" only when a draw lands on it. With minutes per trial, the first
handful of trials decide what a user gets, so after a trial finishes the study queues the
move that relieves the limit of its best trial so far (or, if that has none left, of the
trial just measured) beside the sampler's own suggestions (`autotune.tuning.study`).

`RELIEF` is the one table of those moves: for each bottleneck, the flags that relieve it,
in order, and which way to move each. The entries come from the engine's documented
behaviour and measurements (docs/concepts.md, "Guided search"):

- front end (an API-server process near a full core): more API servers
  (`--api-server-count`), then a larger `--stream-interval` (fewer streamed events to write
  per token);
- engine core (its process near a full core): async scheduling (the scheduler prepares the
  next step while the GPU runs this one), then more sequences and tokens per step, which
  spread the scheduler's fixed cost per step over more tokens;
- KV cache (preemptions, or a full cache with requests waiting, or a trial pruned for
  either): fp8 KV (half the bytes per cached token), a larger memory fraction or KV size,
  then no more sequences at once than the cache held at the trial's request size (its
  reported KV tokens over its mean tokens per request; one notch down where unknown);
- GPU (busy nearly all the time): the prefill/decode balance: larger prefill chunks when
  TTFT broke the SLO, smaller when TPOT did; a GPU near full use is also said out loud
  (`ceiling`): flags that reorganise the work cannot add much more;
- a model worker near a full core (on a GPU: kernels launched one by one): CUDA graphs
  (`--no-enforce-eager`), then larger batches;
- nothing saturated before the SLO broke (the latency itself binds): speculative decoding
  when TPOT broke (several tokens per step while the hardware idles), larger prefill
  chunks when TTFT did;
- the client: no move; its figures are its own delays, not the engine's.

A move changes one flag of its source trial by one notch within the scenario's space (the
next choice, or a quarter of a range; a named value such as `fp8` is set directly); a flag
outside the space never moves, and a configuration that any trial of the study has run, runs
or waits to run is never proposed again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from optuna.trial import FixedTrial, TrialState

from autotune._device import DeviceSeen
from autotune._flags import Flags, flags_key, normalize
from autotune.config import Param, Scenario
from autotune.engine import defaults as defaults_mod
from autotune.measure import bottleneck as bn
from autotune.measure import capacityrecord
from autotune.measure.bottleneck import Bottleneck
from autotune.tuning.policy import prune, space
from autotune.tuning.records.origin import RELIEF as RELIEF_KIND
from autotune.tuning.records.origin import Origin
from autotune.tuning.records.sameengine import same_engine
from autotune.tuning.records.trialrecord import Params, TrialRecord

UP, DOWN = "up", "down"
# To as many sequences as the KV cache held at the trial's request size (its reported KV
# tokens over its mean tokens per request): one notch down would often still preempt.
FIT = "fit"
TTFT, TPOT = "ttft", "tpot"  # which latency broke the SLO (ITL counts as TPOT)
# A GPU this busy at the best trial's limit leaves flags little to win (`ceiling`).
FULL_GPU = 95.0


@dataclass(frozen=True)
class Knob:
    """One way to relieve a bottleneck: a flag as the space names it (or speculation's
    token count), the way to move it (UP, DOWN or the value to set) and why it helps.
    `when` limits it to trials where that latency (TTFT or TPOT) broke the SLO."""

    name: str
    toward: Any
    why: str
    when: str | None = None


RELIEF: Mapping[str, tuple[Knob, ...]] = {
    bn.FRONT_END: (
        Knob("api-server-count", UP, "more API-server processes share the streaming"),
        Knob("stream-interval", UP, "fewer streamed events for the front end to write"),
    ),
    bn.ENGINE_CORE: (
        Knob("async-scheduling", True, "the scheduler prepares the next step while this "
             "one runs"),
        Knob("max-num-seqs", UP, "more sequences per step spread the scheduler's cost"),
        Knob("max-num-batched-tokens", UP, "more tokens per step spread the scheduler's "
             "cost"),
    ),
    bn.KV_CACHE: (
        Knob("kv-cache-dtype", "fp8", "fp8 halves the bytes of each cached token"),
        Knob("gpu-memory-utilization", UP, "a larger memory fraction for the KV cache"),
        Knob("kv-cache-memory-bytes", UP, "a larger KV cache"),
        Knob("max-num-seqs", FIT, "no more sequences at once than the KV cache holds"),
    ),
    bn.GPU: (
        Knob("max-num-batched-tokens", UP, "larger prefill chunks: fewer steps to the "
             "first token", when=TTFT),
        Knob("max-num-batched-tokens", DOWN, "smaller prefill chunks: decode steps wait "
             "less behind prefills", when=TPOT),
        Knob("kv-cache-dtype", "fp8", "fp8 KV reads half the bytes per decoded token",
             when=TPOT),
    ),
    bn.WORKER: (
        Knob("enforce-eager", False, "CUDA graphs launch a step's kernels at once"),
        Knob("max-num-seqs", UP, "larger batches per launch"),
    ),
    bn.HOST_CPU: (
        Knob("stream-interval", UP, "fewer streamed events: less CPU per token on the cores "
             "the engine shares with its front end and client"),
    ),
    bn.NONE: (
        Knob(space.SPEC_TOKENS, UP, "speculation decodes several tokens per step while "
             "the hardware idles", when=TPOT),
        Knob("max-num-batched-tokens", UP, "larger prefill chunks: fewer steps to the "
             "first token", when=TTFT),
    ),
    bn.CLIENT: (),
}

# vLLM's own defaults where its parser has none (it picks them at start-up): one API
# server, a token per streamed event, CUDA graphs on; max-num-seqs and batched tokens by
# device (`platform_default`).
_FIXED_DEFAULTS = {"api-server-count": 1, "stream-interval": 1, "enforce-eager": False}


@dataclass(frozen=True)
class Move:
    """A proposed trial: which trial it relieves, what limited that one, the flag moved,
    and the configuration, as Optuna parameters where the space can express it (so the
    sampler learns from the result) or else as flags run like a baseline's."""

    source: int
    limit: Bottleneck
    knob: Knob
    before: Any
    after: Any
    flags: Flags
    params: Params | None

    @property
    def origin(self) -> Origin:
        return Origin(RELIEF_KIND, f"relieves {self.limit.kind} of #{self.source} "
                      f"({self.limit.text})", source=self.source, bottleneck=self.limit.kind,
                      knob=self.knob.name, before=self.before, after=self.after,
                      why=self.knob.why)

    def describe(self) -> str:
        return (f"{self.knob.name} {_show(self.before)} -> {_show(self.after)}: "
                f"{self.knob.why}; {self.origin.text}")


def _show(value: Any) -> str:
    return "default" if value is None else str(value)


def limit(rec: TrialRecord) -> Bottleneck | None:
    """What limited a finished trial: the bottleneck it measured, or the KV cache for a
    trial pruned for preempting or filling it."""
    if rec.state == TrialState.PRUNED and rec.reason in (prune.PREEMPTION, prune.KV_SATURATED):
        detail = f": {rec.detail}" if rec.detail else ""
        return Bottleneck(bn.KV_CACHE, f"pruned for {rec.reason}{detail}")
    if rec.state != TrialState.COMPLETE:
        return None
    return rec.bottleneck


def broken(rec: TrialRecord, scenario: Scenario) -> set[str]:
    """Which latencies (TTFT, TPOT) broke the SLO where the trial hit its limit: the
    capacity's limiting step, else the trial's SLO constraints; with no SLO broken, the
    latency the objective weighs."""
    keys: list[str] = []
    step = rec.capacity.limiting_step if rec.capacity else None
    if step is not None:
        keys = [v.split()[0] for v in step.violations or []]
    if not keys:
        keys = [k.removeprefix("slo:") for k, v in rec.constraints.items()
                if k.startswith("slo:") and v > 0]
    found = {_family(k) for k in keys} - {None}
    return {f for f in found if f} or {_family(scenario.objective.latency) or TTFT}


def _family(key: str) -> str | None:
    head = key.split("_")[0]
    return TTFT if head == TTFT else TPOT if head in (TPOT, "itl") else None


def platform_default(name: str, device: DeviceSeen) -> Any:
    """vLLM's start-up default of a flag whose parser default is None, from the device
    (`autotune.engine.defaults`: e.g. max-num-seqs 1024 on a GPU of 70 GiB or more that is
    not an A100, else 256; 128 on the CPU build)."""
    if name in _FIXED_DEFAULTS:
        return _FIXED_DEFAULTS[name]
    return defaults_mod.platform_rules(defaults_mod.machine_of(device)).get(name)


def current(name: str, rec: TrialRecord, defaults: Mapping[str, Any]) -> Any:
    """The value a trial ran a flag at: set by it, else what the engine said at start-up,
    else the engine's default (`defaults`, then `platform_default`); None if unknown."""
    flags = normalize(rec.flags)
    if name == space.SPEC_TOKENS:
        spec = flags.get("speculative-config")
        return int(spec.get(space.SPEC_TOKENS, 0)) if isinstance(spec, Mapping) else 0
    if name in flags:
        return flags[name]
    if name == "async-scheduling" and rec.startup.async_scheduling is not None:
        return rec.startup.async_scheduling
    if name in defaults:
        return defaults[name]
    return platform_default(name, rec.device)


def notch(p: Param, value: Any, toward: Any) -> Any:
    """The value one notch from `value` toward UP/DOWN within `p`, or the named value if
    `p` offers it; None where there is none (the end of the space, or an unknown start)."""
    if toward not in (UP, DOWN):
        return _named(p, value, toward)
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    up = toward == UP
    if p.choices is not None:
        numbers = [c for c in p.choices if isinstance(c, (int, float))
                   and not isinstance(c, bool)]
        ahead = [c for c in numbers if (c > value if up else c < value)]
        return (min(ahead) if up else max(ahead)) if ahead else None
    assert p.low is not None and p.high is not None
    if p.log:
        target = value * 2 if up else value / 2
    else:
        quarter = max(p.step or 0.0, (p.high - p.low) / 4)
        target = value + quarter if up else value - quarter
    target = min(max(target, p.low), p.high)
    if p.step:  # on the range's grid, toward the move
        k = (target - p.low) / p.step
        k = math.floor(k + 1e-9) if up else math.ceil(k - 1e-9)
        target = round(p.low + k * p.step, 12)
    if p.type == "int":
        target = int(round(target))
    return target if (target > value if up else target < value) else None


def requests_cached(rec: TrialRecord) -> float | None:
    """How many of the trial's requests its KV cache holds at once: the KV tokens the engine
    reported over the mean tokens (prompt and answer) of a measured request."""
    tokens = rec.kv_capacity_reported or rec.startup.kv_cache_tokens
    m = rec.metrics
    done = m.completed or 0
    per = ((m.total_input_tokens or 0) + (m.total_output_tokens or 0)) / done if done else 0
    return tokens / per if tokens and per else None


def largest_within(p: Param, value: Any, most: float | None) -> Any:
    """The largest value of `p` below `value` and at most `most` (one notch down where
    `most` is unknown, or no value of the space is that small)."""
    if most is None or not isinstance(value, (int, float)) or isinstance(value, bool):
        return notch(p, value, DOWN)
    if p.choices is not None:
        numbers = [c for c in p.choices if isinstance(c, (int, float))
                   and not isinstance(c, bool) and c < value and c <= most]
        return max(numbers) if numbers else notch(p, value, DOWN)
    assert p.low is not None and p.high is not None
    step = p.step or 1.0
    target = p.low + math.floor((min(most, p.high) - p.low) / step + 1e-9) * step
    target = int(target) if p.type == "int" else target
    return target if p.low <= target < value else notch(p, value, DOWN)


def _named(p: Param, value: Any, toward: Any) -> Any:
    """`toward` as the space offers it (a choice equal to it, or one that starts with it:
    `fp8` -> `fp8_e4m3`), unless the trial already ran it."""
    if p.choices is None:
        ok = isinstance(toward, (int, float)) and not isinstance(toward, bool) and \
            p.low is not None and p.high is not None and p.low <= toward <= p.high
        found = toward if ok else None
    elif isinstance(toward, bool):
        found = next((c for c in p.choices if c is toward), None)
    else:
        found = next((c for c in p.choices if c == toward), None) or next(
            (c for c in p.choices if isinstance(c, str) and c.startswith(str(toward))), None)
    same = found is not None and type(found) is type(value) and found == value
    return None if found is None or same else found


def _param(scenario: Scenario, name: str) -> Param | None:
    """The space's range for a knob: a searched flag, or speculation's token count."""
    if name == space.SPEC_TOKENS:
        return scenario.speculative.num_speculative_tokens if scenario.speculative else None
    return scenario.space.get(name)


def _fits(p: Param, value: Any) -> bool:
    if p.choices is not None:
        return any(c == value and type(c) is type(value) or
                   (isinstance(c, float) and isinstance(value, int) and c == value)
                   for c in p.choices)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    assert p.low is not None and p.high is not None
    if not p.low <= value <= p.high:
        return False
    if p.step:
        k = (value - p.low) / p.step
        return abs(k - round(k)) < 1e-9
    return p.type != "int" or float(value).is_integer()


def _point(rec: TrialRecord, scenario: Scenario, defaults: Mapping[str, Any]
           ) -> Params | None:
    """The trial as Optuna parameters of this space: its own, or (for vLLM's defaults and
    the baselines) the values it ran, where every one of them is a point of the space and
    it set no flag beyond the space and the scenario's fixed ones."""
    if rec.params:
        return dict(rec.params)
    outside = {k: v for k, v in normalize(rec.flags).items()
               if k not in scenario.space and k != "speculative-config"}
    if outside != scenario.engine.flags:
        return None  # a baseline's own flags beyond the space: parameters would drop them
    point: Params = {}
    for name, p in scenario.space.items():
        value = current(name, rec, defaults)
        if value is None or not _fits(p, value):
            return None
        point[name] = value
    if scenario.speculative is not None:
        tokens = current(space.SPEC_TOKENS, rec, defaults)
        if tokens or not _fits(scenario.speculative.num_speculative_tokens, 0):
            return None
        point[space.SPEC_TOKENS] = 0
    return point


def _moved_params(point: Params, scenario: Scenario, knob: str, value: Any
                  ) -> Params:
    """`point` with one knob moved; turning speculation on picks its first method and the
    middle of each searched lookup window, turning it off drops them."""
    out = {**point, knob: value}
    spec = scenario.speculative
    if knob == space.SPEC_TOKENS and spec is not None:
        if value > 0 and space.SPEC_METHOD not in out:
            out[space.SPEC_METHOD] = spec.methods[0]
        for key in space.LOOKUP:
            p = getattr(spec, key)
            if value > 0 and out.get(space.SPEC_METHOD) == "ngram" and p is not None \
                    and key not in out:
                out[key] = _middle(p)
            elif value == 0:
                out.pop(key, None)
        if value == 0:
            out.pop(space.SPEC_METHOD, None)
    return out


def _middle(p: Param) -> Any:
    if p.choices is not None:
        return p.choices[len(p.choices) // 2]
    assert p.low is not None and p.high is not None
    mid = p.low + (p.high - p.low) / 2
    if p.step:
        mid = p.low + math.floor((mid - p.low) / p.step) * p.step
    return int(mid) if p.type == "int" else mid


def _moved_flags(rec: TrialRecord, scenario: Scenario, knob: str, value: Any
                 ) -> Flags:
    """The trial's flags with one knob moved, for a trial the space cannot express."""
    flags = normalize(rec.flags)
    if knob != space.SPEC_TOKENS:
        return {**flags, knob: value}
    spec = scenario.speculative
    assert spec is not None
    given = flags.get("speculative-config")
    config = dict(given) if isinstance(given, dict) else {}
    if value == 0:
        flags.pop("speculative-config", None)
        return flags
    config.setdefault("method", spec.methods[0])
    config = {**spec.extra, **config, space.SPEC_TOKENS: value}
    return {**flags, "speculative-config": config}


class TakenConfigurations:
    """The configurations a study has run, runs or has queued, compared with vLLM's
    defaults filled in (so `{}` and an explicit default are the same engine)."""

    def __init__(self, records: Sequence[TrialRecord], scenario: Scenario,
                 defaults: Mapping[str, Any]):
        self.scenario, self.defaults = scenario, dict(defaults)
        self.finished = [r for r in records if r.flags]
        self.keys = {self.key(f) for f in (self._flags_of(r) for r in records) if f is not None}

    def key(self, flags: Mapping[str, Any]) -> str:
        return flags_key({**_FIXED_DEFAULTS, **self.defaults, **normalize(dict(flags))})

    def _flags_of(self, rec: TrialRecord) -> Flags | None:
        if rec.state == TrialState.FAIL and rec.outcome != "error":
            return None  # interrupted: its configuration is queued again
        return planned_flags(rec, self.scenario)

    def __contains__(self, flags: Mapping[str, Any]) -> bool:
        return self.key(flags) in self.keys or any(same_engine(flags, r) for r in self.finished)


def planned_flags(rec: TrialRecord, scenario: Scenario | None) -> Flags | None:
    """The flags trial `rec` runs with: those it ran, else (still waiting) those it was
    queued with, a baseline's or a relief move's flags over the scenario's fixed ones, or
    its queued parameters as the space turns them into flags; None where nothing says
    (parameters without the scenario that reads them)."""
    if rec.flags:
        return rec.flags
    fixed = scenario.engine.flags if scenario is not None else {}
    if rec.baseline_flags is not None:
        return {**fixed, **rec.baseline_flags}
    if rec.params and scenario is not None:
        return flags_of(rec.params, scenario)
    return None


def flags_of(params: Mapping[str, Any], scenario: Scenario) -> Flags | None:
    """The flags Optuna parameters stand for, as `space.suggest` makes them."""
    try:
        return space.suggest(FixedTrial(dict(params)), scenario)
    except ValueError:
        return None


def suspected(rec: TrialRecord, tried: Sequence[TrialRecord] = ()) -> list[Bottleneck]:
    """What may limit a finished trial, best supported first: its limit, then the other
    resources with evidence at its knee (`capacityrecord.suspects`); a suspect whose relief move
    from this trial tied with it is spent and left out, so the next suspect's move follows
    rather than the next knob of the same one. Where the study's other trials (`tried`)
    show a suspect pegged at every load (`bottleneck.pegged_everywhere`), it goes last."""
    found = limit(rec)
    if found is None:
        return []
    spent = {r.tried_because.bottleneck for r in tried
             if r.origin_kind == RELIEF_KIND and r.tried_because.source == rec.number
             and r.state == TrialState.COMPLETE and r.capacity and r.capacity.low
             and rec.capacity and capacityrecord.tied(r.capacity, rec.capacity)}
    out = [] if found.kind in spent else [found]
    cap, step = rec.capacity, rec.capacity.limiting_step if rec.capacity else None
    for kind in (capacityrecord.suspects(cap) if cap is not None else []):
        if kind != found.kind and kind not in spent and step is not None:
            out.append(Bottleneck(kind, f"{bn.words(kind, step.probes)}: the next suspect, "
                                  f"relieving {', '.join(sorted(s for s in spent if s))} "
                                  "tied" if spent else bn.words(kind, step.probes)))
    # Across trials: a resource pegged at every load of the study's trials goes after the
    # suspects that are not, with that evidence (relief tries it only once they are spent).
    everywhere = bn.pegged_everywhere(
        [[s.probes for s in r.capacity.steps if s.rate is not None]
         for r in tried if r.capacity is not None])
    if any(b.kind not in everywhere for b in out):
        out = [b for b in out if b.kind not in everywhere] + [
            replace(b, text=f"{b.text} ({everywhere[b.kind]})")
            for b in out if b.kind in everywhere]
    return out


def moves(rec: TrialRecord, scenario: Scenario, defaults: Mapping[str, Any],
          tried: Sequence[TrialRecord] = ()) -> list[Move]:
    """Every relief move of one trial's suspects (`suspected`) that the space allows,
    suspect by suspect, each in the table's order (already-measured ones included:
    `propose` skips those)."""
    out = []
    for found in suspected(rec, tried):
        out += _moves_of(rec, found, scenario, defaults)
    return out


def _moves_of(rec: TrialRecord, found: Bottleneck, scenario: Scenario,
              defaults: Mapping[str, Any]) -> list[Move]:
    pressure = broken(rec, scenario)
    point = _point(rec, scenario, defaults)
    out = []
    for knob in RELIEF.get(found.kind, ()):
        p = _param(scenario, knob.name)
        if p is None or (knob.when is not None and knob.when not in pressure):
            continue
        before = current(knob.name, rec, defaults)
        after = largest_within(p, before, requests_cached(rec)) if knob.toward == FIT \
            else notch(p, before, knob.toward)
        if after is None:
            continue
        params = _moved_params(point, scenario, knob.name, after) if point is not None \
            else None
        flags = flags_of(params, scenario) if params is not None else None
        if flags is None:
            params, flags = None, _moved_flags(rec, scenario, knob.name, after)
        out.append(Move(rec.number, found, knob, before, after, flags, params))
    return out


def propose(records: Sequence[TrialRecord], scenario: Scenario, defaults: Mapping[str, Any],
            sources: Sequence[TrialRecord]) -> Move | None:
    """The first relief move of the first of `sources` (the best trial so far, then the
    trial just measured) whose configuration no trial of the study has taken."""
    taken = TakenConfigurations(records, scenario, defaults)
    seen: set[int] = set()
    for rec in sources:
        if rec.number in seen:
            continue
        seen.add(rec.number)
        for move in moves(rec, scenario, defaults, records):
            if move.flags not in taken and space.relation_violation(move.flags) is None:
                return move
    return None


def due(records: Sequence[TrialRecord], every: int) -> bool:
    """Whether a relief move may be queued now: none is waiting, and at least `every` - 1
    trials that were not relief moves have finished since the last one (every 2: relief
    moves and the sampler's trials alternate; every 1: relief while moves are left)."""
    if any(r.state == TrialState.WAITING and r.origin_kind == RELIEF_KIND for r in records):
        return False
    finished = sorted((r for r in records if r.state in (TrialState.COMPLETE, TrialState.PRUNED)),
                      key=lambda r: r.number)
    run = 0
    for r in reversed(finished):
        if r.origin_kind == RELIEF_KIND:
            break
        run += 1
    return run >= every - 1


def ceiling(rec: TrialRecord | None) -> str | None:
    """A sentence when the best trial's limit is the GPU at near full use: further flags
    reorganise work the GPU is already doing and will not win much more."""
    found = rec.bottleneck if rec is not None else None
    if rec is None or found is None or found.kind != bn.GPU:
        return None
    busy = (rec.limit_probes or {}).get("gpu_util_mean")
    if busy is None or busy < FULL_GPU:
        return None
    return (f"#{rec.number} is limited by the GPU, busy {busy:.0f} % of the time: further "
            "flags will not help much; a faster GPU, a smaller or quantised model, or more "
            "replicas would")
