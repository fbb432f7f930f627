"""The guardrail on a served engine: the reference made by the first completed trial
(`make_reference`) and every later trial checked against it (`check`).

The reference is made once, by the study's first trial (vLLM's defaults): greedy
outputs of a fixed prompt set, and the log-probability of each output token
scored teacher-forced (`prompt_logprobs` over prompt + output). It is made
twice, once with all prompts batched together and once one at a time, because
batching alone changes floating-point sums: the difference between those two
runs is the noise floor, and the default thresholds sit on top of it.

Every later trial regenerates and rescores the same prompts and is compared in
two ways (`comparison`): agreement of the greedy outputs (common-prefix ratio and a
sequence similarity over token ids) and teacher-forced drift (mean absolute difference
of the reference tokens' log-probabilities). One flipped token early in a
generation makes agreement collapse; drift does not, so drift is the primary
signal of change and agreement only catches outputs that share little at all.

Change is not harm: the task check (`autotune.tuning.quality.tasks`) asks the same scorable
questions of the reference and of every trial, and `autotune.tuning.quality.verdict` turns the
paired answers and the drift into the verdict a user reads: unchanged, changed within the
accuracy budget, or worse. Prompts and questions go through the model's chat template
where it has one, as chat traffic does (`template`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from autotune.measure import watch
from autotune.measure.loadgen import Target
from autotune.tuning.quality import client, tasks
from autotune.tuning.quality._comparison import compare
from autotune.tuning.quality._contextfit import fitting, left_out_text
from autotune.tuning.quality.client import Refused, engine_context
from autotune.tuning.quality.guard import Guard
from autotune.tuning.quality.reference import Reference, Sample, TaskAnswers
from autotune.tuning.quality.verdict import Quality, judge, task_score, thresholds


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
    first = watch.run(client.samples(target, asked, spec.max_tokens, batched=True), alive)
    second = watch.run(client.samples(target, asked, spec.max_tokens, batched=False,
                                      scored=first), alive)
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
        got = watch.run(client.answers(target, [every[i] for i in ok], spec.task_tokens,
                                       limit=0), alive)
        seconds = time.monotonic() - t0
        again = watch.run(client.answers(target, [every[i] for i in ok], spec.task_tokens,
                                         limit=max(1, len(ok) // 4)), alive)
        answers = dict(zip(ok, got, strict=True))
        outputs = [answers.get(i, "") for i in range(len(items))]
        right = [i in answers and tasks.correct(item, answers[i])
                 for i, item in enumerate(items)]
        base.tasks = TaskAnswers(spec.tasks, spec.task_seed, spec.task_tokens, outputs, right,
                                 [i for i in range(len(items)) if i not in answers])
        tasks_score = task_score(base.tasks, items, ok, again, seconds)
        notes.append(left_out_text("task item", base.tasks.left_out, task_lengths,
                                   spec.task_tokens, window))
    quality = judge(report, base, tasks_score, spec, made_reference=True)
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
    samples = watch.run(client.samples(target, [sent[i] for i in keep], reference.max_tokens,
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
        answers = watch.run(client.answers(target, [every[i] for i in ok], ref.max_tokens,
                                           limit=0), alive)
        tasks_score = task_score(ref, items, ok, answers, time.monotonic() - t0)
        notes.append(left_out_text("task item", [i for i in range(len(items))
                                                 if i not in ok_here],
                                   task_lengths, ref.max_tokens, window))
    quality = judge(report, reference, tasks_score, guard.spec)
    return replace(quality, left_out=[n for n in notes if n])
