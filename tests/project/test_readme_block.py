"""The acceptance tier's reading of the README (`tests/readme.py`), without an engine: the
main-job block is found whole, every command is one the CLI parses, and a broken command
fails the tier."""

from __future__ import annotations

import shlex

import pytest

from autotune.cli.main import build_parser
from tests import readme


def test_the_main_job_block_is_read_whole():
    commands = readme.main_job()
    assert commands[0].startswith(".venv/bin/autotune tune --model ")
    assert all(c.startswith(".venv/bin/autotune ") for c in commands), commands
    assert not any(c.endswith("\\") for c in commands)  # continuation lines joined
    for c in commands:  # each parses as the CLI parses it
        words = shlex.split(c, comments=True)[1:]
        build_parser().parse_args(words)
    assert {shlex.split(c)[1] for c in commands} >= {"tune", "show", "explain", "export",
                                                     "report"}


def test_a_broken_command_fails_the_tier(tmp_path):
    text = "## The main job\n\n```bash\n.venv/bin/autotune shwo tiny-cpu\n```\n"
    commands = readme.main_job(text)
    with pytest.raises(AssertionError, match="README command exited 2"):
        readme.run_all(commands, readme.workdir(tmp_path))


def test_a_continued_line_is_one_command():
    text = "## The main job\n\n```bash\n.venv/bin/autotune tune --model M \\\n" \
           "    --slo ttft_p95_ms=500  # why\n.venv/bin/autotune show M\n```\n"
    assert readme.main_job(text) == [".venv/bin/autotune tune --model M --slo "
                                     "ttft_p95_ms=500  # why", ".venv/bin/autotune show M"]


def test_the_main_job_writes_under_studies():
    """Run from a checkout's root, the block leaves nothing in it: every file a command
    writes (`-o`) goes under studies/, beside the study's database and logs."""
    outputs = [readme.written(c) for c in readme.main_job()]
    named = [path for path in outputs if path is not None]
    assert len(named) >= 2  # the export and the report
    for path in named:
        assert path.startswith("studies/") and ".." not in path.split("/"), path


def test_written_reads_a_commands_output_file():
    assert readme.written(".venv/bin/autotune report s -o studies/s/r.html  # why") == \
        "studies/s/r.html"
    assert readme.written(".venv/bin/autotune show s") is None
    assert readme.written(".venv/bin/autotune export s -o") is None  # no file after it
