#!/usr/bin/env python3
"""Build the shipped real-text workloads (autotune/data/workloads/*.jsonl), offline.

The text is the project's own (Apache-2.0): the functions of autotune's source and the
prose of its docs, so the files may be redistributed with it. Two kinds:

- `edit`: the answer copies much of the prompt (rewrite a function with a name changed,
  return a paragraph with its typos corrected, list the lines that mention a word): where
  prompt-lookup (ngram) speculation pays;
- `chat`: a passage of the docs and an open request that no copy answers (a question to the
  author, a slogan, a poem): little overlap.

Each prompt is about 512 tokens of SmolLM2's tokenizer (the articles' load; other tokenizers
count within some 20 % of it) and asks for up to 128 tokens. Deterministic: the same sources
and seed give the same files. Usage: scripts/make_workloads.py [--model DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
from pathlib import Path

from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]
TARGET, SLACK, MAX_TOKENS, COUNT = 512, 96, 128, 48


def functions(tok: AutoTokenizer) -> list[str]:
    """Top-level functions and methods of autotune's source, 250-500 tokens each."""
    out = []
    for path in sorted((ROOT / "autotune").rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                body = "\n".join(lines[node.lineno - 1:node.end_lineno])
                body = re.sub(r"^ {4,8}(?=(def|async def) )", "", body)  # methods dedented
                n = len(tok.encode(body))
                if 250 <= n <= TARGET - 60:
                    out.append(body)
    return out


def paragraphs() -> list[str]:
    """Prose paragraphs of the docs: no tables, lists, headings or code."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.split(r"\n\s*\n", path.read_text()):
            block = " ".join(block.split())
            if len(block) > 300 and not re.match(r"[#|`>*-]|\d+\.", block) \
                    and "```" not in block and "|" not in block:
                out.append(block)
    return out


def passage(rng: random.Random, paras: list[str], tok: AutoTokenizer, budget: int) -> str:
    """Consecutive paragraphs from a random start, up to `budget` tokens."""
    start = rng.randrange(len(paras))
    text = ""
    for p in paras[start:] + paras[:start]:
        more = (text + "\n\n" + p).strip()
        if len(tok.encode(more)) > budget:
            break
        text = more
    return text or paras[start]


def typos(rng: random.Random, text: str, n: int = 4) -> str:
    """`text` with `n` words misspelt (two letters swapped)."""
    words = text.split(" ")
    picks = [i for i, w in enumerate(words) if w.isalpha() and len(w) > 5]
    for i in rng.sample(picks, min(n, len(picks))):
        w = words[i]
        j = rng.randrange(1, len(w) - 2)
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    return " ".join(words)


def edit_prompt(rng: random.Random, funcs: list[str], paras: list[str],
                tok: AutoTokenizer) -> str:
    task = rng.randrange(3)
    if task == 0:
        body = rng.choice(funcs)
        # names the function assigns (`name = ...`, `name: T = ...`), not `==` or kwargs
        names = sorted(set(re.findall(r"^\s+([a-z_][a-z0-9_]{2,})\s*(?::[^=\n]+)?=(?!=)",
                                      body, re.M)))
        name = rng.choice(names) if names else "value"
        return (f"Rewrite this Python function with the variable `{name}` renamed to "
                f"`{name}_new`. Keep everything else exactly as it is and return the whole "
                f"function.\n\n```python\n{body}\n```")
    text = passage(rng, paras, tok, TARGET - 60)
    if task == 1:
        return ("Correct the spelling mistakes in the following text and return the whole "
                f"text, unchanged otherwise.\n\n{typos(rng, text)}")
    return ("Copy the following text, putting each sentence on a line of its own.\n\n"
            f"{text}")


OPEN = [
    "Without quoting it, what is one question you would ask the author of this text?",
    "Write a short poem inspired by this text, in your own words.",
    "Suggest a name and a one-line slogan for a product based on this idea.",
    "Explain to a ten-year-old, in your own words, why anyone would care about this.",
    "What could go wrong if someone followed this advice blindly? Answer briefly.",
    "Give three ideas for a blog post title about this topic.",
]


def chat_prompt(rng: random.Random, paras: list[str], tok: AutoTokenizer) -> str:
    return f"{passage(rng, paras, tok, TARGET - 40)}\n\n{rng.choice(OPEN)}"


def build(model: str, out: Path, seed: int = 0) -> dict[str, int]:
    tok = AutoTokenizer.from_pretrained(model)
    funcs, paras = functions(tok), paragraphs()
    counts = {}
    for kind in ("edit", "chat"):
        rng = random.Random(f"{seed}:{kind}")
        rows: list[dict[str, object]] = []
        seen: set[str] = set()
        for _ in range(COUNT * 100):
            if len(rows) == COUNT:
                break
            prompt = edit_prompt(rng, funcs, paras, tok) if kind == "edit" \
                else chat_prompt(rng, paras, tok)
            n = len(tok.encode(prompt))
            if abs(n - TARGET) <= SLACK and prompt not in seen:
                seen.add(prompt)
                # `prompt` is the user's message: autotune sends it through the chat API,
                # `vllm bench serve` reads the same file as its `custom` dataset.
                rows.append({"prompt": prompt, "output_tokens": MAX_TOKENS})
        if len(rows) < COUNT:
            raise SystemExit(f"{kind}: only {len(rows)} distinct prompts of about {TARGET} "
                             "tokens in the sources")
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{kind}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        counts[kind] = len(rows)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(Path.home() / ".cache/autotune/models/smollm2-135m"))
    ap.add_argument("--out", type=Path, default=ROOT / "autotune/data/workloads")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(build(args.model, args.out, args.seed))


if __name__ == "__main__":
    main()
