"""The compile key a study may hold, so that trials differing in their token budget share
compiled code.

vLLM's compile cache key (`compute_hash` of the configuration as the engine derived it;
vLLM 0.26 `config/vllm.py`, `scheduler.py`, `compilation.py`, `cache.py`) changes with
flags a search varies: max-num-batched-tokens is hashed itself and ends every compile
range; max-num-seqs enters through the CUDA-graph capture sizes vLLM derives from it
(`min(2 x max-num-seqs x (1 + speculative tokens), 512)`); block size, KV-cache dtype,
max-model-len and dtype change what is compiled.

`vllm` (the default) holds nothing: every trial is launched as vLLM derives it, and a trial
hits the study's cache only where an earlier one had the same key. `bounded` launches every
trial at the largest max-num-batched-tokens the study can launch, B, and gives the scheduler
the trial's own budget T as `--max-num-scheduled-tokens` (vLLM's per-step token budget,
which it leaves out of the key): every step schedules what it would have, the compiled range
(1, B) covers every batch, but vLLM's memory profile runs B tokens, so the KV cache is
smaller by the activations of B - T tokens (2.6 % on an H100 at T = 4,096 of B = 32,768).
What it does to speed was not measured apart from the CUDA-graph sizes (which a study no
longer holds: pinned to 512 for 64 sequences they served 1.36x the capacity of vLLM's own
128, on an H100: a tuning knob, not a key), so it is the scenario's choice.

The flags added are part of what a trial measured: the trial keeps them
(`compilecache.WarmLaunch.flags`) and exports carry them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune._flags import Flags, integer
from autotune.config import Scenario
from autotune.engine.defaults import Machine, platform_rules

BOUNDED, VLLM = "bounded", "vllm"
KEYS = (VLLM, BOUNDED)
SCHEDULED = "max-num-scheduled-tokens"


@dataclass(frozen=True)
class CompileKey:
    """What a study holds fixed across its trials: the batched-token bound (`bounded`);
    None where nothing is held."""

    policy: str = VLLM
    batched_bound: int | None = None
    batched_default: int | None = None  # a trial's budget when it sets none

    @classmethod
    def of(cls, scenario: Scenario, machine: Machine, scheduled_flag: bool) -> CompileKey:
        """The key of `scenario`'s study on `machine`; `scheduled_flag`: the installed
        engine takes `--max-num-scheduled-tokens`."""
        policy = scenario.engine.compile_key
        defaults = platform_rules(machine)
        tokens = _values(scenario, "max-num-batched-tokens", defaults)
        if policy != BOUNDED or not scheduled_flag or len(set(tokens)) < 2:
            return cls(policy)
        return cls(policy, max(tokens), integer(defaults, "max-num-batched-tokens", 0) or None)

    def flags(self, flags: Mapping[str, Any]) -> Flags:
        """The flags a trial of `flags` is launched with beside its own to hold the key
        (its values override the trial's), or {} where nothing applies to it."""
        if self.batched_bound is None or flags.get("enforce-eager") is True \
                or flags.get("enable-chunked-prefill") is False or SCHEDULED in flags:
            return {}
        spec = flags.get("speculative-config")
        if isinstance(spec, Mapping) and int(spec.get("num_speculative_tokens") or 0):
            return {}  # drafts are scheduled beside the budget: vLLM derives its own
        budget = integer(flags, "max-num-batched-tokens", self.batched_default or 0)
        if not budget or budget == self.batched_bound:
            return {}
        return {"max-num-batched-tokens": self.batched_bound, SCHEDULED: budget}


def _values(scenario: Scenario, flag: str, defaults: Mapping[str, Any]) -> list[int]:
    """Every value of `flag` a trial of the study can launch with: the space's, the fixed
    flags', the baselines' and vLLM's own default on the machine."""
    found: list[Any] = [defaults.get(flag)]
    if flag in scenario.engine.flags:
        found = [scenario.engine.flags[flag]]  # fixed for every trial, defaults' included
    param = scenario.space.get(flag)
    if param is not None:
        found += list(param.choices) if param.choices is not None else [param.low, param.high]
    found += [b.flags[flag] for b in scenario.baselines if flag in b.flags]
    return [int(v) for v in found if isinstance(v, (int, float)) and not isinstance(v, bool)]
