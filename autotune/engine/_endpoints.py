"""The server's own HTTP endpoints, as the launcher asks them: `/health`, any text page
(`/metrics`, `/v1/models`) and one real completion.

`autotune.engine.server.Server` waits on these while an engine starts (`/health` answers
before the engine can serve, so readiness is one completed token) and reads `/metrics`
once it is ready. Every probe answers None or False when the server does not answer,
whatever the reason (refused, reset, timed out): a server that is not up yet is the normal
case while waiting, and its death is reported by `liveness`, not by these.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping


def status(url: str, timeout: float = 5.0) -> int | None:
    """The HTTP status of a GET of `url` without credentials (`/health` needs none); None
    when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except (urllib.error.URLError, OSError):
        return None


def text(url: str, headers: Mapping[str, str], timeout: float = 5.0) -> str | None:
    """The body of a GET of `url`; None when it does not answer 200."""
    req = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read().decode(errors="replace") if resp.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None


def completes(base_url: str, model: str, headers: Mapping[str, str],
              timeout: float = 60.0) -> bool:
    """Whether the server at `base_url` completes one real token of `model`."""
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 1,
                       "temperature": 0}).encode()
    req = urllib.request.Request(base_url + "/v1/completions", data=body, method="POST",
                                 headers={**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False
