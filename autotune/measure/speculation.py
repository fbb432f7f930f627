"""Speculative decoding as the engine counts it: drafts, draft tokens, accepted tokens.

vLLM's `/metrics` keeps counters since start-up (`vllm:spec_decode_num_drafts_total`,
`..._num_draft_tokens_total`, `..._num_accepted_tokens_total` and, per draft position,
`..._num_accepted_tokens_per_pos_total{position=...}`). A trial reads them before and
after its workload, so the guardrail's requests and the start-up's warm-up do not count.
The two figures follow vLLM's own definitions (its spec-decode logging and
`vllm bench serve`): acceptance rate = accepted / draft tokens, and mean acceptance
length = 1 + accepted / drafts, the tokens a verification step yields on average (the
target model's own token plus the accepted draft tokens). The drafted share (accepted /
generated tokens, `vllm:generation_tokens_total` over the same window) says how much of the
output the drafts supplied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from autotune.engine.prometheus import by_label, scrape
from autotune.stored import Stored

PREFIX = "vllm:spec_decode"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATED = "vllm:generation_tokens_total"


@dataclass(frozen=True)
class Counters:
    """The engine's speculative-decoding counters at one moment (all zero without it)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: tuple[float, ...] = ()
    generated: float = 0.0  # every output token, drafted or not

    @classmethod
    def parse(cls, text: str) -> Counters:
        values = scrape(text, (PREFIX, GENERATED))
        positions = by_label(text, PER_POSITION, "position")
        ordered = tuple(positions[k] for k in sorted(positions, key=_position))
        return cls(values.get(DRAFTS, 0.0), values.get(DRAFT_TOKENS, 0.0),
                   values.get(ACCEPTED, 0.0), ordered, values.get(GENERATED, 0.0))


def _position(key: str) -> int:
    try:
        return int(key)
    except ValueError:
        return 1 << 30


@dataclass(frozen=True)
class Speculation(Stored):
    """What speculation did over a window: counts and vLLM's two summary figures. A trial
    record keeps it (`TrialRecord.speculation`); records made before `generated_tokens`
    read it as 0."""

    EXTRA: ClassVar[tuple[str, ...]] = ("acceptance_rate", "mean_acceptance_length",
                                        "drafted_share")  # computed, but written out

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    # Share of drafts whose token at position i was accepted: how deep drafts hold.
    accepted_per_position: list[float] = field(default_factory=list)
    generated_tokens: int = 0  # every output token of the window

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def drafted_share(self) -> float | None:
        """Share of the output tokens that accepted drafts supplied. ngram drafts only where
        the context holds a match, so a high acceptance rate can come with few drafts (open
        chat); this says how much of the answer speculation actually produced."""
        return self.accepted_tokens / self.generated_tokens if self.generated_tokens else None


def between(before: Counters, after: Counters) -> Speculation | None:
    """The window's speculation, or None when the engine drafted nothing in it (off)."""
    drafts = after.drafts - before.drafts
    if drafts <= 0 and after.draft_tokens - before.draft_tokens <= 0:
        return None
    start = before.per_position + (0.0,) * (len(after.per_position) - len(before.per_position))
    per = [(a - b) / drafts if drafts > 0 else 0.0
           for a, b in zip(after.per_position, start, strict=False)]
    return Speculation(int(drafts), int(after.draft_tokens - before.draft_tokens),
                       int(after.accepted - before.accepted), [round(x, 4) for x in per],
                       int(after.generated - before.generated))
