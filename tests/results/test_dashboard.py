"""optuna-dashboard on a real study database: started as a user would (`optuna-dashboard
sqlite:///...`), it serves the same trials, states and values through its HTTP API."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import optuna
import pytest

pytestmark = [pytest.mark.engine]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> dict:
    """GET a JSON document, waiting for the server to come up (and failing if it died)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, ConnectionError):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_dashboard_serves_the_study(cpu_study, tmp_path):
    db = tmp_path / "study.db"  # a copy: the dashboard may write its own bookkeeping
    shutil.copy(cpu_study.root / "engine-test.db", db)
    url = f"sqlite:///{db}"
    st = optuna.load_study(study_name="engine-test", storage=url)
    port = _free_port()
    exe = Path(sys.executable).with_name("optuna-dashboard")
    with open(tmp_path / "dashboard.log", "wb") as log:
        proc = subprocess.Popen([str(exe), url, "--host", "127.0.0.1", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/api/studies"
        (summary,) = _get(base, proc)["study_summaries"]
        assert summary["study_name"] == "engine-test"
        assert summary["directions"] == ["maximize"]
        detail = _get(f"{base}/{summary['study_id']}", proc)
        trials = sorted(detail["trials"], key=lambda t: t["number"])
        assert len(trials) == len(st.trials) == 3
        for got, want in zip(trials, st.trials, strict=True):
            assert got["state"] == want.state.name.capitalize()
            assert got.get("values") == want.values
            attrs = {a["key"]: a["value"] for a in got["user_attrs"]}
            assert attrs.get("baseline") == want.user_attrs.get("baseline")
            assert attrs["outcome"] == want.user_attrs["outcome"]
        assert [t["number"] for t in detail["best_trials"]] == [st.best_trial.number]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode is not None
