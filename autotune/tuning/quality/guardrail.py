"""Quality guardrail: a fast configuration must not make the answers worse.

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
signal of change and agreement only catches outputs that share little at all.

Change is not harm: the task check (`autotune.tuning.quality.tasks`) asks the same scorable
questions of the reference and of every trial, and `autotune.tuning.quality.accuracy` turns the
paired answers and the drift into the verdict a user reads: unchanged, changed within the
accuracy budget, or worse. Prompts and questions go through the model's chat template
where it has one, as chat traffic does.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
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
from autotune.tuning.quality import accuracy, tasks

log = logging.getLogger("autotune")
DRIFT_FLOOR = 0.01  # nats: below this, differences are rounding on any backend
CHAT, PLAIN = "chat", "plain"  # how the guardrail sends its prompts


@dataclass
class Sample:
    """One prompt's greedy output and the teacher-forced log-probs of its tokens."""

    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    logprobs: list[float]


@dataclass
class TaskAnswers:
    """The reference configuration's answers to the task check (`autotune.tuning.quality.tasks`):
    which items (count and seed), its answer texts and which of them were right."""

    items: int
    seed: int
    max_tokens: int
    outputs: list[str]
    correct: list[bool]
    left_out: list[int] = field(default_factory=list)  # items too long for the engine


@dataclass
class Reference:
    """What every trial is compared with: the reference configuration's greedy outputs
    and their log-probs, the noise floor and thresholds, how the prompts were sent
    (`template`: "chat" through the model's chat template, "plain" as they are; a
    reference written before templates existed reads as plain) and its task answers
    (None where it was made before the task check, or without it)."""

    prompts: list[str]
    max_tokens: int
    samples: list[Sample]
    noise: dict[str, float]
    thresholds: dict[str, float]
    context: dict[str, Any] = field(default_factory=dict)  # model, engine, flags
    template: str = PLAIN
    tasks: TaskAnswers | None = None
    # Prompts too long for the reference engine's context: their samples are empty and
    # no check compares them.
    left_out: list[int] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), ensure_ascii=False))

    @classmethod
    def load(cls, path: Path) -> Reference:
        return cls.of(json.loads(path.read_text()))

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Reference:
        """A reference from its JSON data (`save`'s), of any version."""
        raw = dict(raw)
        raw["samples"] = [Sample(**s) for s in raw["samples"]]
        if raw.get("tasks") is not None:
            raw["tasks"] = TaskAnswers(**raw["tasks"])
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


def fitting(lengths: Sequence[int], answer: int, context: int | None) -> list[int]:
    """The items whose prompt (`lengths`, tokens) and `answer` tokens fit `context`; one
    more token for the scoring request, which sends prompt + answer and asks for one."""
    return [i for i, n in enumerate(lengths) if context is None or n + answer + 1 <= context]


def left_out_text(what: str, skipped: Sequence[int], lengths: Sequence[int], answer: int,
                  context: int | None) -> str | None:
    """`prompt 13 (2,039 tokens + 48 to answer): longer than the engine's 2,048-token
    context`, naming at most three; None when nothing was left out."""
    if not skipped:
        return None
    named = ", ".join(f"{i + 1} ({lengths[i]:,} tokens)" for i in list(skipped)[:3])
    more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return (f"{what} {named}{more} + {answer} to answer: longer than the engine's "
            f"{context or 0:,}-token context, left out")


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


async def _run(target: Target, prompts: Sequence[str | list[int]], max_tokens: int,
               batched: bool, scored: list[Sample] | None = None) -> list[Sample]:
    """Greedy samples of `prompts` (text, or token ids already templated); with `scored`
    (another run's samples of the same prompts) those outputs are scored instead of the
    new ones."""
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=loadgen.engine_connector(), timeout=timeout,
                                     trust_env=False) as http:
        own = scored is None
        if batched:
            samples = await asyncio.gather(*(_sample(http, target, p, max_tokens, own)
                                             for p in prompts))
        else:
            samples = [await _sample(http, target, p, max_tokens, own) for p in prompts]
        if scored is not None:  # also score the reference outputs under this config
            for s, ref in zip(samples, scored, strict=True):
                s.logprobs = await _score(http, target, ref.prompt_ids, ref.output_ids) \
                    if ref.logprobs else []
    return list(samples)


