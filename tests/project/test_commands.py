"""The command registry is plain imports: every subcommand module (one that defines `HELP`)
is imported by `autotune.cli.main` by name and listed in `COMMANDS`, so the layer and
circle checks of tests/project/test_layers.py read the commands' imports as they read any
other module's, and `--help` lists every command."""

from __future__ import annotations

import ast

from autotune.cli import main
from tests.project.test_layers import PACKAGE, _graph


def _command_modules() -> set[str]:
    found = set()
    for path in (PACKAGE / "cli").glob("*.py"):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "HELP" for t in n.targets)
               for n in tree.body):
            found.add(f"autotune.cli.{path.stem}")
    return found


def test_every_command_is_imported_by_name():
    commands = _command_modules()
    assert len(commands) == len(main.COMMANDS) == 12
    assert {m.__name__ for m in main.COMMANDS.values()} == commands
    assert commands <= _graph()["autotune.cli.main"]  # seen by the layer checks


def test_help_lists_every_command():
    text = main.build_parser().format_help()
    assert all(name in text for name in main.COMMANDS)
