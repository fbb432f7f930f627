"""Workloads: what to send (prompts, output lengths, conversations) and when.

A workload is described by `WorkloadSpec` (the `workload:` section of a scenario,
or `autotune bench` options) and turned into plain `Session`s: a session is one
request, or for the `chat` kind one conversation whose turns are sent one after
another with the real replies appended to the history, as a chat service sees
them. Everything is seeded, so the same spec gives the same prompts.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from autotune import _traces as traces
from autotune.traffic import WorkloadSpec


@dataclass
class Turn:
    """One request: a text prompt (completions) or the new user message (chat)."""

    content: str
    max_tokens: int
    prompt_len: int | None = None  # tokens, where known before sending
    token_ids: tuple[int, ...] | None = None  # the prompt as token ids (a trace's), sent as is


@dataclass
class Session:
    """Requests sent one after another; a chat conversation keeps its history."""

    turns: list[Turn]
    system: str | None = None
    history: list[dict[str, str]] = field(default_factory=list)
    at: float | None = None  # send time (s from the start) where recorded (a trace)


class Tokenizer:
    """The model's tokenizer, loaded lazily (random prompts need exact token counts)."""

    def __init__(self, model: str):
        from transformers import AutoTokenizer

        self.tok: Any = AutoTokenizer.from_pretrained(model)
        self.specials = set(self.tok.all_special_ids)
        self.vocab = len(self.tok)

    @staticmethod
    @functools.lru_cache(maxsize=4)
    def of(model: str) -> Tokenizer:
        """The tokenizer of `model`, loaded once per process: a study builds prompts with
        it for every trial and every capacity step, and a large vocabulary (Qwen3's 151k
        entries) takes about a second to parse each time."""
        return Tokenizer(model)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def _random_ids(self, rng: np.random.Generator, n: int) -> list[int]:
        return [int(i) for i in rng.integers(0, self.vocab, size=n * 2)
                if int(i) not in self.specials][:n]

    def random_ids(self, rng: np.random.Generator, n: int) -> tuple[int, ...]:
        """`n` random token ids, none of them special (a prompt sent as ids, as vLLM's
        `timed_trace` dataset sends them)."""
        ids: list[int] = []
        while len(ids) < n:
            ids += self._random_ids(rng, n - len(ids))
        return tuple(ids)

    def random_text(self, rng: np.random.Generator, n: int) -> str:
        """Text of exactly `n` tokens when re-encoded.

        Random ids can decode to invalid UTF-8 (one U+FFFD, which re-encodes to several
        tokens) or re-merge, and cutting the re-encoded ids at `n` can split a character
        again; so, up to 10 times: re-encode, cut back until the text fits in `n` tokens,
        top up with random ids (vLLM's random dataset does the same without the cut-back).
        """
        if n <= 0:
            return ""
        ids = self._random_ids(rng, n)
        text = ""
        for _ in range(10):
            text = self.tok.decode(ids)
            ids = self.encode(text)
            if len(ids) == n:
                break
            keep = min(len(ids), n)
            while keep > 0 and len(self.encode(self.tok.decode(ids[:keep]))) > n:
                keep -= 1
            ids = ids[:keep] + self._random_ids(rng, n - keep)
        return text


def _lengths(rng: np.random.Generator, mean: int, ratio: float, n: int) -> list[int]:
    lo, hi = max(1, int(mean * (1 - ratio))), max(1, int(mean * (1 + ratio)))
    return [int(x) for x in rng.integers(lo, hi + 1, size=n)]


def build_sessions(spec: WorkloadSpec, model: str, *, count: int | None = None,
                   offset: int = 0, tokenizer: Tokenizer | None = None) -> list[Session]:
    """The sessions of `spec`; `offset` shifts the seed so warm-up and measured prompts differ."""
    rng = np.random.default_rng([spec.seed, offset])
    if spec.kind in ("random", "chat"):
        tok = tokenizer or Tokenizer.of(model)
        # The shared text (prefix, system prompt) is the same for every offset.
        shared = tok.random_text(np.random.default_rng([spec.seed, 999_999]),
                                 spec.prefix_len if spec.kind == "random" else spec.system_len)
        if spec.kind == "random":
            n = count if count is not None else spec.num_requests
            ins = _lengths(rng, spec.input_len, spec.range_ratio, n)
            outs = _lengths(rng, spec.output_len, spec.range_ratio, n)
            return [Session([Turn(shared + tok.random_text(rng, i), o, spec.prefix_len + i)])
                    for i, o in zip(ins, outs, strict=True)]
        sessions = []
        for _ in range(count if count is not None else spec.conversations):
            ins = _lengths(rng, spec.input_len, spec.range_ratio, spec.turns)
            outs = _lengths(rng, spec.output_len, spec.range_ratio, spec.turns)
            turns = [Turn(tok.random_text(rng, i), o) for i, o in zip(ins, outs, strict=True)]
            sessions.append(Session(turns, system=shared or None))
        return sessions
    if spec.kind == "trace":
        n = count if count is not None else spec.num_requests
        return trace_sessions(spec, tokenizer or Tokenizer.of(model), n, offset)
    if spec.kind == "text":
        items = _read_jsonl(spec, dataset_path(spec.dataset or ""))
    else:
        items = _read_jsonl(spec, Path(spec.path or "")) if spec.kind == "jsonl" \
            else _read_sharegpt(spec, model)
    if not items:
        raise ValueError(f"{spec.path}: no usable prompts")
    n = count if count is not None else spec.num_requests
    order = rng.permutation(len(items)) if n <= len(items) else rng.integers(0, len(items), n)
    return [items[int(i)] for i in order[:n]]


