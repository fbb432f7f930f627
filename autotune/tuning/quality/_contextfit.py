"""Which of the guardrail's prompts and task items fit the engine's context, and the note
that names those left out."""

from __future__ import annotations

from collections.abc import Sequence


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
