"""The `vllm-yaml` format: a config file for `vllm serve --config`, written by the YAML library.
A config file holds flags only: the environment goes on the command line its comments give."""

from __future__ import annotations

import yaml

from autotune.results.export._context import ExportContext
from autotune.results.export._provenance import inert


def render(context: ExportContext) -> str:
    env, prefix = context.env, context.env_prefix
    head = [*(f"# {note}" for note in context.shell_notes),
            "# environment (a config file cannot set it): " + (inert(prefix) if env else "none"),
            "# use: " + inert((prefix + " " if env else "") + context.launch
                              + " --config THIS_FILE")]
    body = yaml.safe_dump(context.flags, sort_keys=False, allow_unicode=True) \
        if context.flags else "{}\n"
    return "\n".join(head) + "\n" + body
