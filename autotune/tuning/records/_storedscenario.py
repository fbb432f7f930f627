"""The scenario a study stored, read back into the scenario model (`config.Scenario`).

`tune` stores the scenario as plain data; an older autotune's may no longer validate (a
setting renamed, a range narrowed). Such a study must still be shown, so the settings that
fail are left out (each then reads as its default) and the rest is kept; what fails is
also said, for the commands that must run the scenario exactly as stored (`validate`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, MutableSequence, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from autotune.config import Scenario

# Rounds of leaving failing settings out before a stored scenario counts as unreadable.
_ROUNDS = 32


@dataclass(frozen=True)
class StoredScenario:
    """`scenario`: the stored scenario as the model reads it, None where there is none or
    nothing of it validates (no model); `problem`: why it did not validate as stored."""

    scenario: Scenario | None = None
    problem: str | None = None

    @classmethod
    def read(cls, raw: object) -> StoredScenario:
        if not isinstance(raw, Mapping) or not raw:
            return cls()
        data = copy.deepcopy(dict(raw))
        problem = None
        for _ in range(_ROUNDS):
            try:
                return cls(Scenario.model_validate(data), problem)
            except ValidationError as err:
                problem = problem or _words(err)
                if not _drop(data, err.errors()[0]["loc"]):
                    break
        return cls(None, problem)


def _words(err: ValidationError) -> str:
    first = err.errors()[0]
    return f"{'.'.join(str(x) for x in first['loc'])}: {first['msg']}"


def _drop(data: MutableMapping[str, object], loc: Sequence[int | str]) -> bool:
    """Remove the deepest setting of `loc` that `data` has; False where it has none of it
    (a required setting missing, or the scenario as a whole refused)."""
    parent: object = None
    node: object = data
    key: int | str | None = None
    for part in loc:
        if isinstance(node, Mapping) and part in node:
            parent, key, node = node, part, node[part]
        elif isinstance(node, Sequence) and isinstance(part, int) and 0 <= part < len(node):
            parent, key, node = node, part, node[part]
        else:
            break
    if isinstance(parent, MutableMapping) and key is not None:
        del parent[key]
        return True
    if isinstance(parent, MutableSequence) and isinstance(key, int):
        del parent[key]
        return True
    return False
