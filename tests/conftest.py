"""Shared fixtures: the tiny model and a check that no engine process outlives a test."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from autotune import tinymodel


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The cached tiny model (built by `make setup`; built here if missing)."""
    return tinymodel.build(preset="tiny").path


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
