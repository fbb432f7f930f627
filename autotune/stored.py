"""Typed records that a study keeps as JSON objects (a trial's measures, quality, start-up,
capacity): read from any record version, written back exactly as they were read.

`from_dict` ignores keys it does not know and leaves missing ones at their defaults, so a
study written by an older autotune still reads; it also notes which keys it read, so that
`as_dict` gives back that very object (same keys, same order): copying or showing a record
never adds a key its study did not store. A class that names a `KEPT` field keeps the keys
it does not know there instead of ignoring them, and writes them back in their places. A
record made in code has every field, and the computed ones its class names in `EXTRA`
(stored for readers of the study that do not compute them), less those that are None where
its class is `SPARSE`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

R = TypeVar("R", bound="Stored")


@dataclass(frozen=True)
class Stored:
    """Base of a stored record; `NESTED` names the fields that hold records of their own (a
    tuple of them where the stored value is a list), `KEYED` those that hold a mapping of
    names to records; `EXTRA` the computed attributes written beside the fields; `SPARSE`
    leaves a None field out of a record made in code (a kind of record that has no such
    thing, as records of the class were always written); `EMPTY` names the record fields
    stored as `{}` when there is none (read back as None); `KEPT` names the mapping field
    that keeps the stored keys the class does not name (None: they are dropped)."""

    # The keys `from_dict` read, in their order; None for a record made in code.
    read: tuple[str, ...] | None = field(default=None, kw_only=True, compare=False, repr=False)
    NESTED: ClassVar[Mapping[str, type[Stored]]] = {}
    KEYED: ClassVar[Mapping[str, type[Stored]]] = {}
    EXTRA: ClassVar[tuple[str, ...]] = ()
    SPARSE: ClassVar[bool] = False
    EMPTY: ClassVar[tuple[str, ...]] = ()
    KEPT: ClassVar[str | None] = None

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
        names = {f.name for f in dataclasses.fields(cls)} - {"read", cls.KEPT}
        found = {k: _keyed(cls.KEYED[k], v) if k in cls.KEYED else _read(cls.NESTED.get(k), v)
                 for k, v in data.items() if k in names and not (k in cls.EMPTY and v == {})}
        if cls.KEPT is not None:
            found[cls.KEPT] = {k: v for k, v in data.items() if k not in names}
        return cls(**found, read=tuple(k for k in data if k in names or k in cls.EXTRA
                                       or cls.KEPT is not None))

    def as_dict(self) -> dict[str, Any]:
        kept: Mapping[str, Any] = getattr(self, self.KEPT) if self.KEPT is not None else {}
        keys = self.read if self.read is not None else \
            [f.name for f in dataclasses.fields(self) if f.name not in ("read", self.KEPT)
             and not (self.SPARSE and getattr(self, f.name) is None)] + list(self.EXTRA) \
            + list(kept)
        out = {k: json_data(kept[k] if k in kept else getattr(self, k)) for k in keys}
        out.update((k, {}) for k in self.EMPTY if k in out and out[k] is None)
        return out


def _read(kind: type[Stored] | None, value: Any) -> Any:
    if kind is None:
        return value
    if isinstance(value, list):
        return tuple(kind.from_dict(v) for v in value)
    return kind.from_dict(value) if isinstance(value, Mapping) else value


def _keyed(kind: type[Stored], value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    return {k: kind.from_dict(v) if isinstance(v, Mapping) else v for k, v in value.items()}


def json_data(value: Any) -> Any:
    """`value` as the JSON data it stands for: a stored record by its own `as_dict`, any
    other dataclass as its fields (and the computed attributes its class names in
    `EXTRA`), containers item by item; anything else as it is. The one conversion to
    plain data, for records and for `--json` alike."""
    if isinstance(value, Stored):
        return value.as_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: json_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
        out.update((name, json_data(getattr(value, name))) for name in getattr(value, "EXTRA", ()))
        return out
    if isinstance(value, (tuple, list)):
        return [json_data(v) for v in value]
    if isinstance(value, dict):
        return {k: json_data(v) for k, v in value.items()}
    return value
