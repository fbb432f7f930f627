"""Argument types for the command line: numbers and durations checked as they are parsed.

argparse reports a type's ArgumentTypeError as `argument --x: <message>`, which the CLI
prints as its one-line error (exit 2). Checking here, rather than where a value is used,
means a bad option stops the command before it opens a study or starts an engine: a
`--trials -1` used to be accepted silently, and a `--timeout 5x` raised a traceback only
after the scenario was read.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from autotune.config import check_study_name, parse_duration


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
