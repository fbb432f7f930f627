"""`autotune dashboard`: optuna-dashboard over a study, naming the best trial as `show` does.

On its own optuna-dashboard names as best the completed trial with the highest value,
constraints ignored (docs/architecture.md, "The read side"), and cuts user attributes at
1,024 characters, breaking `metrics` and `quality`. This serves the same WSGI application
with its JSON answers corrected: a study's `best_trials` is autotune's choice
(`ranking.feasible_best`, or the feasible Pareto set; none while nothing is feasible), and
every trial carries its record's short scalars (`TrialRecord.scalars`) as attributes, also
for older studies. Nothing is written to the study.
"""

from __future__ import annotations

import json
import numbers
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import optuna

from autotune.errors import ConfigError
from autotune.results import show
from autotune.stored import Stored, json_data
from autotune.tuning import ranking
from autotune.tuning.records.snapshot import records

DETAIL = re.compile(r"/api/studies/(\d+)")
PREFIX = "autotune:"  # the added attributes, apart from the stored ones

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def best_numbers(study: optuna.Study) -> list[int]:
    """What `autotune show` names best: one trial (weighted studies) or the feasible Pareto
    set; empty while no trial is feasible."""
    if len(study.directions) == 1:
        best = ranking.feasible_best(study)
        return [best.number] if best is not None else []
    return sorted(t.number for t in study.best_trials)  # Optuna's: feasible trials only


def attributes(study: optuna.Study) -> dict[int, dict[str, object]]:
    """Per trial number, the short scalars the dashboard shows (prefixed `autotune:`), with
    the outcome and reason as `autotune show` words them (`infeasible`, `quality (drift
    0.125)`)."""
    out = {}
    for r in records(study):
        values = {**r.scalars(), "outcome": show.outcome(r), "reason": show.reason(r)}
        out[r.number] = {f"{PREFIX}{k}": v for k, v in values.items() if v not in (None, "")}
    return out


def _text(value: Any) -> str:
    """An attribute as the dashboard's serializer writes one (numbers and booleans by
    `str`, strings bare, anything else as JSON)."""
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, numbers.Real) else json.dumps(value)


# optuna-dashboard's JSON, read at the boundary: what this module reads of a study detail
# (`serialize_study_detail`) as typed records; what it changes is written back into the
# JSON objects as they came, so that every key it does not read passes through unchanged.


@dataclass(frozen=True)
class Attribute(Stored):
    """A user attribute as the dashboard serialises one: its name and its text."""

    key: str = ""
    value: str = ""


@dataclass(frozen=True)
class Column(Stored):
    """A user attribute the trials table offers as a column, and whether it sorts."""

    key: str = ""
    sortable: bool = False


@dataclass(frozen=True)
class Trial(Stored):
    """A trial of a study detail: its number (its attributes: `_attributes`)."""

    number: int = -1


# The key under which a trial's object keeps its user attributes (each an `Attribute`): read
# by `_attributes`, not as a field, since only the record modules read a trial's attributes
# by that name (tests/project/test_layers.py).
ATTRIBUTES = "user_attrs"


@dataclass(frozen=True)
class Detail(Stored):
    """A study detail (`/api/studies/<id>`): the study's name, its trials' JSON objects
    (each read as a `Trial`) and the attribute columns."""

    NESTED = {"union_user_attrs": Column}

    name: str = ""
    trials: list[dict[str, object]] = field(default_factory=list)
    union_user_attrs: tuple[Column, ...] = ()


def amend(detail: dict[str, object], study: optuna.Study) -> dict[str, object]:
    """A study detail as optuna-dashboard serialised it, with every trial's short scalars
    as attributes (and their names in the union the trials table offers as columns)."""
    extra = attributes(study)
    read = Detail.from_dict(detail)
    have = {c.key for c in read.union_user_attrs}
    added = tuple(Column(key, all(_sortable(a[key]) for a in extra.values() if key in a))
                  for key in sorted({k for a in extra.values() for k in a} - have))
    return {**detail, "trials": [_add(t, extra) for t in read.trials],
            "union_user_attrs": json_data(read.union_user_attrs + added)}


