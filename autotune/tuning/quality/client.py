"""The guardrail's HTTP client for the engine's OpenAI endpoints: the engine's context
length, greedy samples with the teacher-forced log-probabilities of their tokens, and the
task check's answers. A request the engine refuses as built is `Refused`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiohttp

from autotune.measure import loadgen
from autotune.measure.loadgen import Target
from autotune.tuning.quality.reference import Sample


class Refused(RuntimeError):
    """The engine refused a request the guardrail built (HTTP 4xx): autotune's problem
    (a prompt longer than the engine's context, a parameter it does not take), not the
    configuration's, so the trial is not pruned for it."""


async def _post(http: aiohttp.ClientSession, target: Target, body: dict[str, Any]) -> dict:
    async with http.post(target.url + "/v1/completions", json={"model": target.model, **body},
                         headers=target.headers) as resp:
        if resp.status != 200:
            kind = Refused if 400 <= resp.status < 500 else RuntimeError
            raise kind(f"guardrail request failed: HTTP {resp.status}: "
                       f"{(await resp.text())[:200]}")
        return await resp.json()


async def engine_context(target: Target) -> int | None:
    """The engine's context length (`max_model_len` of `/v1/models`), None if unsaid."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30),
                                     trust_env=False) as http:
        async with http.get(target.url + "/v1/models", headers=target.headers) as resp:
            if resp.status != 200:
                return None
            cards = (await resp.json()).get("data") or []
    found = [c.get("max_model_len") for c in cards if isinstance(c, dict)]
    return next((int(n) for n in found if isinstance(n, int)), None)


async def _sample(http: aiohttp.ClientSession, target: Target, prompt: str | list[int],
                  max_tokens: int, score: bool) -> Sample:
    gen = await _post(http, target, {"prompt": prompt, "max_tokens": max_tokens,
                                     "temperature": 0, "return_token_ids": True})
    choice = gen["choices"][0]
    prompt_ids, output_ids = choice["prompt_token_ids"], choice["token_ids"] or []
    logprobs = await _score(http, target, prompt_ids, output_ids) if score else []
    return Sample(prompt_ids, output_ids, choice["text"], logprobs)


async def _score(http: aiohttp.ClientSession, target: Target, prompt_ids: list[int],
                 output_ids: list[int]) -> list[float]:
    """Log-probs of `output_ids` after `prompt_ids`, teacher-forced."""
    if not output_ids:
        return []
    scored = await _post(http, target, {"prompt": prompt_ids + output_ids, "max_tokens": 1,
                                        "temperature": 0, "prompt_logprobs": 0})
    entries = scored["choices"][0]["prompt_logprobs"][len(prompt_ids):]
    return [float(e[str(t)]["logprob"]) for e, t in zip(entries, output_ids, strict=True)]


async def samples(target: Target, prompts: Sequence[str | list[int]], max_tokens: int,
                  batched: bool, scored: list[Sample] | None = None) -> list[Sample]:
    """Greedy samples of `prompts` (text, or token ids already templated); with `scored`
    (another run's samples of the same prompts) those outputs are scored instead of the
    new ones."""
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=loadgen.engine_connector(), timeout=timeout,
                                     trust_env=False) as http:
        own = scored is None
        if batched:
            got = await asyncio.gather(*(_sample(http, target, p, max_tokens, own)
                                         for p in prompts))
        else:
            got = [await _sample(http, target, p, max_tokens, own) for p in prompts]
        if scored is not None:  # also score the reference outputs under this config
            for s, ref in zip(got, scored, strict=True):
                s.logprobs = await _score(http, target, ref.prompt_ids, ref.output_ids) \
                    if ref.logprobs else []
    return list(got)


async def answers(target: Target, prompts: Sequence[str | list[int]], max_tokens: int,
                  limit: int) -> list[str]:
    """Greedy answers of the task check, `limit` requests at a time (0: all at once)."""
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=loadgen.engine_connector(limit),
                                     timeout=timeout, trust_env=False) as http:
        async def one(prompt: str | list[int]) -> str:
            gen = await _post(http, target, {"prompt": prompt, "max_tokens": max_tokens,
                                             "temperature": 0})
            return str(gen["choices"][0]["text"])
        return list(await asyncio.gather(*(one(p) for p in prompts)))
