"""Issue 16, items 4-6: bad scenarios, bad options and bad storage end in one line, exit 2.

Each reproduction of the issue runs the real `autotune` command on real files (SQLite
databases made read-only, filled with garbage, or missing) and checks that it stops before
anything is launched: exit 2, exactly one line on stderr, no traceback, quickly, and no file
or folder created (no study folder, no empty database).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest

from autotune.cli import main as cli
from autotune.engine.info import EngineInfo, FlagInfo
from autotune.errors import ConfigError
from autotune.tuning.policy.space import check_against_engine
from autotune.tuning.sharing import storage
from tests.cli.test_cli_errors import QUICK_S, assert_one_line_error, autotune
from tests.paths import ROOT

GOOD = "name: s\nmodel: {tiny: tiny}\n"


def files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` with its size and modification time."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*")}


def refused(tmp_path: Path, *args: str, expect: tuple[str, ...] = ()) -> str:
    """Run `autotune ARGS` in tmp_path: one-line error, exit 2, quick, nothing written."""
    before = files(tmp_path)
    proc, seconds = autotune(*args, cwd=tmp_path)
    line = assert_one_line_error(proc, *expect)
    assert seconds < QUICK_S
    assert files(tmp_path) == before, "the refused command wrote something"
    return line


def make_study(path: Path) -> Path:
    """A real Optuna study database with one trial."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.create_study(storage=f"sqlite:///{path}", study_name="s")
    st.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    return path


@pytest.fixture
def read_only() -> Iterator[Callable[[Path], None]]:
    """Make a file or folder read-only for this test, as the command's user sees it.

    Root ignores permission bits, so as root the path is also made immutable (`chattr +i`,
    which binds root too) and made mutable again afterwards; where neither binds, skip.
    """
    immutable: list[Path] = []

    def make(path: Path) -> None:
        path.chmod(0o555 if path.is_dir() else 0o444)
        if os.access(path, os.W_OK) and shutil.which("chattr") and subprocess.run(
                ["chattr", "+i", str(path)], capture_output=True).returncode == 0:
            immutable.append(path)
        if os.access(path, os.W_OK):
            pytest.skip("cannot make a path read-only for this user (root without chattr)")

    yield make
    for path in immutable:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    for path in immutable:
        path.chmod(0o755 if path.is_dir() else 0o644)


# --- item 4: bad scenarios got past validation -------------------------------------------


@pytest.mark.parametrize(("text", "key", "words"), [
    ("model: {path: /nonexistent/model}\n", "model.path", ["does not exist", "config.json"]),
    ("model: {path: ./not-here}\n", "model.path", ["does not exist"]),
    (GOOD + "engine: {flags: {gpu-memory-utilization: 1.5}}\n",
     "engine.flags.gpu-memory-utilization", ["1.5", "(0, 1]"]),
    (GOOD + "space: {gpu-memory-utilization: {low: 0.8, high: 1.5, step: 0.1}}\n",
     "space.gpu-memory-utilization", ["1.5", "(0, 1]"]),
    (GOOD + "space: {gpu_memory_utilization: {choices: [0.9, 0]}}\n",
     "space.gpu-memory-utilization", ["0", "(0, 1]"]),
    (GOOD + "baselines: [{name: a, flags: {gpu-memory-utilization: 2}}]\n",
     "baselines[0].flags.gpu-memory-utilization", ["(0, 1]"]),
    (GOOD + "space: {port: {choices: [8000, 8001]}}\n", "space.port", ["set by autotune"]),
    (GOOD + "engine: {flags: {host: 0.0.0.0}}\n", "engine.flags.host", ["set by autotune"]),
    (GOOD + "baselines: [{name: a, flags: {api_key: secret}}]\n",
     "baselines[0].flags.api-key", ["set by autotune"]),
    (GOOD + "engine: {flags: {model: /m}}\n", "engine.flags.model", ["set by autotune"]),
    (GOOD + "space: {served-model-name: {choices: [a]}}\n", "space.served-model-name",
     ["set by autotune"]),
    (GOOD + "guardrail: {require: maybe}\n", "guardrail.require",
     ["'within_budget' or 'unchanged'"]),
    (GOOD + "guardrail: {template: chatty}\n", "guardrail.template",
     ["'auto', 'chat' or 'plain'"]),
    (GOOD + "guardrail: {max_accuracy_drop: -1}\n", "guardrail.max_accuracy_drop",
     ["greater than or equal to 0"]),
], ids=["model-missing", "model-relative", "gmu-fixed", "gmu-range", "gmu-choice",
        "gmu-baseline", "port-space", "host-fixed", "api-key-baseline", "model-flag",
        "served-name", "quality-require", "quality-template", "quality-budget"])
