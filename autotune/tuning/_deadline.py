"""What may end a trial early while its engine runs: a crash, or its time budget.

`budget.trial_timeout` bounds the whole trial (start-up, load steps, guardrail,
teardown), not only a workload step: bounding each step alone lets a trial with
`trial_timeout: 5m` run for as long as its steps, start-up and guardrail add up to. The
start-up is bounded by giving the launcher at most the time left; every
wait after it is watched (`autotune.measure.watch`) by one `TrialWatch`, which says why
the trial must stop (the engine died, or the time is spent) and remembers which of the
two it was, so the trial is recorded as `crashed` or `timeout`; the teardown's grace
period is cut to the time left.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autotune.engine.log import CRASHED, TIMEOUT

# The least grace a stopping engine gets, even when the trial's time is spent: SIGTERM lets
# vLLM release its device memory in order before SIGKILL.
MIN_GRACE_S = 2.0


@dataclass(frozen=True)
class Deadline:
    """`seconds` from `start` on the `clock` (monotonic; tests pass their own)."""

    seconds: float
    text: str = ""  # as the scenario wrote it, e.g. "5m"
    clock: Callable[[], float] = time.monotonic
    start: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.start < 0:
            object.__setattr__(self, "start", self.clock())

    def left(self) -> float:
        """Seconds left (0 once spent)."""
        return max(0.0, self.start + self.seconds - self.clock())

    def spent(self) -> bool:
        return self.left() <= 0.0

    def reason(self) -> str | None:
        """Why the trial must stop (`trial_timeout 5m spent`), or None while time is left."""
        if not self.spent():
            return None
        return f"trial_timeout {self.text or f'{self.seconds:g}s'} spent"

    def grace(self, wanted: float) -> float:
        """The grace period a stopping engine gets: `wanted`, cut to the time left, but
        at least `MIN_GRACE_S`."""
        return min(wanted, max(self.left(), MIN_GRACE_S))


class TrialWatch:
    """The `alive` callable of a running trial: the engine's death first, then the deadline.

    `death` is the engine's own report (`Server.death`: None while it lives). `fired`
    keeps which of the two stopped the trial: by the time the trial records it, its
    engine has been stopped, and would read as dead whatever the cause.
    """

    def __init__(self, death: Callable[[], str | None], deadline: Deadline):
        self.death = death
        self.deadline = deadline
        self.fired: str | None = None

    def __call__(self) -> str | None:
        if why := self.death():
            self.fired = self.fired or CRASHED
            return why
        if why := self.deadline.reason():
            self.fired = self.fired or TIMEOUT
            return why
        return None