def trace_sessions(spec: WorkloadSpec, tok: Tokenizer, n: int, offset: int) -> list[Session]:
    """`n` requests of the trace (`traces.Trace.sample`), due at their recorded offsets
    divided by `time_scale` (all at once when it is infinite), their prompts made of token
    blocks: the same block id gives the same tokens, so shared ids are shared prefixes.
    `offset` seeds the blocks' tokens, so each capacity step brings its own prefixes and is
    not flattered by the previous step's cache."""
    trace = traces.of(spec)
    blocks: dict[int, tuple[int, ...]] = {}

    def block(key: int) -> tuple[int, ...]:
        if key not in blocks:
            rng = np.random.default_rng([spec.seed, offset, key])
            blocks[key] = tok.random_ids(rng, spec.block_tokens)
        return blocks[key]

    sessions = []
    for at, req in trace.sample(n):
        ids = tuple(t for key in req.blocks for t in block(key))[:req.input_tokens]
        due = 0.0 if math.isinf(spec.time_scale) else at / spec.time_scale
        sessions.append(Session([Turn("", max(1, req.output_tokens), req.input_tokens, ids)],
                                at=due))
    return sessions


def pace(spec: WorkloadSpec) -> float | None:
    """A trace's requests per second at its recorded pace (None for other workloads): a
    capacity search offers rates of this times a time-scale factor."""
    if spec.kind != "trace":
        return None
    return traces.of(spec).mean_rate


def replayed(spec: WorkloadSpec) -> traces.Replay | None:
    """What a trace workload replays of its trace (`traces.Trace.replay`; None for other
    workloads): a run says which part of the trace it measured."""
    if spec.kind != "trace":
        return None
    return traces.of(spec).replay(spec.num_requests)


def dataset_path(name: str) -> Path:
    """A shipped real-text workload (`kind: text`), built by scripts/make_workloads.py."""
    return Path(str(resources.files("autotune").joinpath(f"data/workloads/{name}.jsonl")))


def _read_jsonl(spec: WorkloadSpec, path: Path) -> list[Session]:
    """Lines of {"prompt": text} or {"messages": [...]}, optional "max_tokens"/"output_len"
    (or "output_tokens", as `vllm bench serve`'s custom dataset names it)."""
    sessions = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            raise ValueError(f"{path}:{number}: not JSON ({err})") from None
        out = int(row.get("max_tokens") or row.get("output_len") or row.get("output_tokens")
                  or spec.output_len)
        if "prompt" in row:
            sessions.append(Session([Turn(str(row["prompt"]), out)]))
        elif "messages" in row and spec.api != "chat":
            raise ValueError(f"{path}:{number}: 'messages' rows need `api: chat`")
        elif "messages" in row:
            msgs = list(row["messages"])
            system = next((m["content"] for m in msgs if m.get("role") == "system"), None)
            rest = [m for m in msgs if m.get("role") != "system"]
            if not rest or rest[-1].get("role") != "user":
                raise ValueError(f"{path}:{number}: messages must end with a user message")
            sessions.append(Session([Turn(rest[-1]["content"], out)], system=system,
                                    history=rest[:-1]))
        else:
            raise ValueError(f"{path}:{number}: needs a 'prompt' or 'messages' key")
    return sessions


def _read_sharegpt(spec: WorkloadSpec, model: str) -> list[Session]:
    """ShareGPT JSON: the first human turn is the prompt, the reply's length the output length."""
    data = json.loads(Path(spec.path or "").read_text())
    tok = Tokenizer.of(model)
    sessions = []
    for entry in data:
        conv = entry.get("conversations") or entry.get("conversation") or []
        if len(conv) < 2:
            continue
        prompt, reply = conv[0].get("value", ""), conv[1].get("value", "")
        out = len(tok.encode(reply))
        if prompt and out >= 1:  # vLLM's ShareGPT sampler also drops empty replies
            sessions.append(Session([Turn(prompt, out, len(tok.encode(prompt)))]))
    return sessions
