#!/usr/bin/env python3
"""Every committed study's outputs as a user gets them, to prove that a change of the code
left them byte for byte as they were.

    .venv/bin/python scripts/outputs.py --check       # against tests/golden/outputs.json
    .venv/bin/python scripts/outputs.py --write DIR   # each output as a file, for diff -r
    .venv/bin/python scripts/outputs.py --update      # record the outputs as they are now

For each study of each committed database (the `.db` files git tracks under studies/), the
CLI runs in this process: `show` as a pipe gets it (no line wrapped) at 80 columns (one
block a trial) and at 200 (the full table), `show --json`, `report -o` and `export --format
F -o` for every format of `autotune.results.export.formats.FORMATS`. Kept: what `show` printed, the
file `report` and `export` wrote, and a `commands.log` a study with each command, its exit
code and its stderr, so a command that refuses a study (an export with no feasible trial,
exit 4) is an output too. An output is named `DB/STUDY/FILE`, its path under `--write`'s
folder.

tests/golden/outputs.json keeps one sha256 an output (a report is megabytes) and the
versions of the libraries that shape them; tests/project/test_outputs_stable.py runs the
check.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import importlib.metadata
import io
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import optuna
from plotly.offline import get_plotlyjs

ROOT = Path(__file__).resolve().parents[1]
# This checkout's autotune, not the one an editable install points to: the two sides of a
# comparison are two checkouts (a worktree of each) that may share one virtualenv.
sys.path.insert(0, str(ROOT))

import autotune  # noqa: E402
from autotune.cli.main import main  # noqa: E402
from autotune.results.export.formats import FORMATS  # noqa: E402

GOLDEN = ROOT / "tests" / "golden" / "outputs.json"
# The libraries whose versions can change an output with no change of autotune's code.
LIBRARIES = ("optuna", "plotly", "rich", "PyYAML", "numpy")
SUFFIX = {"cli": "sh", "vllm-yaml": "yaml", "compose": "yaml", "k8s": "yaml", "json": "json"}
# Where `report` and `export` write: a scratch folder, named in their stderr as this.
OUT = "$OUT"
# The report inlines the installed plotly's plotly.js (about 4.8 MB): the library's code,
# which changes with every plotly release and never with autotune's, so it is one token here.
PLOTLYJS = "/* plotly.js of the installed plotly */"
# rich reads these: without a terminal it lays out COLUMNS wide (80 without it), without
# colour and (`autotune.cli._options.console`) without wrapping a line, unless one of the
# others says to pretend a terminal or forbids colour.
TERMINAL = ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE",
            "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES")


def databases(root: Path = ROOT) -> list[str]:
    """The study databases committed under studies/, relative to `root`: a study tuned
    into studies/ on this machine is not one of them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", "studies"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    return sorted(p for p in listed.split("\0") if p.endswith(".db"))


def outputs(scratch: Path, root: Path = ROOT) -> dict[str, bytes]:
    """Every output of every committed study by name, as compared (normalised); `scratch`
    is an empty folder for the files `report` and `export` write."""
    found: dict[str, bytes] = {}
    with _inside(root), _studies_opened_once():
        for db in databases(root):
            names = optuna.get_all_study_names(storage=f"sqlite:///{db}")
            for study in names:
                prefix = f"{Path(db).relative_to('studies')}/{study}"
                out = scratch / prefix
                out.mkdir(parents=True)
                select = ["--study", study] if len(names) > 1 else []
                for name, text in _study_outputs([db, *select], out).items():
                    found[f"{prefix}/{name}"] = text.encode()
    return found


def _study_outputs(target: list[str], out: Path) -> dict[str, str]:
    """The outputs of one study (`target`: its database and, where the database holds
    several, `--study NAME`): file name -> text."""
    found: dict[str, str] = {}
    log: list[str] = []

    def run(name: str, words: list[str], columns: int = 80, written: Path | None = None) -> None:
        code, stdout, stderr = _command(words, columns)
        status = f"exit {code}" if isinstance(code, int) else f"raised {code}"
        log.append(f"$ COLUMNS={columns} autotune {' '.join(words)}\n{status}\n{stderr}")
        if code == 0:
            found[name] = written.read_text() if written else stdout
        elif stdout:
            log.append(f"stdout:\n{stdout}")

    run("show.txt", ["show", *target])
    run("show-wide.txt", ["show", *target], columns=200)
    run("show.json", ["show", *target, "--json"])
    report = out / "report.html"
    run("report.html", ["report", *target, "-o", str(report)], written=report)
    for fmt in FORMATS:
        file = out / f"export-{fmt}.{SUFFIX.get(fmt, 'txt')}"
        run(file.name, ["export", *target, "--format", fmt, "-o", str(file)], written=file)
    found["commands.log"] = "\n".join(log)
    if "report.html" in found:
        found["report.html"] = found["report.html"].replace(_plotlyjs(), PLOTLYJS)
    # The scratch folder is this run's own: the same file is $OUT/... on every machine.
    return {name: text.replace(f"{out}{os.sep}", f"{OUT}/") for name, text in found.items()}


@functools.lru_cache(maxsize=1)
def _plotlyjs() -> str:
    return get_plotlyjs()  # read from plotly's package: 4.8 MB, once


