"""The report's head: the decision first, in the words `show` gives it, then what was tuned,
where and against what (the context every figure needs)."""

from __future__ import annotations

from collections.abc import Mapping

from autotune._flags import FlagValue
from autotune.measure import capacitytext
from autotune.results import _decision as decision
from autotune.results import cost, show, summary
from autotune.results.report._markup import escape, flags_text
from autotune.results.report.points import best
from autotune.results.report.tables import flags_beyond
from autotune.results.show import outcome
from autotune.tuning import ablation, ranking
from autotune.tuning.policy import relief
from autotune.tuning.records.origin import RELIEF
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records
from autotune.tuning.records.trialrecord import TrialRecord


def decision_html(study: Snapshot, price: cost.Price, load: float | None) -> str:
    """The decision first, in the words `show` gives it (`autotune.results._decision`), or
    why the study has none; nothing for a Pareto study (its front is the first figure)."""
    if len(study.directions) != 1:
        return ""
    found, none = decision.of_study(study, price, load)
    lines = found.lines() if found is not None else [none.line()] if none else []
    return "<div class='decision'>" + "".join(f"<p>{escape(line.strip())}</p>"
                                              for line in lines) + "</div>"


def best_line(study: StudyOrSnapshot, top: TrialRecord | None,
              fixed: Mapping[str, FlagValue]) -> str:
    """`#7 --max-num-seqs 256 ..., gain +21.7 % over vLLM defaults, capacity ...; ship it
    with: ...`, with the capacity's caveat where it has one."""
    if top is None:
        return "none yet"
    effective = ranking.effective_defaults(study)
    own = flags_beyond(top, fixed)
    changes = effective.overrides(own)
    text = (f"#{top.number} {flags_text(changes) if changes else '(vLLM defaults)'}, "
            f"score gain {show.fmt(top.gain, '+.1%')} over {ranking.reference_name(study)}")
    if left := effective.words(own):
        text += f" (also set, at vLLM's defaults on this machine: {left})"
    if top.capacity:
        text += f"; capacity at SLO {capacitytext.describe(top.capacity)}"
        if caveat := show.capacity_caveat(top.capacity):
            text += f" (not a figure to quote: {caveat})"
    return text + (f"; ship it with: autotune export {study.study_name} --trial {top.number} "
                   "--format k8s")


def about(study: StudyOrSnapshot) -> str:
    """What was tuned, where, against what: the context every figure needs."""
    scenario = ranking.stored_scenario(study)
    trials = records(study)
    first = next((r for r in trials if r.engine_version), None)
    counts: dict[str, int] = {}
    for r in trials:
        counts[outcome(r)] = counts.get(outcome(r), 0) + 1
    top = best(study)
    fixed = ranking.fixed_flags(study)
    device = f"{first.engine_version} on {first.device_name}" if first else "-"
    if first and first.device_name == "cpu":
        device = f"{first.engine_version} on the CPU (vLLM's CPU build)"
    ranked = summary.ranking(ranking.standing(study), ranking.not_overrides(study))
    tied = [r for r in ranked if r.tied]
    explained = ablation.latest(study)  # which of the winner's flags carry its gain
    guided = [r for r in trials if r.origin_kind == RELIEF]
    # (label, text) in the order shown; None: not said of this study.
    items: list[tuple[str, str | None]] = [
        ("model", show.model_text(scenario.model if scenario else None)),
        ("engine, device", device),
        ("workload", show.workload_text(scenario.workload if scenario else None)),
        ("objective", show.objective_text(scenario.objective if scenario else None)),
        ("fixed flags", flags_text(fixed) if fixed else "none"),
        ("trials", ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"),
        ("best feasible", best_line(study, top, fixed)),
        ("cannot separate", (
            f"the top {len(tied)} configurations ("
            + ", ".join(f"#{r.number}" for r in tied) + ") have overlapping capacity "
            "intervals: the study cannot tell them apart; the one with the fewest "
            "overrides of vLLM's defaults is preferred") if len(tied) > 1 else None),
        ("limited by", f"#{ranked[0].number}: {ranked[0].bottleneck}"
         if ranked and ranked[0].bottleneck else None),
        ("headroom", relief.ceiling(top) or None),
        ("the gain rests on", " ".join(line.strip() for line in explained.lines())
         if explained else None),
        ("relief moves", f"{len(guided)} of {len(trials)} trials relieved another "
         "trial's bottleneck (column 'tried because')" if guided else None),
    ]
    return "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in items
                            if v is not None) + "</dl>"
