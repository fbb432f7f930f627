"""The report's what-if section: the trials re-ranked under other SLOs from their recorded
steps (`autotune.results._whatif`, `report --slo`)."""

from __future__ import annotations

from collections.abc import Sequence

from autotune._slo import Slo
from autotune.results import _whatif as whatif
from autotune.results.report._markup import Section, escape, flags_text
from autotune.tuning.records.snapshot import StudyOrSnapshot, records


def what_if_table(study: StudyOrSnapshot, slos: Sequence[Slo]) -> str:
    """The trials re-ranked under `slos` from their recorded steps (`whatif.rerank`)."""
    data = whatif.rerank(records(study), slos)
    head = "".join(f"<th>{escape(c)}</th>" for c in ("#", "tried because", "flags", "answer",
                                                     "steps with data"))
    rows = "".join(
        f"<tr><td>{t.number}</td><td>{escape(t.tried)}</td><td>{escape(flags_text(t.flags))}"
        f"</td><td>{escape(t.text + ('' if t.quality_ok else ' (rejected by the guardrail)'))}"
        f"</td><td>{t.steps}</td></tr>" for t in data.trials)
    return f"<p>{escape(data.text())}</p><table><tr>{head}</tr>{rows}</table>"


def section(study: StudyOrSnapshot, slos: Sequence[Slo]) -> Section | None:
    """The section, where the page was asked for other SLOs."""
    if not slos:
        return None
    return Section("What if the SLO were " + ", ".join(map(str, slos)),
                   what_if_table(study, slos))
