"""The report's parameter importances (PED-ANOVA), or why a study has none yet."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping, Sequence

import optuna
import plotly.graph_objects as go
from optuna.trial import TrialState

from autotune.results.report._markup import Section, escape, figure_html
from autotune.results.report.points import HEIGHT, axes
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot, records

MIN_DISTINCT = 5  # distinct searched configurations before importances mean anything
# Importances are shares of 1 resting on a handful of configurations: four decimals are more
# than they mean. Rounding also keeps the report the same on every machine: numpy's
# vectorised exp and log differ in the last bits between CPUs (AVX-512 or not).
IMPORTANCE_DECIMALS = 4


def importances(study: StudyOrSnapshot) -> Importances | str:
    """PED-ANOVA importances of the searched flags for the first objective, rounded to
    `IMPORTANCE_DECIMALS`, or why there are none: fewer than `MIN_DISTINCT` distinct
    completed searched configurations (a copy of a configuration measured before, `same as
    #N`, adds nothing; two identical trials once gave 0.33/0.33/0.33), or no flag that
    varied."""
    done = [r for r in records(study, (TrialState.COMPLETE,))
            if r.params and r.duplicate_of is None and r.values]
    distinct = {json.dumps(r.params, sort_keys=True, default=str) for r in done}
    if len(distinct) < MIN_DISTINCT:
        return (f"Parameter importances need at least {MIN_DISTINCT} distinct completed "
                f"searched configurations to mean anything; this study has {len(distinct)}.")
    params = sorted(p for p in set.intersection(*(set(r.params) for r in done))
                    if len({json.dumps(r.params[p], default=str) for r in done}) > 1)
    if not params:
        return "Parameter importances: no searched flag took more than one value."
    numbers = {r.number for r in done}
    trials = [t for t in Snapshot.of(study).study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE,)) if t.number in numbers]
    view = optuna.create_study(directions=study.directions)  # the distinct trials only
    view.add_trials(trials)
    target = None if len(study.directions) == 1 else (lambda t: t.values[0])
    # Optuna's default evaluator (PED-ANOVA; fANOVA would need scikit-learn). It warns when
    # a flag's values were each tried by few trials: that caveat is kept, for the caption,
    # instead of going to stderr.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            imp = optuna.importance.get_param_importances(view, params=params, target=target)
        except (ValueError, RuntimeError, ZeroDivisionError) as err:
            return f"Parameter importances could not be computed: {err}"
    thin = sorted({m.group(1) for w in caught
                   if (m := re.search(r"parameter `([^`]+)` have less than", str(w.message)))})
    shares = {name: round(value, IMPORTANCE_DECIMALS) for name, value in imp.items()}
    # Largest first, ties by name: the order no longer hangs on last bits either.
    ordered = dict(sorted(shares.items(), key=lambda kv: (-kv[1], kv[0])))
    return Importances(ordered, len(distinct), thin)


class Importances(dict[str, float]):
    """Importances by flag, with how many distinct configurations they rest on and the
    flags some of whose values only one trial tried (where the figure may be off)."""

    def __init__(self, values: Mapping[str, float], configurations: int,
                 thin: Sequence[str] = ()):
        super().__init__(values)
        self.configurations = configurations
        self.thin = list(thin)

    @property
    def caption(self) -> str:
        text = f"from {self.configurations} distinct searched configurations"
        if self.thin:
            text += (f"; some values of {', '.join(self.thin)} were tried only once, so "
                     "their share may be off")
        return text


def importance_figure(study: StudyOrSnapshot) -> go.Figure:
    """Bars of `importances`, or the reason there are none written on an empty figure."""
    imp = importances(study)
    what = "weighted score" if len(study.directions) == 1 else axes(study).throughput_label
    fig = go.Figure(layout={"title": f"Parameter importances (PED-ANOVA, for the {what})",
                            "height": HEIGHT})
    if isinstance(imp, str):
        fig.add_annotation(text=imp, xref="paper", yref="paper", x=0.5, y=0.5,
                           showarrow=False)
        return fig
    names = list(reversed(imp))
    fig.add_trace(go.Bar(x=[imp[n] for n in names], y=names, orientation="h",
                         text=[f"{imp[n]:.2f}" for n in names], name="importance"))
    fig.update_layout(xaxis_title=f"importance ({imp.caption})")
    return fig


def section(study: StudyOrSnapshot) -> Section:
    """The figure, or why there is none."""
    imp = importances(study)
    return Section("Parameter importances",
                   f"<p class='note'>{escape(imp)}</p>" if isinstance(imp, str)
                   else figure_html(importance_figure(study), "importances"))
