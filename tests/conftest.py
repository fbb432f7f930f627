"""Shared fixtures: the tiny model and a check that no engine process outlives a test."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from autotune import tinymodel


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The cached tiny model (built by `make setup`; built here if missing)."""
    return tinymodel.build(preset="tiny").path


@pytest.fixture(scope="session")
def eager_server(tiny_model, tmp_path_factory):
    """One engine with vLLM's defaults (plus --enforce-eager), shared by tests that only read."""
    from autotune.engine import Server

    log = tmp_path_factory.mktemp("eager") / "engine.log"
    with Server(str(tiny_model), {"enforce-eager": True}, log_path=log) as srv:
        yield srv


def engine_processes() -> list[psutil.Process]:
    """Every vLLM process on the machine started by this test session's user."""
    found = []
    for proc in psutil.process_iter(["cmdline", "name", "ppid"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            name = proc.info["name"] or ""
        except psutil.Error:
            continue
        if proc.pid == os.getpid() or _zombie(proc):
            continue
        if "vllm.entrypoints" in cmd or "vllm serve" in cmd or name.startswith("VLLM::"):
            found.append(proc)
    return found


@pytest.fixture
def no_leftover_engine():
    """Fail the test when a vLLM process it started is still alive afterwards."""
    before = {p.pid for p in engine_processes()}
    yield
    # Orphans of a killed group are reaped by init a moment later: allow a few seconds.
    deadline = time.monotonic() + 10
    while True:
        left = [p for p in engine_processes() if p.pid not in before]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, f"engine processes left behind: {[(p.pid, p.name()) for p in left]}"


def _zombie(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway PostgreSQL server on loopback (the server binaries of the machine)."""
    initdb = shutil.which("initdb") or next(iter(sorted(glob.glob(
        "/usr/lib/postgresql/*/bin/initdb"))), None)
    if initdb is None:
        pytest.skip("PostgreSQL server binaries are not installed (Debian: postgresql)")
    bindir = Path(initdb).resolve().parent
    # Not under pytest's tmp dir: that is private to root, and postgres runs as its own user.
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data = root / "data"
    port = _free_port()
    subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust",
                    "-U", "autotune"], check=True, capture_output=True)
    subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-l",
                    str(root / "server.log"), "-w", "-o",
                    f"-p {port} -h 127.0.0.1 -k {root}", "start"], check=True,
                   capture_output=True)
    try:
        yield f"postgresql+psycopg://autotune@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
