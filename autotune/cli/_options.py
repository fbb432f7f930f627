"""What the subcommands share: argument types checked as they are parsed, the argument
groups that name a study or a price, and opening the study a read command names.

argparse reports a type's ArgumentTypeError as `argument --x: <message>`, which the CLI
prints as its one-line error (exit 2). Checking here, rather than where a value is used,
means a bad option stops the command before it opens a study or starts an engine: a
`--trials -1` or a `--timeout 5x` is refused in one line before the scenario is read.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from autotune.config import check_study_name, parse_duration
from autotune.errors import ConfigError

if TYPE_CHECKING:
    import optuna
    from rich.console import Console

    from autotune._slo import Slo


def whole(minimum: int) -> Callable[[str], int]:
    """An integer of at least `minimum` (`--trials`, `--repeats`, ...)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum} (got {value})")
        return value

    parse.__name__ = "whole number"  # what argparse names the type in its own messages
    return parse


def positive(text: str) -> float:
    """A finite number above 0 (seconds, `--step-seconds`, `--startup-timeout`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number above 0 (got {text})")
    return value


def duration(text: str) -> float:
    """A duration such as 8h, 45m, 90s or 1h30m (plain numbers are seconds), above 0."""
    try:
        seconds = parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0 s (got {text!r})")
    return seconds


def study_name(text: str) -> str:
    """A study name that stays inside the studies directory as a file and folder name."""
    try:
        return check_study_name(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


class Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line, like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {message}")


def study_arguments(p: argparse.ArgumentParser) -> None:
    """How `show`, `report`, `dashboard`, `export` and `validate` name an existing study."""
    p.add_argument("study_or_db", help="a .db file, a study name under studies/, or a URL")
    p.add_argument("--study", help="study name inside the storage")
    p.add_argument("--studies-dir", default="studies")


def cost_arguments(p: argparse.ArgumentParser) -> None:
    """Money and machines (`autotune.results.cost`) for `show`, `report` and `export`."""
    p.add_argument("--load", type=positive, metavar="REQ/S", help="size for this load: the "
                   "replicas it needs at the capacity at SLO, and their cost (show, report: "
                   "the winner beside the defaults)")
    p.add_argument("--gpu-hour", type=positive, metavar="PRICE",
                   help="price of one GPU for an hour, or of the machine for a study on "
                   "vLLM's CPU build (default: the scenario's cost.gpu_hour)")
    p.add_argument("--gpus", type=whole(1), metavar="N", help="GPUs one replica holds "
                   "(default: cost.gpus, else tensor x pipeline x data parallel size; none "
                   "on vLLM's CPU build)")


def load_study(args: argparse.Namespace, *, write: bool = False) -> optuna.Study:
    """The existing study a read command (or `validate`, which stores its result) names.

    The storage is checked first, so that a missing SQLite file is reported, not created
    empty by Optuna, and a read-only or corrupt one is one line.
    """
    from pathlib import Path

    from autotune.tuning.sharing import storage

    root = Path(args.studies_dir)
    url, name = storage.locate(args.study_or_db, args.study, root)
    storage.check(url, create=False, write=write)
    from autotune.results import show  # Optuna and the records: after a refusal's line

    return show.open_existing(url, name, root)


def what_if(specs: list[str], command: str) -> list[Slo]:
    """`--slo` of show and report: the SLOs to re-rank the study under."""
    from autotune import _slo as slo

    try:
        return [slo.parse(s) for s in specs]
    except ValueError as err:
        raise ConfigError(f"{command}: --slo: {err}") from None


def console(stderr: bool = False) -> Console:
    """What a command prints to: stdout (stderr where stdout carries `--json`). On a terminal
    rich wraps lines at its width; piped or redirected, a line is never wrapped, so that
    `show | grep 'x vLLM defaults'` finds a sentence whole (rich would cut it at 80
    columns). The layout (stacked trials or the full table, each table's width) still
    follows the width rich reads: `COLUMNS` where it is set, else the terminal's, else 80."""
    from rich.console import Console

    out = Console(stderr=stderr)
    if not out.is_terminal:
        out.soft_wrap = True
    return out