async def _answer(target: Target, prompts: Sequence[str | list[int]], max_tokens: int,
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


def compare(reference: list[Sample], trial: list[Sample],
            prompts: list[str]) -> Quality:
    """Agreement and drift of `trial` against `reference`, overall and per prompt (the
    three worst), not yet judged.

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
    return Quality(drift=sum(r["drift"] for r in rows) / len(rows),
                   drift_max=max(r["drift_max"] for r in rows),
                   agreement=sum(r["similarity"] for r in rows) / len(rows),
                   prefix_ratio=sum(r["prefix_ratio"] for r in rows) / len(rows),
                   worst=sorted(rows, key=lambda r: (-r["drift"], r["similarity"]))[:3])


def thresholds(noise: dict[str, float], factor: float, drift: float | None,
               agreement: float | None) -> dict[str, float]:
    """Defaults relative to the noise floor: drift <= factor x noise + floor; agreement >=
    half of what two reference runs share. Explicit values win."""
    return {
        "drift": drift if drift is not None else factor * noise["drift"] + DRIFT_FLOOR,
        "agreement": agreement if agreement is not None else 0.5 * noise["agreement"],
    }


def make_reference(target: Target, guard: Guard, context: dict[str, Any],
                   alive: watch.Alive | None = None) -> tuple[Reference, Quality]:
    """Two reference runs (batched, then one by one; the task check all at once, then in
    four waves, so each item shares its batch with others): the first is the reference,
    the pair gives the noise floor. Items longer than the engine's context are left out
    and named. Returns the reference and the reference trial's own verdict (the second
    run against the first). `alive` watches the engine (`autotune.measure.watch`):
    `Halted` once it names a reason.
    """
    spec = guard.spec
    window = watch.run(engine_context(target), alive)
    sent = guard.sent(guard.prompts)
    lengths = guard.lengths(sent)
    keep = fitting(lengths, spec.max_tokens, window)
    if not keep:
        raise Refused(left_out_text("every guardrail prompt:", range(len(sent)), lengths,
                                    spec.max_tokens, window) or "no prompt")
    asked, texts = [sent[i] for i in keep], [guard.prompts[i] for i in keep]
    first = watch.run(_run(target, asked, spec.max_tokens, batched=True), alive)
    second = watch.run(_run(target, asked, spec.max_tokens, batched=False, scored=first),
                       alive)
    report = compare(first, second, texts)
    skipped = [i for i in range(len(sent)) if i not in keep]
    by_index = dict(zip(keep, first, strict=True))
    base = Reference(guard.prompts, spec.max_tokens,
                     [by_index.get(i, Sample([], [], "", [])) for i in range(len(sent))],
                     {"drift": report.drift or 0.0, "agreement": report.agreement or 0.0},
                     {}, context, template=guard.template, left_out=skipped)
    base.thresholds = thresholds(base.noise, spec.noise_factor, spec.drift_threshold,
                                 spec.agreement_threshold)
    notes = [left_out_text("guardrail prompt", skipped, lengths, spec.max_tokens, window)]
    tasks_score = None
    if spec.tasks:
        items = tasks.generate(spec.tasks, spec.task_seed)
        every = guard.sent([i.prompt for i in items])
        task_lengths = guard.lengths(every)
        ok = fitting(task_lengths, spec.task_tokens, window)
        t0 = time.monotonic()
        got = watch.run(_answer(target, [every[i] for i in ok], spec.task_tokens, limit=0),
                        alive)
        seconds = time.monotonic() - t0
        again = watch.run(_answer(target, [every[i] for i in ok], spec.task_tokens,
                                  limit=max(1, len(ok) // 4)), alive)
        answers = dict(zip(ok, got, strict=True))
        outputs = [answers.get(i, "") for i in range(len(items))]
        right = [i in answers and tasks.correct(item, answers[i])
                 for i, item in enumerate(items)]
        base.tasks = TaskAnswers(spec.tasks, spec.task_seed, spec.task_tokens, outputs, right,
                                 [i for i in range(len(items)) if i not in answers])
        tasks_score = _task_score(base.tasks, items, ok, again, seconds)
        notes.append(left_out_text("task item", base.tasks.left_out, task_lengths,
                                   spec.task_tokens, window))
    quality = _verdict(report, base, tasks_score, spec, made_reference=True)
    return base, replace(quality, left_out=[n for n in notes if n])


def check(target: Target, guard: Guard, alive: watch.Alive | None = None) -> Quality:
    """This configuration's outputs and task answers against the reference, with its
    verdict; items longer than this engine's context (or left out of the reference) are
    left out of both sides and named. `alive` as in `make_reference`."""
    reference = guard.reference
    assert reference is not None, "check needs a reference; make_reference makes one"
    window = watch.run(engine_context(target), alive)
    sent = guard.sent(reference.prompts)
    lengths = guard.lengths(sent)
    fits = fitting(lengths, reference.max_tokens, window)
    keep = [i for i in fits if i not in reference.left_out]
    if not keep:
        raise Refused(left_out_text("every guardrail prompt:", range(len(sent)), lengths,
                                    reference.max_tokens, window) or "no prompt")
    ref_samples = [reference.samples[i] for i in keep]
    samples = watch.run(_run(target, [sent[i] for i in keep], reference.max_tokens,
                             batched=True, scored=ref_samples), alive)
    report = compare(ref_samples, samples, [reference.prompts[i] for i in keep])
    notes = [left_out_text("guardrail prompt", [i for i in range(len(sent)) if i not in fits],
                           lengths, reference.max_tokens, window)]
    tasks_score = None
    if reference.tasks is not None and guard.spec.tasks:
        ref = reference.tasks
        items = tasks.generate(ref.items, ref.seed)
        every = guard.sent([i.prompt for i in items])
        task_lengths = guard.lengths(every)
        ok_here = fitting(task_lengths, ref.max_tokens, window)
        ok = [i for i in ok_here if i not in ref.left_out]
        t0 = time.monotonic()
        answers = watch.run(_answer(target, [every[i] for i in ok], ref.max_tokens, limit=0),
                            alive)
        tasks_score = _task_score(ref, items, ok, answers, time.monotonic() - t0)
        notes.append(left_out_text("task item", [i for i in range(len(items))
                                                 if i not in ok_here],
                                   task_lengths, ref.max_tokens, window))
    quality = _verdict(report, reference, tasks_score, guard.spec)
    return replace(quality, left_out=[n for n in notes if n])


def _task_score(ref: TaskAnswers, items: list[tasks.Item], keep: Sequence[int],
                answers: list[str], seconds: float) -> accuracy.TaskScore:
    """The paired score over the items in `keep` (`answers` are theirs, in order)."""
    right = [tasks.correct(items[i], a) for i, a in zip(keep, answers, strict=True)]
    changed = sum(ref.outputs[i].strip() != a.strip() for i, a in zip(keep, answers,
                                                                       strict=True))
    return accuracy.score([ref.correct[i] for i in keep], right, changed, seconds)


def _verdict(report: Quality, reference: Reference, tasks_score: accuracy.TaskScore | None,
             spec: GuardrailSpec, made_reference: bool | None = None) -> Quality:
    judged = verdict(report, reference)
    said = accuracy.verdict(bool(judged.passed), tasks_score, spec.max_accuracy_drop)
    passed = said == accuracy.UNCHANGED if spec.require == "unchanged" \
        else said != accuracy.WORSE
    return replace(judged, passed=passed, verdict=said, template=reference.template,
                   tasks=tasks_score,
                   budget=spec.max_accuracy_drop if tasks_score is not None else None,
                   require=spec.require, made_reference=made_reference)


def verdict(report: Quality, reference: Reference) -> Quality:
    """`compare`'s report judged by the noise floor's thresholds alone (drift and
    agreement), the guardrail's rule before the task check; `check` adds the task check."""
    t = reference.thresholds
    return replace(report, thresholds=t, noise=reference.noise,
                   passed=(report.drift or 0.0) <= t["drift"]
                   and (report.agreement or 0.0) >= t["agreement"])


