"""The guardrail's prompts: the shipped set or the user's JSONL of {"prompt": ...} rows,
and the reference made from that file's expected outputs where every row has one."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from autotune.tuning.quality.reference import Reference, Sample
from autotune.tuning.quality.verdict import thresholds


def default_prompts() -> list[str]:
    text = resources.files("autotune").joinpath("data/guardrail_prompts.jsonl").read_text()
    return [json.loads(line)["prompt"] for line in text.splitlines() if line.strip()]


def read_prompts(path: str | None, limit: int) -> list[str]:
    """The shipped set, or the user's JSONL of {"prompt": ...} rows; the first `limit`."""
    if path is None:
        prompts = default_prompts()
    else:
        prompts = [row["prompt"] for row in _rows(path)]
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts[:limit]


def _rows(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def expected_reference(path: str, limit: int, max_tokens: int, tokenizer: Any,
                       context: dict[str, Any]) -> Reference | None:
    """A reference from the user's expected outputs (rows with "expected"), or None.

    Only agreement can be measured against text someone wrote: drift needs the
    reference configuration's own log-probabilities.
    """
    rows = _rows(path)[:limit]
    if not rows or not all("expected" in r for r in rows):
        return None
    samples = [Sample(tokenizer.encode(r["prompt"]), tokenizer.encode(r["expected"])[:max_tokens],
                      r["expected"], []) for r in rows]
    noise = {"drift": 0.0, "agreement": 1.0}
    return Reference([r["prompt"] for r in rows], max_tokens, samples, noise,
                     thresholds(noise, 1.0, None, None), {**context, "expected_outputs": True})
