"""Why a trial was tried (`Origin`), stored with the trial.

The modules that make an origin (`autotune.tuning.policy.relief`, `autotune.tuning.ablation`,
the study's queue) read the trial record themselves, so the origin is defined here, beside
the record, not by them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.stored import Stored

# Why a trial was tried (`Origin.kind`): a baseline (vLLM's defaults or a named one), the
# sampler's suggestion, a relief move of another trial's bottleneck
# (`autotune.tuning.policy.relief`), or the ablation of a winner (`autotune.tuning.ablation`).
BASELINE, SAMPLER, RELIEF, ABLATION = "baseline", "sampler", "relief", "ablation"


@dataclass(frozen=True)
class Origin(Stored):
    """Why a trial was tried, in words (`text`) and, for a relief move, which trial's
    limit it relieves and the flag it moved. Stored without the figures its kind has not
    (`SPARSE`): a baseline's origin is its kind and text."""

    SPARSE = True

    kind: str = ""
    text: str = ""
    source: int | None = None
    bottleneck: str | None = None
    knob: str | None = None
    before: Any = None
    after: Any = None
    why: str | None = None

    @property
    def short(self) -> str:
        """For a table cell: `relief #0 front_end: api-server-count 1->2`."""
        if self.kind != RELIEF:
            return self.text
        return f"relief #{self.source} {self.bottleneck}: {self.knob} {self.before}->{self.after}"
