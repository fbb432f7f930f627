"""`autotune dashboard`: optuna-dashboard over a study, naming the best trial as `show` does.

optuna-dashboard reads any Optuna storage, but on its own it names as best the completed
trial with the highest value (`storage.get_best_trial`), constraints ignored: on the H200
chat study that is #15, whose fp8 KV cache failed the quality guardrail. Optuna's named
constraints do not change that (the dashboard draws them, it does not rank by them). And it
cuts every user attribute at 1,024 characters, so `metrics` and `quality` arrive as broken
JSON.

This module serves the same dashboard (its own WSGI application, unchanged) with two
corrections made on its JSON answers:

- `best_trials` of a study is autotune's choice: the best feasible trial with ties broken
  towards fewer overrides (`ranking.feasible_best`, what `autotune show` prints), or in
  Pareto studies the feasible Pareto set; none while no trial is feasible;
- every trial carries the short scalars of its record (`TrialRecord.scalars`: feasible,
  capacity, gain, outcome, reason, drift, bottleneck, ...) as attributes, also for studies
  written before the record stored them.

Nothing is written to the study.
"""

from __future__ import annotations

import json
import numbers
import re
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import optuna

from autotune.errors import ConfigError
from autotune.results import show
from autotune.tuning import ranking
from autotune.tuning.record import records

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


def attributes(study: optuna.Study) -> dict[int, dict[str, Any]]:
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


def amend(detail: dict[str, Any], study: optuna.Study) -> dict[str, Any]:
    """A study detail as optuna-dashboard serialised it, with every trial's short scalars
    as attributes (and their names in the union the trials table offers as columns)."""
    extra = attributes(study)
    for t in detail.get("trials", []):
        _add(t, extra.get(t["number"], {}))
    keys = {k for attrs in extra.values() for k in attrs}
    union = detail.setdefault("union_user_attrs", [])
    have = {u.get("key") for u in union}
    for key in sorted(keys - have):
        numeric = all(isinstance(a.get(key), int | float) and not isinstance(a.get(key), bool)
                      for a in extra.values() if key in a)
        union.append({"key": key, "sortable": numeric})
    return detail


def _add(trial: dict[str, Any], extra: dict[str, Any]) -> None:
    attrs = trial.setdefault("user_attrs", [])
    have = {a["key"] for a in attrs}
    attrs.extend({"key": k, "value": _text(v)} for k, v in extra.items() if k not in have)


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
        got: dict[str, Any] = {}

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None
                  ) -> Callable[[bytes], None]:
            got.update(status=status, headers=headers)
            return lambda _: None

        body = b"".join(self.app(environ, start))
        return got["status"], got["headers"], body

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "GET" or not DETAIL.fullmatch(path):
            return self.app(environ, start_response)
        status, headers, body = self._call(environ)
        if status.startswith("200"):
            detail = json.loads(body)
            with self.lock:
                study = self._study(detail["name"])
                amend(detail, study)
                wanted = best_numbers(study)
            by_number = {t["number"]: t for t in detail.get("trials", [])}
            if any(n not in by_number for n in wanted):  # a tail (`?after=N`): ask for all
                fresh = {k: v for k, v in environ.items() if not k.startswith("bottle.")}
                _, _, whole = self._call({**fresh, "QUERY_STRING": ""})
                for t in json.loads(whole).get("trials", []):
                    if t["number"] in wanted and t["number"] not in by_number:
                        with self.lock:
                            _add(t, attributes(study).get(t["number"], {}))
                        by_number[t["number"]] = t
            detail["best_trials"] = [by_number[n] for n in wanted if n in by_number]
            body = json.dumps(detail).encode()
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
