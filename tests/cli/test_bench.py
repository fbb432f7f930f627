"""`autotune bench`'s options: each says what it does, a launched engine's log goes where it
litters nothing, and vLLM flags after `--` are read as vLLM's parser reads them."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pytest

from autotune.cli import _bench as bench
from autotune.errors import ConfigError
from autotune.measure import benchrun


def test_every_option_says_what_it_does():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    silent = [a.option_strings for a in parser._actions if a.option_strings and not a.help]
    assert not silent
    assert "requests to send" in next(a.help for a in parser._actions
                                      if "--num-requests" in a.option_strings)


def test_the_engine_log_never_lands_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert benchrun.engine_log(Path("mine.log"), None) == Path("mine.log")  # --log wins
    assert benchrun.engine_log(None, tmp_path / "out" / "result.json") == \
        tmp_path / "out" / "result.engine.log"  # beside -o FILE
    log = benchrun.engine_log(None, None)  # else a fresh temporary folder of its own
    assert log.name == "engine.log" and log.parent.is_dir()
    assert log.parent.parent == Path(tempfile.gettempdir())
    assert log.parent.name.startswith("autotune-bench-")
    assert not list(tmp_path.iterdir())
    log.parent.rmdir()


@pytest.mark.parametrize(("args", "value"), [
    (["--block-size", "32"], "32"),
    (["--enforce-eager", "--block-size=64"], "64"),
    (["--block_size", "16", "--max-num-seqs", "4"], "16"),
    (["--block-size", "16", "--block-size", "128"], "128"),  # the last, as argparse takes it
    (["--max-num-seqs", "4"], None),
    (["--block-size-x", "4"], None),
])
def test_a_flag_after_the_double_dash_is_read_as_vllm_reads_it(args, value):
    assert benchrun.engine_arg(args, "block-size") == value


def test_a_block_size_the_installed_engine_takes_passes(tiny_model):
    for size in ("32", "128"):
        benchrun.check_launch(str(tiny_model), ["--block-size", size])
    with pytest.raises(ConfigError, match=r"^bench: --block-size 129 is not accepted by"):
        benchrun.check_launch(str(tiny_model), ["--block-size", "129"])
    with pytest.raises(ConfigError, match=r"^bench: --model /no/such: '/no/such' does not"):
        benchrun.check_launch("/no/such", [])
