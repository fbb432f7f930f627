"""How the guardrail sends its prompts: through the model's chat template ("chat"), as chat
traffic does, or as they are ("plain"); whether a model has a chat template, and the
token ids of a chat-templated user turn."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.config import Scenario
from autotune.measure.workloads import Tokenizer

CHAT, PLAIN = "chat", "plain"  # how the guardrail sends its prompts


def has_chat_template(model: str) -> bool:
    """Whether the model's tokenizer carries a chat template.

    A local model folder is read the way transformers reads it (`chat_template.jinja`,
    `additional_chat_templates/*.jinja`, or `chat_template` in `tokenizer_config.json`)
    without loading the tokenizer: that import and load is about 3 s of a CPU at every
    `tune` and `--gpus` worker start, most of the start of a run whose trials are pruned
    before launch. A model named by its hub id is asked through its tokenizer."""
    folder = Path(model)
    if folder.is_dir():
        if (folder / "chat_template.jinja").is_file() or any(
                (folder / "additional_chat_templates").glob("*.jinja")):
            return True
        try:
            config = json.loads((folder / "tokenizer_config.json").read_text())
        except (OSError, ValueError):
            return False
        return bool(isinstance(config, dict) and config.get("chat_template"))
    try:
        return bool(getattr(Tokenizer.of(model).tok, "chat_template", None))
    except (OSError, ValueError):
        return False


def chosen(scenario: Scenario, model: str) -> str:
    """How a new reference sends its prompts: `guardrail.template`, where "auto" is the
    chat template when the model's tokenizer has one (a model served through the chat API
    always does), else plain."""
    asked = scenario.guardrail.template
    if asked != "auto":
        return asked
    return CHAT if has_chat_template(model) else PLAIN


def chat_ids(model: str, prompts: list[str]) -> list[list[int]]:
    """The token ids of each prompt as a chat-templated user turn (the same ids vLLM's chat
    endpoint makes)."""
    tok = Tokenizer.of(model).tok
    return [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}],
                                               tokenize=False, add_generation_prompt=True),
                       add_special_tokens=False) for p in prompts]
