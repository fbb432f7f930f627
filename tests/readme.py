"""The README's main job as the acceptance tier reads it: the first ```bash block under
"## The main job", one command per line (a trailing backslash continues it), each run with
bash in a fresh working folder that holds the checkout's `.venv` and `search_spaces`, as a
user types it on a fresh clone. Reading the block itself is what keeps the README and the
test from drifting apart."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.paths import ROOT

HEADING = "## The main job"


def main_job(text: str | None = None) -> list[str]:
    """The commands of the main-job block, continuation lines joined."""
    return block(HEADING, text)


def block(heading: str, text: str | None = None) -> list[str]:
    """The commands of the first ```bash block under `heading`, continuation lines joined."""
    text = (ROOT / "README.md").read_text() if text is None else text
    section = text[text.index(heading):]
    found = re.search(r"```bash\n(.*?)```", section, re.S)
    assert found, f"no ```bash block under {heading!r}"
    joined = re.sub(r"\s*\\\n\s*", " ", found.group(1))
    return [line.strip() for line in joined.splitlines() if line.strip()]


def workdir(path: Path) -> Path:
    """A folder like a fresh clone's root, for the commands: the checkout's `.venv` and
    `search_spaces` linked in, nothing else (studies/ is made by the commands)."""
    path.mkdir(parents=True, exist_ok=True)
    for name in (".venv", "search_spaces"):
        if not (path / name).exists():
            (path / name).symlink_to(ROOT / name)
    return path


def written(command: str) -> str | None:
    """The file a command writes (its `-o` argument), as given; None where it names none."""
    words = shlex.split(command, comments=True)
    return words[words.index("-o") + 1] if "-o" in words[:-1] else None


@dataclass(frozen=True)
class Ran:
    command: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def run(command: str, cwd: Path, timeout: float = 1200) -> Ran:
    """One README command through bash, in `cwd`; wide enough that a line is one line."""
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})
    return Ran(command, proc.returncode, proc.stdout, proc.stderr)


def run_all(commands: list[str], cwd: Path) -> list[Ran]:
    """Every command in order; the first that exits non-zero fails the tier with its
    output."""
    out = []
    for command in commands:
        done = run(command, cwd)
        assert done.returncode == 0, (f"README command exited {done.returncode}: {command}\n"
                                      + done.text[-4000:])
        out.append(done)
    return out
