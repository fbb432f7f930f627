"""Turn a mapping of vLLM launch flags into command-line arguments, and into one key.

Pure functions, so that the scenario file, the study database, the export
formats and the launched command all agree on what a configuration means:
`to_args` spells it for `vllm serve`, `flags_key` names it as one string (which
trials ran the same configuration).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeAlias

# A flag's value as a scenario, a study and `vllm serve` spell it: a switch, a number, a
# word, a JSON object (`--speculative-config`) or a list (an option given more than once).
FlagValue: TypeAlias = bool | int | float | str | list[Any] | dict[str, Any]
# Launch flags by canonical name (`max-num-seqs`, no dashes in front).
Flags: TypeAlias = dict[str, FlagValue]


def flag_name(key: str) -> str:
    """Canonical long-option spelling: `max_num_seqs` and `--max-num-seqs` -> `max-num-seqs`."""
    return key.strip().lstrip("-").replace("_", "-")


def normalize(flags: Mapping[str, Any]) -> Flags:
    """Flags keyed by canonical name, `None` values dropped, insertion order kept."""
    out: Flags = {}
    for key, value in flags.items():
        name = flag_name(key)
        if not name:
            raise ValueError(f"empty flag name in {dict(flags)!r}")
        if name in out:
            raise ValueError(f"flag --{name} given twice (as {key!r} and another spelling)")
        if value is not None:
            out[name] = value
    return out


def flags_key(flags: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> str:
    """One string per configuration, for finding twins; with `defaults` (vLLM's parser
    defaults the study recorded) filled in, so that `{}` and an explicit default are one."""
    return json.dumps({**(defaults or {}), **normalize(dict(flags))}, sort_keys=True,
                      default=str)


def integer(flags: Mapping[str, FlagValue], name: str, default: int) -> int:
    """The whole number flag `name` is set to (`default` where it is unset): a switch, a
    list or a JSON object where a number belongs is a ValueError naming the flag."""
    value = _plain(flags, name, "a whole number")
    return default if value is None else int(value)


def number(flags: Mapping[str, FlagValue], name: str, default: float) -> float:
    """The number flag `name` is set to (`default` where it is unset), checked as `integer`."""
    value = _plain(flags, name, "a number")
    return default if value is None else float(value)


def text(flags: Mapping[str, FlagValue], name: str) -> str | None:
    """The word flag `name` is set to (a path, a revision), or None where it is unset."""
    value = _plain(flags, name, "a single value")
    return None if value is None else str(value)


def _plain(flags: Mapping[str, FlagValue], name: str, takes: str) -> int | float | str | None:
    value = flags.get(name)
    if isinstance(value, (bool, list, dict)):
        raise ValueError(f"flag --{name} takes {takes}, not {value!r}")
    return value


def to_args(flags: Mapping[str, Any]) -> list[str]:
    """Arguments for `vllm serve`.

    `True` -> `--x`, `False` -> `--no-x` (vLLM's BooleanOptionalAction), a dict
    -> compact JSON (`--speculative-config`), a list -> the option followed by
    each item, `None` -> omitted, anything else -> `str(value)`.
    """
    args: list[str] = []
    for name, value in normalize(flags).items():
        if value is True:
            args.append(f"--{name}")
        elif value is False:
            args.append(f"--no-{name}")
        elif isinstance(value, Mapping):
            args += [f"--{name}", json.dumps(dict(value), separators=(",", ":"), sort_keys=True)]
        elif isinstance(value, (list, tuple)):
            if not value:
                raise ValueError(f"flag --{name} has an empty list")
            args += [f"--{name}", *(_scalar(name, v) for v in value)]
        else:
            args += [f"--{name}", _scalar(name, value)]
    return args


def _scalar(name: str, value: Any) -> str:
    if isinstance(value, (Mapping, list, tuple)):
        raise ValueError(f"flag --{name}: nested value {value!r} is not supported")
    if isinstance(value, float):
        return repr(value)
    return str(value)
