"""Quality guardrail: a fast configuration must not change the answers.

A reference is made once, by the study's first trial (vLLM's defaults): greedy
outputs of a fixed prompt set, and the log-probability of each output token
scored teacher-forced (`prompt_logprobs` over prompt + output). It is made
twice, once with all prompts batched together and once one at a time, because
batching alone changes floating-point sums: the difference between those two
runs is the noise floor, and the default thresholds sit on top of it.

Every later trial regenerates and rescores the same prompts and is compared in
two ways: agreement of the greedy outputs (common-prefix ratio and a sequence
similarity over token ids) and teacher-forced drift (mean absolute difference
of the reference tokens' log-probabilities). One flipped token early in a
generation makes agreement collapse; drift does not, so drift is the primary
signal and agreement only catches outputs that share little at all.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp

from autotune import tinymodel
from autotune.config import GuardrailSpec, Scenario
from autotune.errors import ConfigError
from autotune.measure import loadgen, watch
from autotune.measure.loadgen import Target
from autotune.measure.workloads import Tokenizer
from autotune.stored import Stored

log = logging.getLogger("autotune")
DRIFT_FLOOR = 0.01  # nats: below this, differences are rounding on any backend


@dataclass
class Sample:
    """One prompt's greedy output and the teacher-forced log-probs of its tokens."""

    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    logprobs: list[float]


@dataclass
class Reference:
    prompts: list[str]
    max_tokens: int
    samples: list[Sample]
    noise: dict[str, float]
    thresholds: dict[str, float]
    context: dict[str, Any] = field(default_factory=dict)  # model, engine, flags

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), ensure_ascii=False))

    @classmethod
    def load(cls, path: Path) -> Reference:
        raw = json.loads(path.read_text())
        raw["samples"] = [Sample(**s) for s in raw["samples"]]
        return cls(**raw)


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


async def _post(http: aiohttp.ClientSession, target: Target, body: dict[str, Any]) -> dict:
    async with http.post(target.url + "/v1/completions", json={"model": target.model, **body},
                         headers=target.headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"guardrail request failed: HTTP {resp.status}: "
                               f"{(await resp.text())[:200]}")
        return await resp.json()


async def _sample(http: aiohttp.ClientSession, target: Target, prompt: str,
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


async def _run(target: Target, prompts: list[str], max_tokens: int, batched: bool,
               reference: Reference | None = None) -> list[Sample]:
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=loadgen.engine_connector(), timeout=timeout,
                                     trust_env=False) as http:
        own = reference is None  # otherwise the reference outputs are scored instead
        if batched:
            samples = await asyncio.gather(*(_sample(http, target, p, max_tokens, own)
                                             for p in prompts))
        else:
            samples = [await _sample(http, target, p, max_tokens, own) for p in prompts]
        if reference is not None:  # also score the reference outputs under this config
            for s, ref in zip(samples, reference.samples, strict=True):
                s.logprobs = await _score(http, target, ref.prompt_ids, ref.output_ids) \
                    if ref.logprobs else []
    return list(samples)


def compare(reference: list[Sample], trial: list[Sample],
            prompts: list[str]) -> dict[str, Any]:
    """Agreement and drift of `trial` against `reference`, overall and per prompt.

    `trial[i].logprobs` must score the *reference* output of prompt i.
    """
    rows: list[dict[str, Any]] = []
    for i, (ref, got) in enumerate(zip(reference, trial, strict=True)):
        n = len(ref.output_ids)
        prefix = 0
        while prefix < min(n, len(got.output_ids)) and ref.output_ids[prefix] == \
                got.output_ids[prefix]:
            prefix += 1
        similarity = difflib.SequenceMatcher(a=ref.output_ids, b=got.output_ids,
                                             autojunk=False).ratio() if n else 1.0
        # Expected outputs written by a user carry no log-probs: drift is not measured.
        diffs = [abs(a - b) for a, b in zip(ref.logprobs, got.logprobs, strict=True)] \
            if ref.logprobs and got.logprobs else []
        rows.append({"prompt": i, "prefix_ratio": prefix / n if n else 1.0,
                     "similarity": similarity,
                     "drift": sum(diffs) / len(diffs) if diffs else 0.0,
                     "drift_max": max(diffs, default=0.0), "diverges_at": prefix,
                     "prompt_text": prompts[i][:80], "reference": ref.text[:200],
                     "output": got.text[:200]})
    agreement = sum(r["similarity"] for r in rows) / len(rows)
    return {
        "drift": sum(r["drift"] for r in rows) / len(rows),
        "drift_max": max(r["drift_max"] for r in rows),
        "agreement": agreement,
        "prefix_ratio": sum(r["prefix_ratio"] for r in rows) / len(rows),
        "worst": sorted(rows, key=lambda r: (-r["drift"], r["similarity"]))[:3],
    }


def thresholds(noise: dict[str, float], factor: float, drift: float | None,
               agreement: float | None) -> dict[str, float]:
    """Defaults relative to the noise floor: drift <= factor x noise + floor; agreement >=
    half of what two reference runs share. Explicit values win."""
    return {
        "drift": drift if drift is not None else factor * noise["drift"] + DRIFT_FLOOR,
        "agreement": agreement if agreement is not None else 0.5 * noise["agreement"],
    }