def test_bad_scenario_is_refused_before_launch(tmp_path, text, key, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = refused(tmp_path, "tune", str(path), expect=(f"{path}: {key}: ", *words))
    assert not (tmp_path / "studies").exists()
    assert line


def test_a_model_directory_needs_config_json(tmp_path):
    (tmp_path / "m").mkdir()
    path = tmp_path / "s.yaml"
    path.write_text(f"model: {{path: {tmp_path / 'm'}}}\n")
    refused(tmp_path, "tune", str(path), expect=("model.path: ", "without config.json"))


@pytest.mark.parametrize("trials", ["-1", "0", "two"])
def test_tune_trials_must_be_a_positive_count(tmp_path, trials):
    (tmp_path / "s.yaml").write_text(GOOD)
    refused(tmp_path, "tune", "s.yaml", "--trials", trials, expect=("--trials",))


# --- item 5: tracebacks instead of one line ----------------------------------------------


def test_binary_scenario_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    refused(tmp_path, "tune", str(path), expect=(f"{path}: not a text file",))


@pytest.mark.parametrize("timeout", ["5x", "0", "-3m", "h"])
def test_tune_timeout_must_be_a_duration(tmp_path, timeout):
    (tmp_path / "s.yaml").write_text(GOOD)
    refused(tmp_path, "tune", "s.yaml", f"--timeout={timeout}", expect=("--timeout",))


@pytest.mark.parametrize("args", [
    ["validate", "x.db", "--repeats", "-1"],
    ["validate", "x.db", "--step-seconds", "0", "--client", "vllm"],
    ["validate", "x.db", "--against", "-2"],
    ["show", "x.db", "--trial", "-1"],
    ["export", "x.db", "--trial", "x"],
    ["bench", "--url", "http://127.0.0.1:1", "--startup-timeout", "-5"],
    ["bench", "--url", "http://127.0.0.1:1", "--num-requests", "-5"],
    ["tune", "s.yaml", "--study", "../elsewhere"],
], ids=["validate-repeats", "validate-step-seconds", "validate-against", "show-trial",
        "export-trial", "bench-startup-timeout", "bench-num-requests", "tune-study-name"])
def test_numbers_and_names_of_every_command(tmp_path, args):
    (tmp_path / "s.yaml").write_text(GOOD)
    refused(tmp_path, *args)


def test_tune_storage_directory_missing(tmp_path):
    (tmp_path / "s.yaml").write_text(GOOD)
    refused(tmp_path, "tune", "s.yaml", "--storage", "sqlite:///nodir/s.db",
            expect=("nodir", "does not exist"))
    assert not (tmp_path / "studies").exists()  # item 6: no studies/<name>/ either


def test_tune_storage_directory_not_writable(tmp_path, read_only):
    (tmp_path / "s.yaml").write_text(GOOD)
    (tmp_path / "ro").mkdir()
    read_only(tmp_path / "ro")
    refused(tmp_path, "tune", "s.yaml", "--storage", "sqlite:///ro/s.db",
            expect=("directory ro is not writable",))


def test_tune_default_storage_in_an_unwritable_studies_dir(tmp_path, read_only):
    (tmp_path / "s.yaml").write_text(GOOD)
    (tmp_path / "ro").mkdir()
    read_only(tmp_path / "ro")
    refused(tmp_path, "tune", "s.yaml", "--studies-dir", "ro/studies",
            expect=("--studies-dir ro/studies: cannot create it",))


def test_tune_on_a_read_only_database(tmp_path, read_only):
    (tmp_path / "s.yaml").write_text(GOOD)
    read_only(make_study(tmp_path / "s.db"))
    refused(tmp_path, "tune", "s.yaml", "--storage", "sqlite:///s.db",
            expect=("s.db is read-only",))


def garbage(path: Path) -> Path:
    path.write_bytes(os.urandom(8192))
    return path


def torn(path: Path) -> Path:
    """A SQLite file whose header is intact and whose pages are not."""
    make_study(path)
    with path.open("r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 4000)
    return path


@pytest.mark.parametrize("corrupt", [garbage, torn], ids=["garbage", "torn"])
@pytest.mark.parametrize("command", ["tune", "show", "report", "export", "validate"])
def test_corrupt_database_for_every_command(tmp_path, corrupt, command):
    (tmp_path / "s.yaml").write_text(GOOD)
    corrupt(tmp_path / "s.db")
    args = ["tune", "s.yaml", "--storage", "sqlite:///s.db"] if command == "tune" \
        else [command, "s.db"]
    line = refused(tmp_path, *args)
    assert "not a SQLite database" in line or "is corrupt" in line


# --- item 6: a read command that writes --------------------------------------------------


@pytest.mark.parametrize("command", ["show", "report", "export", "validate"])
def test_read_commands_do_not_create_a_missing_database(tmp_path, command):
    refused(tmp_path, command, "sqlite:///missing.db",
            expect=("sqlite:///missing.db: database missing.db does not exist",))
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("command", ["show", "report", "export"])
def test_read_commands_do_not_touch_a_foreign_sqlite_file(tmp_path, command):
    """An empty file or another program's database: Optuna would write its tables into it."""
    (tmp_path / "empty.db").write_bytes(b"")
    refused(tmp_path, command, "empty.db", expect=("empty.db is empty",))


def test_show_reads_a_read_only_database(tmp_path, read_only):
    read_only(make_study(tmp_path / "s.db"))
    before = files(tmp_path)
    proc, _ = autotune("show", "s.db", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert files(tmp_path) == before


def test_validate_needs_a_writable_database(tmp_path, read_only):
    """`validate` stores its result in the study: refused before hours of re-runs."""
    read_only(make_study(tmp_path / "s.db"))
    refused(tmp_path, "validate", "s.db", expect=("s.db is read-only",))


# --- the checks in process: storage URLs, the engine's parser, the happy path -------------


def test_storage_url_errors_are_one_line_and_hide_passwords():
    with pytest.raises(ConfigError, match=r"^not-a-url: not a storage URL"):
        storage.check("not-a-url", create=True)
    with pytest.raises(ConfigError) as err:
        storage.check("postgresql+psycopg://me:s3cret@127.0.0.1:1/db", create=True)
    assert "s3cret" not in str(err.value) and "\n" not in str(err.value)


def test_storage_check_passes_a_new_or_an_existing_study(tmp_path):
    storage.check(f"sqlite:///{tmp_path / 'new.db'}", create=True)
    assert not (tmp_path / "new.db").exists()  # checking creates nothing
    db = make_study(tmp_path / "s.db")
    for create in (True, False):
        storage.check(f"sqlite:///{db}", create=create)
    assert storage.locate("s", None, tmp_path) == (f"sqlite:///{db}", "s")
    # Its files are kept next to the database, whatever way the user named it.
    elsewhere = tmp_path / "elsewhere"
    for typed in (str(db), f"sqlite:///{db}"):
        assert storage.folder(typed, "s", elsewhere) == tmp_path / "s"
    assert storage.folder("postgresql+psycopg://u@h/db", "s", elsewhere) == elsewhere / "s"
    # One rule for `tune` and for the commands that read the files after it: a study tuned
    # with `--storage sqlite:///x/s.db` keeps them in x/s/, where `validate` looks.
    where = storage.StudyLocation.resolve("s", f"sqlite:///{db}", elsewhere)
    assert where.folder == storage.folder(str(db), "s", elsewhere) == tmp_path / "s"
    assert storage.StudyLocation.resolve("s", None, elsewhere).folder == elsewhere / "s"


ENGINE = EngineInfo("vllm", "9.9.9", "cuda", {
    "max-num-seqs": FlagInfo(type="int"),
    "gpu-memory-utilization": FlagInfo(type="float", default=0.9),
    "enforce-eager": FlagInfo(boolean=True),
    "kv-cache-dtype": FlagInfo(choices=["auto", "fp8"], type="str"),
    "max-model-len": FlagInfo(type="human_readable_int"),
})


@pytest.mark.parametrize(("section", "message"), [
    ({"engine": {"flags": {"max-num-seqs": "many"}}}, "it takes a whole number"),
    ({"engine": {"flags": {"max-num-seqs": 4.5}}}, "it takes a whole number"),
    ({"engine": {"flags": {"max-num-seqs": True}}}, "it takes a value, not true/false"),
    ({"engine": {"flags": {"gpu-memory-utilization": "high"}}}, "it takes a number"),
    ({"engine": {"flags": {"enforce-eager": "yes"}}}, "allowed: true, false"),
    ({"space": {"max-num-seqs": {"low": 1.5, "high": 8}}}, "whole numbers"),
    ({"space": {"enforce-eager": {"low": 0, "high": 1}}}, "choices: [true, false]"),
    ({"baselines": [{"name": "b", "flags": {"kv-cache-dtype": True}}]}, "not true/false"),
])
def test_values_the_engine_parser_would_refuse(section, message):
    sc = cli_scenario(section)
    with pytest.raises(ConfigError, match="^scn.yaml: ") as err:
        check_against_engine(sc, ENGINE, "scn.yaml")
    assert message in str(err.value)


def test_values_the_engine_parser_takes():
    check_against_engine(cli_scenario({
        "engine": {"flags": {"max-num-seqs": "8", "max-model-len": "4k", "enforce-eager": True}},
        "space": {"gpu-memory-utilization": {"low": 0.5, "high": 1.0}},
        "baselines": [{"name": "b", "flags": {"no-enforce-eager": True}}]}), ENGINE, "scn.yaml")


def cli_scenario(sections: dict):
    from autotune.config import Scenario

    return Scenario.model_validate({"model": {"tiny": "tiny"}, **sections})


def test_a_good_tune_gets_past_every_check(tmp_path, monkeypatch, capsys):
    """The checks do not refuse a good command: the study folder and its log are made, and
    the options arrive parsed (the run itself is stubbed: no engine here)."""
    from autotune.cli import _tune as tune_cli
    from autotune.tuning import study

    calls = {}

    def fake_tune(request, **kwargs):
        calls.update(request=request)
        return optuna.create_study(study_name=request.scenario.name)

    monkeypatch.setattr(study, "tune", fake_tune)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(GOOD)
    logger = logging.getLogger("autotune")
    handlers = list(logger.handlers)
    sigterm = signal.getsignal(signal.SIGTERM)  # main() installs its own
    try:
        # the stub ran no trial: the study has no answer, which is its own exit code
        assert cli.main(["tune", "s.yaml", "--trials", "3", "--timeout", "1h30m",
                         "--study", "other"]) == tune_cli.NO_ANSWER
    finally:
        signal.signal(signal.SIGTERM, sigterm)
        for h in set(logger.handlers) - set(handlers):
            logger.removeHandler(h)
            h.close()
    said = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert said[-1] == "no answer yet: no trial has finished"  # the last line says why
    request = calls["request"]  # one resolved request: study.tune resolves nothing itself
    assert (request.trials, request.timeout_s, request.scenario.name) == (3, 5400, "other")
    assert request.location.folder.resolve() == tmp_path / "studies" / "other"
    assert request.claim is None
    assert (tmp_path / "studies" / "other" / "tune.log").exists()


def test_sigterm_stops_a_command_started_with_sigint_ignored(tmp_path):
    """`autotune ... &` from a script (or nohup) inherits SIGINT ignored; SIGTERM, which
    autotune turns into Ctrl-C's path, must still stop it (the dashboard: serves until told)."""
    db = tmp_path / "s.db"
    shutil.copy(ROOT / "studies" / "qwen3-4b-h200.db", db)
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "dashboard", str(db), "--port", "0"],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert "http://127.0.0.1:" in proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
