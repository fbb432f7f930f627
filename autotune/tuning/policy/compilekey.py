"""The compile key a study holds, so that trials vLLM would compile alike share compiled code.

vLLM's compile cache key (`compute_hash` of the configuration as the engine derived it;
vLLM 0.26 `config/vllm.py`, `scheduler.py`, `compilation.py`, `cache.py`) changes with
flags a search varies even where they change nothing that is compiled:

- **max-num-seqs** enters through the CUDA-graph capture sizes vLLM derives from it
  (`min(2 x max-num-seqs x (1 + speculative tokens), 512)`): 64 sequences capture up to
  128 tokens, 256 and more up to 512. `stable` pins the largest of those the study can
  launch (`compilation-config: {max_cudagraph_capture_size: C}`), so vLLM derives the
  same list for every trial: what its own settings give a trial of the most sequences,
  and for fewer sequences graphs for mixed batches of up to C tokens as well. vLLM 0.26
  takes the extra graphs' memory from the KV cache (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`),
  so such a trial's KV cache is that much smaller; its record says how large it was.
- **max-num-batched-tokens** is hashed itself and ends every compile range. `bounded` also
  launches every trial at the study's largest value B and gives the scheduler the trial's
  own budget T as `--max-num-scheduled-tokens` (vLLM's per-step token budget, not in the
  key): every step schedules what it would have, the compiled range (1, B) covers every
  batch, but vLLM's memory profile runs B tokens, so the KV cache is smaller by the
  activations of B - T tokens (on the H200, about 2 % of it). Hence it is the scenario's
  choice, for studies whose KV cache is not what limits them.
- block size, KV-cache dtype, max-model-len and dtype change what is compiled: they keep
  their own keys, and so does everything under `vllm` (vLLM derives everything).

The flags added are part of what a trial measured: the trial keeps them
(`compilecache.WarmLaunch.flags`) and exports carry them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.config import Param, Scenario
from autotune.engine.defaults import Machine, platform_rules
from autotune.flags import Flags, integer

STABLE, BOUNDED, VLLM = "stable", "bounded", "vllm"
KEYS = (STABLE, BOUNDED, VLLM)
CAPTURE = "max_cudagraph_capture_size"
SCHEDULED = "max-num-scheduled-tokens"
# vLLM's ceiling for the capture sizes it derives: 512, and 1024 on Blackwell data-centre
# parts from vLLM 0.32 (`is_device_capability_family(100)`), where a pin of 512 would
# capture less than vLLM does: there the sizes are left to vLLM.
CEILING = 512
_BLACKWELL = re.compile(r"\bG?B[123]00\b")


@dataclass(frozen=True)
class CompileKey:
    """What a study holds fixed across its trials: the capture ceiling (GPU, `stable`
    and `bounded`) and the batched-token bound (`bounded`); None where nothing is held."""

    policy: str = STABLE
    capture: int | None = None
    batched_bound: int | None = None
    batched_default: int | None = None  # the trial's budget when it sets none

    @classmethod
    def of(cls, scenario: Scenario, machine: Machine, scheduled_flag: bool) -> CompileKey:
        """The key of `scenario`'s study on `machine`; `scheduled_flag`: the installed
        engine takes `--max-num-scheduled-tokens`."""
        policy = scenario.engine.compile_key
        if policy == VLLM:
            return cls(VLLM)
        defaults = platform_rules(machine)
        seqs = _largest(scenario, "max-num-seqs", defaults)
        capture = None
        if machine.device != "cpu" and not _BLACKWELL.search(machine.gpu_name or "") \
                and seqs is not None:
            capture = min(2 * seqs, CEILING)
        bound = None
        tokens = _values(scenario, "max-num-batched-tokens", defaults)
        if policy == BOUNDED and scheduled_flag and len(set(tokens)) > 1:
            bound = max(tokens)
        return cls(policy, capture, bound, integer(defaults, "max-num-batched-tokens", 0)
                   or None)

    def flags(self, flags: Mapping[str, Any]) -> Flags:
        """The flags a trial of `flags` is launched with beside its own to hold the key
        (its values override the trial's), or {} where nothing applies to it."""
        added: Flags = {}
        if self.policy == VLLM or flags.get("enforce-eager") is True:
            return added
        spec = flags.get("speculative-config")
        tokens = int(spec.get("num_speculative_tokens") or 0) if isinstance(spec, Mapping) else 0
        if self.capture is not None and "compilation-config" not in flags:
            added["compilation-config"] = {CAPTURE: min(self.capture * (1 + tokens), CEILING)}
        unchunked = flags.get("enable-chunked-prefill") is False
        if self.batched_bound is not None and not tokens and not unchunked \
                and SCHEDULED not in flags:
            budget = integer(flags, "max-num-batched-tokens", self.batched_default or 0)
            if budget and budget != self.batched_bound:
                added["max-num-batched-tokens"] = self.batched_bound
                added[SCHEDULED] = budget
        return added


def _values(scenario: Scenario, flag: str, defaults: Mapping[str, Any]) -> list[int]:
    """Every value of `flag` a trial of the study can launch with: the space's, the fixed
    flags', the baselines' and vLLM's own default on the machine."""
    found: list[Any] = [defaults.get(flag)]
    if flag in scenario.engine.flags:
        found = [scenario.engine.flags[flag]]  # fixed for every trial, defaults' included
    param = scenario.space.get(flag)
    if param is not None:
        found += list(_extremes(param))
    found += [b.flags[flag] for b in scenario.baselines if flag in b.flags]
    return [int(v) for v in found if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _largest(scenario: Scenario, flag: str, defaults: Mapping[str, Any]) -> int | None:
    values = _values(scenario, flag, defaults)
    return max(values) if values else None


def _extremes(param: Param) -> Iterable[Any]:
    if param.choices is not None:
        return param.choices
    return (param.low, param.high)
