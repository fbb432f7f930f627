"""The terminal: tables readable at 80 columns, `tune` saying what it does from its first
second (and where its logs are), one meaning of `--json` (the result on stdout) for every
command, and a README that lists every command."""

from __future__ import annotations

import argparse
import io
import json
import logging
import re

import pytest
from rich.console import Console

from autotune.cli.main import build_parser, main
from autotune.results import show, views
from autotune.results.summary import Summary
from tests.paths import ROOT

H200 = ROOT / "studies" / "qwen3-4b-h200.db"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_show_is_readable_at_80_columns():
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False, color_system=None)
    data = Summary.of(show.open_existing(str(H200)))
    views.print_summary(data, console)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    text = out.getvalue()
    for r in data.trials:  # one line per trial with its outcome, figures unbroken
        line = next(ln for ln in lines if ln.startswith(f"#{r.number} "))
        assert r.outcome in line
        if r.gain is not None and r.tied_with_best is None:
            assert f"{r.gain:+.1%}" in line
    # Flags are words, never cut inside: every flag of every trial appears whole.
    words = set(text.split())
    for r in data.trials:
        for flag in r.flags:
            assert any(w.startswith(f"{flag}=") or w.rstrip(";") in (flag, f"no-{flag}")
                       for w in words), flag
    assert "tied (#8)" in text  # within noise of the best (#8: fewest real overrides)


def test_tune_narrates_from_the_first_second(tmp_path, capsys):
    assert main(["tune", str(tmp_path / "missing.yaml")]) == 2
    out = capsys.readouterr().out
    assert out.startswith(f"autotune tune: checking {tmp_path / 'missing.yaml'}")


def test_tune_status_says_each_phase_and_where_the_logs_are(tmp_path):
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=False, color_system=None)
    log = logging.getLogger("autotune")
    handler = logging.FileHandler(tmp_path / "tune.log")
    log.addHandler(handler)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        with views.live(console, "Ctrl-C stops cleanly") as status:
            log.info("building the %s model in %s (first use)", "tiny", "/m")
            log.info("trial %d: %s", 3, "vllm serve /m --max-num-seqs 4")
            assert "trial 3: starting the engine" in str(status.status)
            log.info("capacity step %d (%s): %s -> %.3g req/s, %s; %s", 2, "expand", "12.0",
                     12.3, "passed", "TTFT p95 120 ms")
            assert "capacity step 2" in str(status.status)
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
    text = out.getvalue()
    assert f"log of this run: {tmp_path / 'tune.log'}" in text
    assert f"{tmp_path / 'trials'}/<trial>/" in text
    assert "building the tiny model in /m" in text
    assert "trial 3: vllm serve /m --max-num-seqs 4" in text
    assert "  capacity step 2 (expand): 12.0 -> 12.3 req/s, passed" in text


def test_json_means_the_result_on_stdout_for_every_command():
    with_json = {name: p for name, p in _subcommands().items()
                 if any("--json" in a.option_strings for a in p._actions)}
    assert {"show", "engine", "bench", "tune", "validate"} <= set(with_json)
    for name, p in with_json.items():
        action = next(a for a in p._actions if "--json" in a.option_strings)
        assert action.nargs == 0 and action.const is True, name  # a switch, not a path


def test_bench_json_prints_only_json_on_stdout(tiny_model, capsys):
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from fakeserver import FakeServer

    with FakeServer(interval=0.0) as url:
        assert main(["bench", "--url", url, "--served-model-name", "m", "--tokenizer",
                     str(tiny_model), "--num-requests", "4", "--input-len", "8",
                     "--output-len", "4", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # nothing else on stdout
    assert data["completed"] == 4
    assert "autotune bench" in captured.err  # the table went to stderr


def test_the_readme_lists_every_command():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Commands", 1)[1].split("```", 2)[1]
    listed = set(re.findall(r"autotune (\S+)", block))
    assert listed == set(_subcommands()), (listed, set(_subcommands()))
    for name in _subcommands():
        assert f"### `autotune {name}`" in readme, name


@pytest.mark.parametrize("command", ["show", "report", "export", "dashboard"])
def test_read_commands_name_a_study(command):
    assert "study_or_db" in {a.dest for a in _subcommands()[command]._actions}


def _show(monkeypatch, capsys, **env: str) -> str:
    for key in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE",
                "TTY_INTERACTIVE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["show", str(H200)]) == 0
    return capsys.readouterr().out


def test_show_piped_is_never_wrapped(monkeypatch, capsys):
    """Piped or redirected (no terminal), a line is whole however wide the layout, so that
    `show | grep 'x vLLM defaults'` finds the decision's sentence; COLUMNS still sets the
    layout (stacked at 80 columns, the full table at 200)."""
    decision = Summary.of(show.open_existing(str(H200))).decision
    assert decision is not None
    for columns in ("", "80", "200"):
        out = _show(monkeypatch, capsys, **({"COLUMNS": columns} if columns else {}))
        lines = out.splitlines()
        for line in decision.lines():  # each whole, on one line of its own
            assert line in lines, (columns, line)
        assert any("x vLLM defaults" in line and "capacity at SLO" in line for line in lines)
        if columns:  # without it, rich reads a terminal's width from any standard stream
            assert any(line.startswith("#0 ") for line in lines) == (columns == "80")
        assert not any(line.endswith(" ") for line in lines if line.startswith("     "))


def test_show_on_a_terminal_still_wraps_at_its_width(monkeypatch, capsys):
    out = _show(monkeypatch, capsys, COLUMNS="80", TTY_COMPATIBLE="1", NO_COLOR="1")
    assert all(len(line) <= 80 for line in re.sub(r"\x1b\[[0-9;]*m", "", out).splitlines())
    assert "x vLLM defaults" in out