def _command(words: list[str], columns: int) -> tuple[int | str, str, str]:
    """One `autotune` command run here: (exit code, stdout, stderr). Warnings and log
    records are kept in stderr the same way under pytest (which records both itself) as in
    a plain process, and an exception is recorded instead of stopping the run."""
    stdout, stderr = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(stderr)
    handler.setLevel(logging.WARNING)
    code: int | str
    with _terminal(columns), warnings.catch_warnings(record=True) as caught, \
            contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        # Python's default filters, and each warning once a command as in a fresh process.
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                         ResourceWarning):
            warnings.simplefilter("ignore", category)
        logging.getLogger().addHandler(handler)
        try:
            code = main(words)
        except Exception as err:  # noqa: BLE001 - a crash is an output that changed
            code = "".join(traceback.format_exception_only(type(err), err)).strip()
        finally:
            logging.getLogger().removeHandler(handler)
    notes = "".join(f"warning: {w.category.__name__}: {w.message}\n" for w in caught)
    return code, stdout.getvalue(), stderr.getvalue() + notes


@contextlib.contextmanager
def _terminal(columns: int) -> Iterator[None]:
    """rich's console as `columns` wide and colourless, whatever this shell's environment."""
    saved = {key: os.environ.pop(key, None) for key in TERMINAL}
    os.environ["COLUMNS"] = str(columns)
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value


@contextlib.contextmanager
def _inside(root: Path) -> Iterator[None]:
    """Work in `root`, as a user types `autotune show studies/X.db` in the checkout; the
    SIGTERM handler the CLI installs is put back after."""
    cwd, sigterm = Path.cwd(), signal.getsignal(signal.SIGTERM)
    os.chdir(root)
    try:
        yield
    finally:
        os.chdir(cwd)
        signal.signal(signal.SIGTERM, sigterm)


@contextlib.contextmanager
def _studies_opened_once() -> Iterator[None]:
    """Each storage URL's study names and each study loaded once for all the commands.

    Opening a SQLite storage has Optuna check its schema through alembic, about 0.1 s each
    time, and every command opens its study twice (names, then the study): most of a run's
    time without this. The databases are only read, so one Study serves every command. A
    call other than the CLI's (a storage object, a sampler) goes to Optuna as it came."""
    load, list_names = optuna.load_study, optuna.get_all_study_names
    names: dict[str, list[str]] = {}
    studies: dict[tuple[str, str], optuna.Study] = {}

    def get_all_study_names(storage: Any) -> list[str]:
        if not isinstance(storage, str):
            return list_names(storage=storage)
        if storage not in names:
            names[storage] = list_names(storage=storage)
        return list(names[storage])

    def load_study(*, study_name: str | None, storage: Any, **options: Any) -> optuna.Study:
        if options or study_name is None or not isinstance(storage, str):
            return load(study_name=study_name, storage=storage, **options)
        if (storage, study_name) not in studies:
            studies[storage, study_name] = load(study_name=study_name, storage=storage)
        return studies[storage, study_name]

    with mock.patch.object(optuna, "load_study", load_study), \
            mock.patch.object(optuna, "get_all_study_names", get_all_study_names):
        yield


def digests(found: Mapping[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(found.items())}


def versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in LIBRARIES}


def differences(now: Mapping[str, str], recorded: Mapping[str, str]) -> list[str]:
    """Each output whose digest is not the recorded one, or that only one side has."""
    lines = []
    for name in sorted(now.keys() | recorded.keys()):
        if name not in recorded:
            lines.append(f"new: {name}")
        elif name not in now:
            lines.append(f"gone: {name}")
        elif now[name] != recorded[name]:
            lines.append(f"changed: {name}")
    return lines


def check(scratch: Path, golden: Path = GOLDEN) -> tuple[list[str], list[str]]:
    """(the outputs that differ from `golden`'s digests, the libraries whose installed
    version is not the one recorded there: a likelier cause than the code, if any)."""
    recorded = json.loads(golden.read_text())
    now = versions()
    libraries = [f"{name} {recorded['versions'].get(name)} recorded, {now[name]} installed"
                 for name in LIBRARIES if recorded["versions"].get(name) != now[name]]
    return differences(digests(outputs(scratch)), recorded["outputs"]), libraries


HOW = ("see what changed: scripts/outputs.py --write DIR on both sides (this tree and the "
       "commit before the change, e.g. in a `git worktree`), then diff -r; run "
       "scripts/outputs.py --update only when the change is intended")


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Every committed study's outputs: check, record or write them.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true",
                      help=f"compare with {GOLDEN.relative_to(ROOT)}; exit 1 on a difference")
    mode.add_argument("--update", action="store_true", help=f"rewrite {GOLDEN.relative_to(ROOT)}")
    mode.add_argument("--write", type=Path, metavar="DIR", help="write every output into DIR")
    args = parser.parse_args(argv)
    if args.write and args.write.exists() and any(args.write.iterdir()):
        parser.error(f"{args.write} is not empty: give a new folder, so no stale file is left")
    print(f"the outputs of {Path(autotune.__file__).parent}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as scratch:
        if args.check:
            changed, libraries = check(Path(scratch))
            for line in changed:
                print(line)
            if changed:
                for line in libraries:
                    print(f"note: {line}")
                print(HOW, file=sys.stderr)
                return 1
            print("every output as recorded")
            return 0
        found = outputs(Path(scratch))
    if args.update:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps({"versions": versions(), "outputs": digests(found)},
                                     indent=1) + "\n")
        print(f"{len(found)} outputs recorded in {GOLDEN.relative_to(ROOT)}")
        return 0
    for name, data in found.items():
        path = args.write / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    print(f"{len(found)} outputs written under {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