@dataclass(frozen=True)
class Quality(Stored):
    """The guardrail's verdict on a trial as its record keeps it: `compare`'s figures, the
    thresholds and noise floor, the task check (`tasks`: accuracy and the paired
    difference against the reference), the verdict (`accuracy.UNCHANGED`, `CHANGED`,
    `WORSE`) under the accuracy `budget` (points) and what the scenario `require`d,
    whether it passed (not rejected) and whether the trial made the reference; a check
    that failed to run keeps only its `error`. Records written before the task check have
    no verdict: `passed` alone says what the drift rule decided."""

    NESTED = {"tasks": accuracy.TaskScore}

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
    verdict: str | None = None
    template: str | None = None
    tasks: accuracy.TaskScore | None = None
    budget: float | None = None
    require: str | None = None
    left_out: list[str] = field(default_factory=list)  # items too long for the engine
    # Why the check could not run for a reason of autotune's (a request the engine
    # refused as built): the trial stands, unchecked, rather than pruned.
    not_checked: str | None = None

    @property
    def checked(self) -> bool:
        """Whether the outputs were compared (not an error, nor a record without drift)."""
        return self.drift is not None

    def noise_multiple(self) -> str:
        """The drift as a multiple of the noise floor, e.g. "700x the noise floor"."""
        floor = self.noise.get("drift")
        if self.drift is None or floor is None:
            return ""
        if floor <= 0:
            return "noise floor 0" if self.drift <= 0 else "over a noise floor of 0"
        return f"{self.drift / floor:.0f}x the noise floor"

    def short(self) -> str:
        """A table cell: the verdict and the paired difference ("changed -1.0 (-2.9..+0.9)"),
        or the drift of a record without a verdict ("0.070"), "-" when not checked."""
        if self.verdict is None:
            return f"{self.drift:.3f}" if self.drift is not None else "-"
        t = self.tasks
        cell = {accuracy.CHANGED: "changed"}.get(self.verdict, self.verdict)
        if self.passed is False:
            cell = cell.upper()
        if t is not None and (t.changed or t.lost or t.gained):
            cell += (f" {t.difference:+.1f} ({t.difference_low:+.1f}.."
                     f"{t.difference_high:+.1f})")
        return cell

    def words(self) -> str:
        """The verdict in words: the task check's figures and the budget, or what the
        drift rule said for a record without a verdict."""
        if self.error or self.not_checked:
            return f"not checked: {self.error or self.not_checked}"
        if self.verdict is None:
            if not self.checked or self.passed is None:
                return ""
            return "passed" if self.passed else "rejected"
        said = accuracy.in_words(self.verdict, self.tasks, self.budget)
        if self.require == "unchanged" and self.verdict != accuracy.UNCHANGED:
            said += " (rejected: the scenario requires unchanged)"
        return "; ".join([said, *self.left_out])