def make_reference(target: Target, prompts: list[str], max_tokens: int, *, factor: float,
                   drift: float | None, agreement: float | None,
                   context: dict[str, Any], alive: watch.Alive | None = None
                   ) -> tuple[Reference, dict[str, Any]]:
    """Two reference runs (batched, then one by one): the first is the reference, the pair
    gives the noise floor. Returns the reference and the second run's comparison.
    `alive` watches the engine (`autotune.measure.watch`): `Halted` once it names a reason.
    """
    first = watch.run(_run(target, prompts, max_tokens, batched=True), alive)
    base = Reference(prompts, max_tokens, first, {}, {}, context)
    second = watch.run(_run(target, prompts, max_tokens, batched=False, reference=base),
                       alive)
    report = compare(first, second, prompts)
    base.noise = {"drift": report["drift"], "agreement": report["agreement"]}
    base.thresholds = thresholds(base.noise, factor, drift, agreement)
    return base, report


def check(target: Target, reference: Reference,
          alive: watch.Alive | None = None) -> dict[str, Any]:
    """This configuration's outputs against the reference, with pass/fail; `alive` as in
    `make_reference`."""
    samples = watch.run(_run(target, reference.prompts, reference.max_tokens, batched=True,
                             reference=reference), alive)
    report = compare(reference.samples, samples, reference.prompts)
    return verdict(report, reference)


def verdict(report: dict[str, Any], reference: Reference) -> dict[str, Any]:
    t = reference.thresholds
    report.update(thresholds=t, noise=reference.noise,
                  passed=report["drift"] <= t["drift"] and report["agreement"] >= t["agreement"])
    return report


@dataclass(frozen=True)
class Quality(Stored):
    """The guardrail's verdict on a trial as its record keeps it: `compare`'s figures, the
    thresholds and noise floor of `verdict`, whether it passed and whether the trial made
    the reference; a check that failed to run keeps only its `error`."""

    drift: float | None = None
    drift_max: float | None = None
    agreement: float | None = None
    prefix_ratio: float | None = None
    worst: list[dict[str, Any]] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=dict)
    noise: dict[str, float] = field(default_factory=dict)
    passed: bool | None = None
    made_reference: bool | None = None
    error: str | None = None

    @property
    def checked(self) -> bool:
        """Whether the outputs were compared (not an error, nor a record without drift)."""
        return self.drift is not None


def constraints(report: Quality | dict[str, Any] | None) -> dict[str, float]:
    """Two named Optuna constraints (<= 0 is met); zeros when the guardrail is off. The
    verdict is typed (a trial's), or `check`'s plain report."""
    if not report:
        return {"quality_drift": 0.0, "quality_agreement": 0.0}
    q = report if isinstance(report, Quality) else Quality.from_dict(report)
    assert q.drift is not None and q.agreement is not None, "a verdict has both"
    return {"quality_drift": q.drift - q.thresholds["drift"],
            "quality_agreement": q.thresholds["agreement"] - q.agreement}


@dataclass
class Guard:
    """The guardrail's part in a trial: check against `reference`, or make it when None."""

    spec: GuardrailSpec
    prompts: list[str]
    reference: Reference | None = None


def reference_path(scenario: Scenario, study_dir: Path) -> Path:
    """Where the guardrail's reference lives: the scenario's file, else the study's folder."""
    return Path(scenario.guardrail.reference) if scenario.guardrail.reference \
        else study_dir / "reference.json"


def make_guard(scenario: Scenario, study_dir: Path) -> Guard | None:
    """The guardrail for this run: an existing reference is reused, else the first
    completed trial (vLLM's defaults) makes it."""
    spec = scenario.guardrail
    if not spec.enabled:
        return None
    try:
        prompts = read_prompts(spec.prompts, spec.num_prompts)
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"guardrail.prompts: cannot read {spec.prompts}: {err}") from None
    path = reference_path(scenario, study_dir)
    reference = None
    if spec.prompts and not path.exists():
        model = tinymodel.resolve(scenario.model.tiny, scenario.model.path)
        reference = expected_reference(spec.prompts, spec.num_prompts, spec.max_tokens,
                                       Tokenizer.of(model), {"model": model})
        if reference is not None:
            reference.thresholds = thresholds(reference.noise, spec.noise_factor,
                                              spec.drift_threshold, spec.agreement_threshold)
            reference.save(path)
    if path.exists() and reference is None:
        try:
            reference = Reference.load(path)
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise ConfigError(f"guardrail.reference: {path} is not a reference: {err}") from None
        if reference.prompts != prompts or reference.max_tokens != spec.max_tokens:
            raise ConfigError(f"guardrail.reference: {path} was made with other prompts or "
                              "max_tokens; remove it or point `reference` elsewhere")
        reference.thresholds = thresholds(reference.noise, spec.noise_factor,
                                          spec.drift_threshold, spec.agreement_threshold)
        log.info("guardrail: reusing the reference in %s", path)
    return Guard(spec, prompts, reference)
