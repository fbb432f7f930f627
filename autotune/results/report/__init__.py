"""`autotune report`: the study as one offline HTML page, one module a section.

Every figure is a plain function of a study that returns a plotly Figure, so the notebooks
show exactly what `autotune report` writes. `page` assembles the page (`build`, `write`):
`header` (the decision and what was tuned), then one section each from `pareto` (the Pareto
front), `pergpu` (throughput per GPU against interactivity), `history`, `importance`,
`parallel` (parallel coordinates), `guardrail`, `speculation`, `startup`, `gputime` (where
the GPU time went), `rerank` (a what-if SLO), `money` (replicas and cost at a load) and
`tables` (every trial). Beneath them: `points` (the trials as the figures place them),
`labels` (labels placed where none overlaps another) and `markup` (escaping, a figure as
HTML, a section). `sidebyside` compares several studies (the notebooks).
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["guardrail", "history", "importance", "page", "parallel", "pareto", "pergpu", "points",
           "sidebyside", "tables"]
