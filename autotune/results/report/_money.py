"""The report's money and machines at a load (`report --load`): the winner beside the study's
reference, replicas and cost (`autotune.results.cost`)."""

from __future__ import annotations

from autotune.results import cost
from autotune.results.report._markup import Section, escape
from autotune.tuning import ranking
from autotune.tuning.records.snapshot import StudyOrSnapshot


def cost_section(study: StudyOrSnapshot, price: cost.Price, load: float) -> str:
    """The winner beside the defaults at `load` req/s: replicas, cost, the saving."""
    winner = ranking.feasible_best(study)
    if winner is None:
        return ("<p class='note'>No single winner to size: no feasible trial yet, or a "
                "Pareto study (export --trial N --load R sizes one trial).</p>")
    side = cost.side_by_side(winner, ranking.reference_trial(study),
                             ranking.reference_name(study), price, load)
    head = "".join(f"<th>{escape(c)}</th>" for c in ("", "winner", side.reference_name))
    rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                   for row in side.rows)
    return (f"<p>Price: {escape(side.price_text)}. Each replica is sized at its capacity at "
            "SLO, the highest sustained request rate at which every SLO held: a load of R "
            "req/s needs R / capacity replicas, rounded up, and a million output tokens cost "
            "what a replica costs while it makes them at that rate.</p>"
            f"<table><tr>{head}</tr>{rows}</table><p>{escape(side.saving)}</p>")


def section(study: StudyOrSnapshot, price: cost.Price, load: float | None) -> Section | None:
    """The section, where the page was asked for a load."""
    if load is None:
        return None
    return Section(f"Money and machines at {load:g} req/s", cost_section(study, price, load))
