"""Check a study's storage before Optuna touches it, so a bad one is one line, not a traceback.

Optuna opens a storage URL as it is: a SQLite file that does not exist is created (so a
read-only command such as `show` would leave an empty database behind), and a missing
directory, a read-only or a corrupt file surface as SQLAlchemy tracebacks, or as "invalid
data in the commit" once the first trial ends. `check` says what is wrong before any of
that, and `locate` turns what a user types (a .db file, a study name, a URL) into the URL.
`StudyLocation` is where `tune` keeps a study: its URL, its name and its folder, resolved
once (`StudyLocation.resolve`) and handed down.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import ConfigError

if TYPE_CHECKING:  # SQLAlchemy is imported where a URL is checked: `masked`, which every
    # error message of the command line goes through, stays quick to import.
    from sqlalchemy.engine import URL

SQLITE_HEADER = b"SQLite format 3\x00"
# scheme://user:password@ : the password of a URL, wherever it appears in a text.
_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][\w+.-]*://[^\s/@:]*:)[^\s@]*@")


def masked(text: str) -> str:
    """`text` with the password of every URL in it shown as *** (what autotune prints or
    logs about a storage: `postgresql+psycopg://me:***@db/autotune`)."""
    return _PASSWORD.sub(lambda m: m["head"] + "***@", text)


def database(name: str, root: Path) -> Path:
    """The SQLite file of the study called `name` under `root` (`root/NAME.db`), the one
    rule by which a name finds its database."""
    return root / f"{name}.db"


@dataclass(frozen=True)
class StudyLocation:
    """Where a study lives: its storage `url`, its `name` in that storage, and the `folder`
    for its log, its trials' files and the guardrail reference (`folder_of`)."""

    url: str
    name: str
    folder: Path

    @classmethod
    def resolve(cls, name: str | None, storage: str | None, root: Path) -> StudyLocation:
        """`storage` if given, else `root/NAME.db` (`root` is made here if need be; OSError
        if it cannot be). Nothing is opened or checked (`check` does that)."""
        name = name or "study"
        if not storage:
            root.mkdir(parents=True, exist_ok=True)
        url = storage or f"sqlite:///{database(name, root)}"
        return cls(url, name, folder_of(url, name, root))


def folder_of(url: str, study_name: str, root: Path) -> Path:
    """The one rule for where a study's logs and files live, for `tune` and for every
    command that reads or adds to them (`validate`, `explain`): beside its SQLite file
    (`x/y.db` keeps `x/NAME/`), else, for a server's storage, `root/NAME`."""
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///")).parent / study_name
    return root / study_name


def folder(target: str, study_name: str, root: Path) -> Path:
    """`folder_of` for what a user typed: a .db file, a study name under `root` or a URL
    (`locate`)."""
    return folder_of(locate(target, study_name, root)[0], study_name, root)


def locate(target: str, study_name: str | None, root: Path) -> tuple[str, str | None]:
    """(storage URL, study name) for a .db file, a study name under `root`, or a URL.

    A name found as `root/NAME.db` also names the study in it. Nothing is opened.
    """
    if "://" in target:
        return target, study_name
    path = Path(target)
    if not path.exists() and database(target, root).exists():
        return f"sqlite:///{database(target, root)}", study_name or target
    if not path.exists():
        raise ConfigError(f"no study database {target!r} (nor {database(target, root)})")
    return f"sqlite:///{path}", study_name


def check(url: str, *, create: bool, write: bool | None = None) -> None:
    """Raise ConfigError when the storage at `url` cannot be used as asked.

    `create`: the study may be new, so a SQLite file may be created (`tune`); otherwise
    it must exist already and is never created. `write` (default: `create`): the command
    stores results, so the database must be writable (`tune`, `validate`); reading
    (`show`, `report`, `export`) works on a read-only file.
    """
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import make_url

    write = create if write is None else write
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError) as err:
        raise ConfigError(f"{url}: not a storage URL ({err}); use e.g. sqlite:///studies/x.db "
                          "or postgresql+psycopg://USER@HOST/DB") from None
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite(parsed, create=create, write=write)
    else:
        _check_server(parsed)


def _check_sqlite(url: URL, *, create: bool, write: bool) -> None:
    name = url.database or ""
    if name in ("", ":memory:") or url.query.get("uri"):
        return  # in memory (nothing to check), or a SQLite URI that SQLite itself reads
    path = Path(name)
    shown = url.render_as_string(hide_password=True)
    if not path.exists():
        if not create:
            raise ConfigError(f"{shown}: database {path} does not exist")
        _check_directory(path.parent, shown)
        return
    if path.is_dir():
        raise ConfigError(f"{shown}: {path} is a directory, not a database")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{shown}: database {path} is not readable")
    if write and not os.access(path, os.W_OK):
        raise ConfigError(f"{shown}: database {path} is read-only")
    if write:
        # SQLite writes a journal next to the database on every commit.
        _check_directory(path.parent, shown)
    _check_contents(path, shown, optuna_tables=not create)


def _check_directory(directory: Path, shown: str) -> None:
    """The directory a SQLite database is (or will be) written in."""
    directory = directory if str(directory) else Path(".")
    if not directory.is_dir():
        raise ConfigError(f"{shown}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"{shown}: directory {directory} is not writable")


def _check_contents(path: Path, shown: str, *, optuna_tables: bool) -> None:
    """A SQLite database that is intact; with `optuna_tables`, also one Optuna has written
    (a read command on another kind of database would have Optuna add its tables to it)."""
    with path.open("rb") as f:
        header = f.read(len(SQLITE_HEADER))
    if header and header != SQLITE_HEADER:
        raise ConfigError(f"{shown}: {path} is not a SQLite database (corrupt, or another kind "
                          "of file)")
    if not header:  # an empty file: SQLite reads it as an empty database
        if optuna_tables:
            raise ConfigError(f"{shown}: database {path} is empty (it holds no study)")
        return
    try:
        # Read-only, so that the check itself can never change the file.
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            verdict = db.execute("PRAGMA quick_check").fetchone()[0]
            # `studies` is the table Optuna's RDB storage keeps its studies in.
            tables = {row[0] for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            db.close()
    except sqlite3.Error as err:
        raise ConfigError(f"{shown}: database {path} is corrupt ({err})") from None
    if verdict != "ok":
        raise ConfigError(f"{shown}: database {path} is corrupt ({verdict})")
    if optuna_tables and "studies" not in tables:
        raise ConfigError(f"{shown}: database {path} holds no Optuna study")


def _check_server(url: URL) -> None:
    """A database server (PostgreSQL, MySQL): its driver is installed and it answers."""
    import sqlalchemy
    from sqlalchemy import exc as sa_exc

    shown = url.render_as_string(hide_password=True)
    try:
        engine = sqlalchemy.create_engine(url)
    except (sa_exc.SQLAlchemyError, ImportError) as err:
        raise ConfigError(f"{shown}: cannot use this storage: {_first_line(err)}") from None
    try:
        with engine.connect():
            pass
    except (sa_exc.SQLAlchemyError, ImportError) as err:
        raise ConfigError(f"{shown}: cannot connect: {_first_line(err)}") from None
    finally:
        engine.dispose()


def _first_line(err: BaseException) -> str:
    text = str(getattr(err, "orig", None) or err).strip()
    return text.splitlines()[0] if text else type(err).__name__
