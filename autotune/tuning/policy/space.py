"""The search space: scenario ranges -> Optuna suggestions -> vLLM flags.

Also checks a scenario against the installed engine's flags and choices before
anything is launched, and the relations between flags that vLLM enforces at
start-up (so such configurations are pruned without paying for a launch).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._flags import Flags, FlagValue, integer
from autotune.config import FlagSite, Param, Scenario, flag_sites
from autotune.engine.info import EngineInfo, FlagInfo, multiples_text
from autotune.errors import ConfigError

if TYPE_CHECKING:  # a refused scenario is told without importing Optuna
    import optuna

SPEC_TOKENS = "num_speculative_tokens"
SPEC_METHOD = "speculative_method"
LOOKUP = ("prompt_lookup_max", "prompt_lookup_min")  # ngram's searchable window


def suggest(trial: optuna.trial.BaseTrial, scenario: Scenario) -> Flags:
    """Flags for one trial: the fixed engine flags plus one point of the space (a
    `FixedTrial` gives the flags of known parameters)."""
    flags = dict(scenario.engine.flags)
    for name, p in scenario.space.items():
        flags[name] = _suggest(trial, name, p)
    spec = scenario.speculative
    if spec is not None:
        tokens = int(_suggest(trial, SPEC_TOKENS, spec.num_speculative_tokens))
        if tokens > 0:  # conditional: a method only when speculation is on
            method = trial.suggest_categorical(SPEC_METHOD, spec.methods)
            config = {"method": method, SPEC_TOKENS: tokens, **spec.extra}
            for key in LOOKUP if method == "ngram" else ():
                p = getattr(spec, key)
                if p is not None:
                    config[key] = int(_suggest(trial, key, p))
            flags["speculative-config"] = config
    return flags


def _suggest(trial: optuna.trial.BaseTrial, name: str, p: Param) -> Any:
    if p.choices is not None:
        return trial.suggest_categorical(name, p.choices)
    assert p.low is not None and p.high is not None
    if p.type == "int":
        return trial.suggest_int(name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
    return trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)


def grid(scenario: Scenario) -> dict[str, list[Any]]:
    """The search space as lists, for the grid sampler (ranges need a step)."""
    out: dict[str, list[Any]] = {}
    for name, p in scenario.space.items():
        if p.choices is not None:
            out[name] = list(p.choices)
        elif p.step is None and p.type == "float":
            raise ConfigError(f"space.{name}: the grid sampler needs a `step` for float ranges")
        else:
            assert p.low is not None and p.high is not None
            step = p.step or 1
            # Like Optuna's own ranges: the last value is the highest step not above `high`.
            n = math.floor((p.high - p.low) / step + 1e-9) + 1
            values = [round(p.low + i * step, 12) for i in range(n)]  # 0.3, not 0.300..04
            out[name] = [int(v) for v in values] if p.type == "int" else values
    if scenario.speculative is not None:
        raise ConfigError("speculative: the grid sampler does not take conditional parameters")
    return out


def relation_violation(flags: Mapping[str, FlagValue]) -> str | None:
    """Why vLLM would refuse this combination at start-up, or None."""
    seqs, mbt = flags.get("max-num-seqs"), flags.get("max-num-batched-tokens")
    mbt_tokens = None if mbt is None else _tokens(mbt)
    if seqs is not None and mbt_tokens is not None and \
            mbt_tokens < integer(flags, "max-num-seqs", 0):
        return f"max-num-batched-tokens {mbt} < max-num-seqs {seqs}"
    spec = flags.get("speculative-config")
    if isinstance(spec, dict) and isinstance(spec.get("prompt_lookup_min"), int) and \
            isinstance(spec.get("prompt_lookup_max"), int) and \
            spec["prompt_lookup_min"] > spec["prompt_lookup_max"]:
        return (f"prompt_lookup_min {spec['prompt_lookup_min']} > prompt_lookup_max "
                f"{spec['prompt_lookup_max']}")
    mml = flags.get("max-model-len")
    mml_tokens = None if mml is None else _tokens(mml)
    if flags.get("enable-chunked-prefill") is False and mbt_tokens is not None \
            and mml_tokens is not None and mbt_tokens < mml_tokens:
        return f"max-num-batched-tokens {mbt} < max-model-len {mml} without chunked prefill"
    return None


def _tokens(value: Any) -> int | None:
    """A token count as vLLM's `human_readable_int` reads it (4k = 4000, 4K = 4096), or None
    where it is not a count (`auto`) or vLLM itself would refuse it (`1.5K`)."""
    text = str(value).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT])", text)
    if m:
        number, suffix = m.groups()
        if suffix.islower():
            return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
        return int(number) * 1024 ** ("KMGT".index(suffix) + 1) if number.isdigit() else None
    try:
        return int(text)
    except ValueError:
        return None


def check_against_engine(scenario: Scenario, info: EngineInfo, path: str | Path) -> None:
    """Every flag the scenario sets must exist in the installed engine, with a value its
    parser takes: one of its choices, a number where it converts to one, true/false for an
    on/off flag; and a multiple of what the device's attention kernels take for
    --block-size (`EngineInfo.multiples`), which the parser does not check. Checked before
    any launch: vLLM refuses a bad value only at start-up, where it costs an engine start
    and reads as a pruned `invalid_flag` trial."""
    sites = flag_sites(scenario)
    if scenario.speculative is not None:
        sites.append(FlagSite("speculative", "speculative-config", [], False))
    engine = f"{info.distribution} {info.version}"
    for site in sites:
        bare = site.name.removeprefix("no-")
        if not info.knows(site.name):
            raise ConfigError(f"{path}: {site.key}: {engine} has no flag --{bare}")
        flag = info.flags.get(bare, FlagInfo())
        problem = _range_problem(scenario.space[site.name], flag, info.multiples(bare)) \
            if site.is_range else None
        if problem:
            raise ConfigError(f"{path}: {site.key}: {problem}")
        for value in [] if site.is_range else site.values:
            problem = _value_problem(value, flag) or info.multiple_problem(bare, value)
            if problem:
                raise ConfigError(f"{path}: {site.key}: {value!r} is not accepted by "
                                  f"{engine}; {problem}")


def _range_problem(p: Param, flag: FlagInfo, multiples: list[int] | None = None
                   ) -> str | None:
    """Why a searched range cannot be passed to this flag, or None."""
    if flag.boolean:
        return "an on/off flag is searched with `choices: [true, false]`, not a range"
    if flag.type == "int" and p.type != "int":
        return "the flag takes whole numbers: give `low`, `high` and `step` as integers"
    if multiples and p.low is not None and p.high is not None:
        # Every value the range can draw must be a multiple: its low end and its step.
        low, step = int(p.low), int(p.step or 1)
        fixed = p.low == p.high
        if not any(low > 0 and low % b == 0 and (fixed or (not p.log and step % b == 0))
                   for b in multiples):
            return (f"the range draws values the engine refuses (allowed: "
                    f"{multiples_text(multiples)}); search `choices`, or a range whose "
                    "`low` and `step` are such multiples")
    return None


def _value_problem(value: Any, flag: FlagInfo) -> str | None:
    """Why the engine's parser would refuse `value` (as `flags.to_args` writes it), or None."""
    if isinstance(value, bool):
        # True becomes `--x` and False `--no-x`: only an on/off flag (or one that takes
        # no value) reads them; a flag with a typed value would miss its argument.
        return None if flag.boolean or flag.type is None else "it takes a value, not true/false"
    if flag.boolean:
        return "allowed: true, false"
    if flag.choices and str(value) not in flag.choices:
        return f"allowed: {', '.join(flag.choices)}"
    if flag.type == "int" and (isinstance(value, float) or not _parses(int, value)):
        return "it takes a whole number"
    if flag.type == "float" and not _parses(float, value):
        return "it takes a number"
    return None


def _parses(convert: Any, value: Any) -> bool:
    try:
        convert(str(value))
    except ValueError:
        return False
    return True