def _sortable(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _add(trial: dict[str, object], extra: Mapping[int, Mapping[str, Any]]) -> dict[str, object]:
    """`trial`'s JSON object with the short scalars of its number in `extra` added as
    attributes (those it already has kept)."""
    shown = _attributes(trial)
    have = {a.key for a in shown}
    added = tuple(Attribute(k, _text(v))
                  for k, v in extra.get(Trial.from_dict(trial).number, {}).items()
                  if k not in have)
    return {**trial, ATTRIBUTES: json_data(shown + added)}


def _attributes(trial: Mapping[str, Any]) -> tuple[Attribute, ...]:
    return tuple(Attribute.from_dict(a) for a in trial.get(ATTRIBUTES) or ())


def _by_number(trials: Iterable[dict[str, object]]) -> dict[int, dict[str, object]]:
    return {Trial.from_dict(t).number: t for t in trials}


class View:
    """optuna-dashboard's WSGI application, its study answers amended (see the module)."""

    def __init__(self, url: str):
        from optuna_dashboard import wsgi

        self.storage = optuna.storages.RDBStorage(url)
        self.app = wsgi(self.storage)
        self.lock = threading.Lock()

    def _study(self, name: str) -> optuna.Study:
        return optuna.load_study(study_name=name, storage=self.storage)

    def _call(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        started: list[tuple[str, list[tuple[str, str]]]] = []  # start_response's arguments

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None
                  ) -> Callable[[bytes], None]:
            started.append((status, headers))
            return lambda _: None

        body = b"".join(self.app(environ, start))
        status, headers = started[-1]
        return status, headers, body

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "GET" or not DETAIL.fullmatch(path):
            return self.app(environ, start_response)
        status, headers, body = self._call(environ)
        if status.startswith("200"):
            detail = json.loads(body)
            with self.lock:
                study = self._study(Detail.from_dict(detail).name)
                detail = amend(detail, study)
                wanted = best_numbers(study)
            by_number = _by_number(Detail.from_dict(detail).trials)
            if any(n not in by_number for n in wanted):  # a tail (`?after=N`): ask for all
                fresh = {k: v for k, v in environ.items() if not k.startswith("bottle.")}
                _, _, tail = self._call({**fresh, "QUERY_STRING": ""})
                whole = Detail.from_dict(json.loads(tail))
                missing = [t for n, t in _by_number(whole.trials).items()
                           if n in wanted and n not in by_number]
                if missing:
                    with self.lock:
                        extra = attributes(study)
                    by_number.update(_by_number(_add(t, extra) for t in missing))
            body = json.dumps({**detail, "best_trials": [by_number[n] for n in wanted
                                                         if n in by_number]}).encode()
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"] + \
                [("Content-Length", str(len(body)))]
        start_response(status, headers)
        return [body]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        return None


class _Threaded(ThreadingMixIn, WSGIServer):
    """One thread per request: the page loads its script while it polls the API."""

    daemon_threads = True


def app(url: str) -> View:
    """The amended dashboard for the studies at storage `url` (a WSGI application); needs
    the `dashboard` extra (optuna-dashboard)."""
    return View(url)


def serve(url: str, host: str, port: int, ready: Callable[[str], None] | None = None) -> None:
    """Serve the amended dashboard until interrupted."""
    view = app(url)
    try:
        server = make_server(host, port, view, server_class=_Threaded, handler_class=_Quiet)
    except OSError as err:
        raise ConfigError(f"dashboard: cannot listen on {host}:{port}: "
                          f"{err.strerror or err}") from None
    with server:
        if ready is not None:
            ready(f"http://{host}:{server.server_port}/dashboard/")
        server.serve_forever()