def constraints(report: Quality | None) -> dict[str, float]:
    """One named Optuna constraint, `quality` (<= 0 is met): 1 when the guardrail rejected
    the trial, 0 otherwise, when it is off or when it could not run for autotune's own
    reason (`not_checked`: no verdict, so no rejection)."""
    if report is None or report.not_checked:
        return {"quality": 0.0}
    assert report.passed is not None, "a verdict says whether it passed"
    return {"quality": 0.0 if report.passed else 1.0}


@dataclass
class Guard:
    """The guardrail's part in a trial: check against `reference`, or make it when None.
    `template` says how prompts are sent; with "chat", `model`'s chat template wraps each
    one as a user turn, as vLLM's chat endpoint would (`sent`)."""

    spec: GuardrailSpec
    prompts: list[str]
    reference: Reference | None = None
    template: str = PLAIN
    model: str | None = None

    def sent(self, prompts: list[str]) -> list[str] | list[list[int]]:
        """`prompts` as they go to /v1/completions: the texts (plain) or the token ids
        of the chat-templated user turn (the same ids vLLM's chat endpoint makes)."""
        if self.template == PLAIN:
            return prompts
        assert self.model is not None, "a chat-templated guard knows its model"
        tok = Tokenizer.of(self.model).tok
        return [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}],
                                                   tokenize=False, add_generation_prompt=True),
                           add_special_tokens=False) for p in prompts]

    def lengths(self, sent: Sequence[str | list[int]]) -> list[int]:
        """Tokens of each prompt as `sent` (ids are counted; texts are encoded as vLLM
        encodes a completion's prompt); 0 each without a model to count with."""
        if self.model is None:
            return [len(p) if isinstance(p, list) else 0 for p in sent]
        tok = Tokenizer.of(self.model).tok
        return [len(p) if isinstance(p, list) else len(tok.encode(p)) for p in sent]


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


def reference_path(scenario: Scenario, study_dir: Path) -> Path:
    """Where the guardrail's reference lives: the scenario's file, else the study's folder."""
    return Path(scenario.guardrail.reference) if scenario.guardrail.reference \
        else study_dir / "reference.json"


def _template(scenario: Scenario, model: str) -> str:
    """How a new reference sends its prompts: `guardrail.template`, where "auto" is the
    chat template when the model's tokenizer has one (a model served through the chat API
    always does), else plain."""
    asked = scenario.guardrail.template
    if asked != "auto":
        return asked
    return CHAT if has_chat_template(model) else PLAIN


def make_guard(scenario: Scenario, study_dir: Path) -> Guard | None:
    """The guardrail for this run: an existing reference is reused (sent as it was made,
    chat-templated or plain), else the first completed trial (vLLM's defaults) makes it."""
    spec = scenario.guardrail
    if not spec.enabled:
        return None
    try:
        prompts = read_prompts(spec.prompts, spec.num_prompts)
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"guardrail.prompts: cannot read {spec.prompts}: {err}") from None
    path = reference_path(scenario, study_dir)
    model = tinymodel.resolve(scenario.model.tiny, scenario.model.path)
    reference = None
    if spec.prompts and not path.exists():
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
        if spec.template not in ("auto", reference.template):
            raise ConfigError(f"guardrail.template: {path} was made with {reference.template} "
                              f"prompts, not {spec.template}; a new study (or `reference` "
                              "pointing elsewhere) makes one that way")
        reference.thresholds = thresholds(reference.noise, spec.noise_factor,
                                          spec.drift_threshold, spec.agreement_threshold)
        log.info("guardrail: reusing the reference in %s (%s prompts%s)", path,
                 reference.template, "" if reference.tasks else ", no task check")
    template = reference.template if reference is not None else _template(scenario, model)
    return Guard(spec, prompts, reference, template, model)
