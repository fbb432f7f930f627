"""Bad input to the `autotune` command: exit 2, one line on stderr, nothing launched.

Every scenario here is invalid, so `autotune tune` stops before any engine is started.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.paths import ROOT

# Far below an engine start-up (minutes on CPU): the command never got that far.
QUICK_S = 30


def autotune(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - t0


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *parts: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("autotune: error: ")
    for part in parts:
        assert part in line
    return line


MODEL = "model: {tiny: tiny}\n"

BAD_SCENARIOS = {
    "unknown-key": (MODEL + "workload: {kind: random, foo: 1}\n", "workload.foo: unknown key"),
    "wrong-type": (MODEL + "budget: {trials: many}\n", "budget.trials:"),
    "empty-range": (MODEL + "space: {max-num-seqs: {low: 64, high: 8}}\n",
                    "space.max-num-seqs: empty range"),
    "kv-int8": (MODEL + "space: {kv-cache-dtype: {choices: [auto, int8]}}\n",
                "space.kv-cache-dtype: 'int8' is not accepted"),
    "mbt-below-seqs": (MODEL + textwrap.dedent("""\
        space:
          max-num-seqs: {choices: [64, 128]}
          max-num-batched-tokens: {low: 16, high: 32}
        """), "max-num-batched-tokens is below max-num-seqs everywhere"),
    "unknown-flag": (MODEL + "engine: {flags: {no-such-flag: 1}}\n",
                     "engine.flags.no-such-flag: "),
    "bad-yaml": (MODEL + "space: [\n", "not valid YAML"),
}


@pytest.mark.parametrize("case", sorted(BAD_SCENARIOS))
def test_tune_on_a_bad_scenario(tmp_path, case):
    text, expected = BAD_SCENARIOS[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    studies = tmp_path / "studies"
    proc, seconds = autotune("tune", str(path), "--studies-dir", str(studies), cwd=tmp_path)
    line = assert_one_line_error(proc, str(path), expected)
    if case == "kv-int8":
        assert "allowed: " in line and "fp8" in line
    # Nothing launched or written: quick, no study database, no study folder.
    assert seconds < QUICK_S
    assert not list(tmp_path.rglob("*.db"))
    assert not studies.exists()


def test_tune_on_a_missing_file(tmp_path):
    path = tmp_path / "missing.yaml"
    studies = tmp_path / "studies"
    proc, seconds = autotune("tune", str(path), "--studies-dir", str(studies), cwd=tmp_path)
    assert_one_line_error(proc, f"{path}: cannot read")
    assert seconds < QUICK_S
    assert not studies.exists()


def test_show_on_a_missing_study(tmp_path):
    studies = tmp_path / "studies"
    proc, _ = autotune("show", "nosuch", "--studies-dir", str(studies), cwd=tmp_path)
    assert_one_line_error(proc, "no study database 'nosuch'")


def test_bench_with_an_unknown_slo(tmp_path):
    proc, seconds = autotune("bench", "--url", "http://127.0.0.1:1", "--slo", "bogus=3",
                             cwd=tmp_path)
    assert_one_line_error(proc, "--slo", "bogus")
    assert seconds < QUICK_S


def test_unknown_option_is_one_line_too(tmp_path):
    proc, _ = autotune("tune", "x.yaml", "--trails", "3", cwd=tmp_path)
    assert_one_line_error(proc, "--trails")


@pytest.mark.parametrize("args, words", [
    (["--slo", "ttft_p95_ms=500"], ["--capacity", "ttft_p95_ms"]),
    (["--capacity", "--slo", "ttft_p42_ms=500"], ["ttft_p42", "p95"]),
    (["--capacity", "--slo", "tpot_p99_ms=0"], ["tpot_p99_ms", "more than 0 ms"]),
    (["--capacity", "--tolerance", "2"], ["tolerance"]),
])
def test_bench_capacity_options(tmp_path, args, words):
    proc, seconds = autotune("bench", "--url", "http://127.0.0.1:1", *args, cwd=tmp_path)
    assert_one_line_error(proc, *words)
    assert seconds < QUICK_S


@pytest.mark.parametrize("args", [["show", "studies/qwen3-4b-h200.db"],
                                  ["show", "studies/qwen3-4b-h200.db", "--json"],
                                  ["export", "studies/qwen3-4b-h200.db", "--format", "k8s"]])
def test_a_reader_that_leaves_early_gets_no_traceback(args):
    """`autotune show ... | head -1`: a closed pipe ends the command quietly."""
    root = ROOT
    proc = subprocess.run(" ".join([sys.executable, "-m", "autotune", *args]) + " | head -c 1",
                          shell=True, cwd=root, capture_output=True, text=True, timeout=120,
                          executable="/bin/bash")
    assert proc.stdout and "Traceback" not in proc.stderr and "Error" not in proc.stderr, \
        proc.stderr
