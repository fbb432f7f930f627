"""The `cli` format: a shell script that starts the engine, its notes as comments. Every value
is quoted for the shell (`shlex.quote`), every note made inert."""

from __future__ import annotations

import shlex

from autotune._flags import to_args
from autotune.results.export._context import ExportContext


def render(context: ExportContext) -> str:
    """`NAME=value vllm serve MODEL \\` and one flag a line after it."""
    lines = [f"# {note}" for note in context.shell_notes]
    groups = [" ".join(shlex.quote(a) for a in to_args({k: v})) for k, v in context.flags.items()]
    lines += [context.env_prefix + (" " if context.env else "") + context.launch
              + "".join(f" \\\n    {g}" for g in groups)]
    return "\n".join(lines) + "\n"
