"""Issue 47, item 1: what vLLM would refuse only after a start-up is refused before anything
is launched or written, as one line naming the file (or the option), the key and what is
allowed, exit 2: a block size the platform's attention kernels do not take, and a Hugging
Face id that is not in the local cache while the hub is off or out of reach.

Each case runs the real `autotune` command (no engine starts: each would take 15-95 s)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from autotune.cli import main as cli
from autotune.engine.info import EngineInfo, engine_info
from tests.cli.test_cli_errors import assert_one_line_error
from tests.cli.test_faults_input import files

MODEL_ID = "nosuchorg/nosuchmodel"
QUICK_S = 15  # a Python start and autotune's imports, no engine, no network wait


@pytest.fixture(scope="module")
def installed() -> EngineInfo:
    """The installed engine's flags, read (and cached for the commands) once here."""
    return engine_info()


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None
        ) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autotune", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})
    return proc, time.monotonic() - t0


def refused(tmp_path: Path, *args: str, expect: tuple[str, ...],
            env: dict[str, str] | None = None) -> str:
    """`autotune ARGS` in tmp_path: one line, exit 2, within seconds, nothing written."""
    before = files(tmp_path)
    proc, seconds = run(tmp_path, *args, env=env)
    line = assert_one_line_error(proc, *expect)
    assert seconds < QUICK_S, seconds
    assert files(tmp_path) == before, "the refused command wrote something"
    return line


# --- a block size the platform does not take ----------------------------------------------


@pytest.mark.parametrize(("text", "key"), [
    ("space: {block-size: {choices: [32, 129]}}\n", "space.block-size"),
    ("engine: {flags: {block-size: 129}}\n", "engine.flags.block-size"),
    ("baselines: [{name: b, flags: {block_size: 129}}]\n", "baselines[0].flags.block-size"),
], ids=["space", "engine-flags", "baseline"])
def test_tune_refuses_a_block_size_the_kernels_do_not_take(tmp_path, installed, text, key):
    (tmp_path / "s.yaml").write_text("model: {tiny: tiny}\n" + text)
    multiple = installed.multiples("block-size")
    assert multiple == ([32] if installed.device == "cpu" else [16])
    line = refused(tmp_path, "tune", "s.yaml", expect=(
        f"s.yaml: {key}: 129 is not accepted by {installed.distribution} {installed.version}",
        f"allowed: a multiple of {multiple[0]}"))
    assert line


def test_tune_refuses_a_block_size_range_that_draws_others(tmp_path, installed):
    (tmp_path / "s.yaml").write_text(
        "model: {tiny: tiny}\nspace: {block-size: {low: 32, high: 256, step: 16}}\n")
    refused(tmp_path, "tune", "s.yaml", expect=("s.yaml: space.block-size: the range draws",
                                                "search `choices`"))


def test_tune_takes_32_and_128(tmp_path, installed, monkeypatch):
    """The checks pass the block sizes the CPU build takes: the study is reached (stubbed
    here: no engine) with them in its space."""
    from autotune.tuning import study

    calls = {}

    def fake_tune(request, **kwargs):
        calls.update(request=request)
        return optuna.create_study(study_name=request.scenario.name)

    monkeypatch.setattr(study, "tune", fake_tune)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(
        "model: {tiny: tiny}\nspace: {block-size: {choices: [32, 128]}}\n"
        "baselines: [{name: b, flags: {block-size: 32}}]\n")
    logger = logging.getLogger("autotune")
    handlers = list(logger.handlers)
    sigterm = signal.getsignal(signal.SIGTERM)  # main() installs its own
    try:
        # Past every check (exit 2 is a refusal); the stub ran no trial, so no answer.
        assert cli.main(["tune", "s.yaml", "--trials", "1"]) != 2
    finally:
        signal.signal(signal.SIGTERM, sigterm)
        for h in set(logger.handlers) - set(handlers):
            logger.removeHandler(h)
            h.close()
    assert calls["request"].scenario.space["block-size"].choices == [32, 128]


def test_bench_refuses_a_block_size_after_the_double_dash(tmp_path, installed, tiny_model):
    line = refused(tmp_path, "bench", "--model", str(tiny_model), "--num-requests", "1",
                   "--", "--enforce-eager", "--block-size", "129",
                   expect=(f"bench: --block-size 129 is not accepted by "
                           f"{installed.distribution} {installed.version}", "a multiple of"))
    assert line
    refused(tmp_path, "bench", "--model", str(tiny_model), "--", "--block_size=129",
            expect=("bench: --block-size 129",))


# --- a model id the engine cannot get ---------------------------------------------------


@pytest.fixture
def offline(tmp_path) -> dict[str, str]:
    """No hub, and an empty Hugging Face cache of the test's own."""
    cache = tmp_path.parent / f"{tmp_path.name}-hf-cache"
    cache.mkdir()
    return {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}


@pytest.mark.parametrize(("command", "where"), [
    (["tune", "s.yaml"], "s.yaml: model.path: "),
    (["tune", "--model", MODEL_ID, "--slo", "e2el_p95_ms=2500"], f"--model {MODEL_ID}: "),
    (["init", "--model", MODEL_ID, "--slo", "e2el_p95_ms=2500"], f"--model {MODEL_ID}: "),
    (["bench", "--model", MODEL_ID, "--num-requests", "1"], f"bench: --model {MODEL_ID}: "),
], ids=["tune-scenario", "tune-model", "init-model", "bench-model"])
def test_an_id_not_in_the_cache_is_refused_offline(tmp_path, offline, command, where):
    """It used to launch an engine for 95 s, print `crashed` and exit 0."""
    (tmp_path / "s.yaml").write_text(f"model: {{path: {MODEL_ID}}}\n")
    refused(tmp_path, *command, env=offline, expect=(
        where, f"{MODEL_ID!r} is not in the local Hugging Face cache ({offline['HF_HUB_CACHE']})",
        "HF_HUB_OFFLINE is set", f"hf download {MODEL_ID}"))


def test_an_id_not_in_the_cache_is_refused_when_the_hub_is_out_of_reach(tmp_path, offline):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "s.yaml").write_text(f"model: {{path: {MODEL_ID}}}\n")
    refused(tmp_path, "tune", "s.yaml", env={
        "HF_HUB_CACHE": offline["HF_HUB_CACHE"], "HF_HUB_OFFLINE": "0",
        "HF_ENDPOINT": f"http://127.0.0.1:{port}"}, expect=(
        "s.yaml: model.path: ", f"the hub (http://127.0.0.1:{port}) cannot be reached"))
