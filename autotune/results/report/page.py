"""`autotune report`: the whole page, assembled from its sections (one module each) in one
HTML file that opens offline (plotly.js is inlined once, nothing is fetched)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from plotly.offline import get_plotlyjs

from autotune._slo import Slo
from autotune.errors import ConfigError
from autotune.results import cost
from autotune.results.report import _gputime as gputime
from autotune.results.report import _header as header
from autotune.results.report import _money as money
from autotune.results.report import _rerank as rerank
from autotune.results.report import _speculation as speculation
from autotune.results.report import _startup as startup
from autotune.results.report import guardrail, history, importance, parallel, pareto, pergpu, tables
from autotune.results.report._markup import Section, escape
from autotune.tuning import ranking
from autotune.tuning.records.snapshot import Snapshot, StudyOrSnapshot

# The page fits a 1,280-px window: the body is at most 1,200 px wide, and the trials table
# wraps its cells (long flag lists break between flags) instead of widening the page.
CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1200px; color: #222;
       padding: 0 16px; }
.js-plotly-plot, .plotly-graph-div { max-width: 100%; }
td { overflow-wrap: anywhere; } td.num { white-space: nowrap; overflow-wrap: normal; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
div.decision { background: #eef6ee; border-left: 4px solid #3a7; padding: 6px 14px;
               overflow-wrap: anywhere; }
div.decision p { margin: 4px 0; } div.decision p:first-child { font-weight: 600; }
p.note { background: #f5f5f5; padding: 10px 14px; border-left: 4px solid #999; }
table { border-collapse: collapse; font-size: 12px; width: 100%; table-layout: auto; }
th, td { border: 1px solid #ddd; padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; position: sticky; top: 0; }
tr.infeasible td { background: #fff0f0; } tr.pruned td, tr.fail td { color: #777; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 12px; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
dt { font-weight: 600; } dd { margin: 0; }
"""


def build(study: StudyOrSnapshot, what_if: Sequence[Slo] = (), *, load: float | None = None,
          gpu_hour: float | None = None, gpus: int | None = None) -> str:
    """The whole report as one HTML document (with `what_if`, a section re-ranking the
    trials under those SLOs; with `load`, one setting the winner beside the defaults at
    that load, priced by the scenario's cost or `gpu_hour`). The study is read once: every
    section works on that snapshot."""
    study = Snapshot.of(study)
    price = cost.price_of(ranking.stored_scenario(study), gpu_hour, gpus)
    sections: Sequence[Section | None] = [
        pareto.section(study),
        pergpu.section(study),
        history.section(study),
        importance.section(study),
        parallel.section(study),
        guardrail.section(study),
        speculation.section(study),
        startup.section(study),
        gputime.section(study),
        rerank.section(study, what_if),
        money.section(study, price, load),
        tables.section(study, price),
    ]
    body = "".join(s.html() for s in sections if s is not None)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>autotune report: {escape(study.study_name)}</title><style>{CSS}</style>"
            # The whole plotly.js bundle, inlined: the report works with no network at all.
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            f"<h1>autotune report: study {escape(study.study_name)}</h1>"
            f"{header.decision_html(study, price, load)}{header.about(study)}"
            f"{body}</body></html>")


def write(study: StudyOrSnapshot, path: Path, what_if: Sequence[Slo] = (), *,
          load: float | None = None, gpu_hour: float | None = None,
          gpus: int | None = None) -> Path:
    try:
        path.write_text(build(study, what_if, load=load, gpu_hour=gpu_hour, gpus=gpus),
                        encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"report: cannot write {path}: {err.strerror or err}") from None
    return path
