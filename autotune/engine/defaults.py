"""What vLLM uses for a flag left unset, on the machine a study ran on.

The parser's defaults are only part of the answer. vLLM's parser leaves max-num-seqs,
max-num-batched-tokens, block size, prefix caching and async scheduling unset (None) and
decides them while starting: from the platform (max-num-seqs 1024 on a GPU of 70 GiB or more
that is not an A100, 256 below, 128 on the CPU build) and from the configuration (async
scheduling is turned off with ngram speculation; the attention backend picks the block
size). A flag set to the value the engine would have used anyway changes nothing: it must not
count as an override when ties are broken, nor be shipped in an export as if it mattered.

Three sources, later ones winning: the parser's defaults (`info.EngineInfo`, recorded with
the study), the platform rules below (read from `EngineArgs.get_batch_defaults` of vLLM
0.26-0.32 for the OpenAI server), and what an engine that left the flag unset said at
start-up (`log.StartupFigures`): those are facts of that engine on that machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune._device import DeviceSeen
from autotune._flags import Flags
from autotune.engine.log import StartupFigures

PARSER, PLATFORM, STARTUP = "parser", "platform", "start-up"
GIB_MIB = 1024


@dataclass(frozen=True)
class Machine:
    """What the platform rules depend on: the device kind ("cuda" or "cpu"), the GPU's name
    and total memory, and the engines' world size (tensor x pipeline parallel)."""

    device: str
    gpu_name: str | None = None
    memory_mib: float | None = None
    world_size: int = 1


def platform_rules(m: Machine) -> Flags:
    """vLLM's own defaults for the OpenAI server on `m`, where the parser says nothing."""
    ws = max(1, m.world_size)
    if m.device == "cpu":
        seqs, tokens = 128 * ws, 2048 * ws
    else:
        gib = (m.memory_mib or 0.0) / GIB_MIB
        if gib >= 160:
            seqs, tokens = 1024, 16384
        elif gib >= 70 and "a100" not in (m.gpu_name or "").lower():
            seqs, tokens = 1024, 8192
        else:
            seqs, tokens = 256, 2048
    # V1 turns prefix caching on for every model that supports it; a model that does not
    # says so at start-up, and that fact wins. One API server without data parallelism.
    return {"max-num-seqs": seqs, "max-num-batched-tokens": tokens,
            "enable-prefix-caching": True, "api-server-count": 1}


def machine_of(device: DeviceSeen, world_size: int = 1) -> Machine:
    """The machine a trial record's `device` names (`cpu` on the CPU build)."""
    if device.name == "cpu":
        return Machine("cpu", world_size=world_size)
    return Machine("cuda", device.name, device.memory_mib, world_size)


# Start-up figures that say which value an engine used for a flag it was not given.
FACTS = {"async-scheduling": "async_scheduling", "block-size": "block_size",
         "max-num-batched-tokens": "max_num_batched_tokens",
         "enable-prefix-caching": "prefix_caching"}
# Flags that change what the engine decides for another one: an engine that set them does
# not tell what the default is (ngram speculation turns async scheduling off).
_CHANGES = {"async-scheduling": ("speculative-config",),
            "block-size": ("kv-cache-dtype", "attention-backend"),
            "max-num-batched-tokens": ("max-model-len", "enable-chunked-prefill")}


def startup_facts(flags: Mapping[str, Any], startup: StartupFigures) -> Flags:
    """What an engine launched with `flags` says it used for the flags in `FACTS` that it
    was not given (and that nothing it was given changes)."""
    out: Flags = {}
    for flag, attr in FACTS.items():
        value = getattr(startup, attr, None)
        if value is None or flag in flags or any(f in flags for f in _CHANGES.get(flag, ())):
            continue
        out[flag] = value
    return out


def same(a: Any, b: Any) -> bool:
    """Whether two flag values mean the same to vLLM: 0.9 and 0.90, 16 and 16.0, True and
    "true" (YAML and the command line spell them differently)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return _truth(a) is not None and _truth(a) == _truth(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, str) and isinstance(b, (int, float)) or \
            isinstance(b, str) and isinstance(a, (int, float)):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9)
        except ValueError:
            return False
    return bool(a == b)


def _truth(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None


@dataclass(frozen=True)
class Effective:
    """vLLM's effective defaults on one machine: each flag's value and where it was learnt
    (`PARSER`, `PLATFORM` or `STARTUP`)."""

    values: Flags = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, parser: Mapping[str, Any], rules: Mapping[str, Any] = {},
           facts: Mapping[str, Any] = {}) -> Effective:
        values: Flags = {}
        sources: dict[str, str] = {}
        for source, found in ((PARSER, parser), (PLATFORM, rules), (STARTUP, facts)):
            for k, v in found.items():
                if v is not None:
                    values[k], sources[k] = v, source
        return cls(values, sources)

    def is_default(self, flag: str, value: Any) -> bool:
        return flag in self.values and same(self.values[flag], value)

    def overrides(self, flags: Mapping[str, Any]) -> Flags:
        """The flags that change something: those not set to the effective default."""
        return {k: v for k, v in flags.items() if not self.is_default(k, v)}

    def left_out(self, flags: Mapping[str, Any]) -> Flags:
        """The flags set to what vLLM uses anyway."""
        return {k: v for k, v in flags.items() if self.is_default(k, v)}

    def words(self, flags: Mapping[str, Any]) -> str:
        """`max-num-seqs 1024 (platform), async-scheduling True (start-up)`: the values of
        `flags` left out as defaults, and how each is known."""
        return ", ".join(f"{k} {v} ({self.sources[k]})" for k, v in self.left_out(flags).items())
