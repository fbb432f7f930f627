"""How far a trial's guardrail outputs are from the reference's: agreement of the greedy
outputs (common-prefix ratio, sequence similarity over token ids) and teacher-forced drift
(mean absolute difference of the reference tokens' log-probabilities), overall and for the
worst prompts."""

from __future__ import annotations

import difflib
from typing import Any

from autotune.tuning.quality.reference import Sample
from autotune.tuning.quality.verdict import Quality


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
