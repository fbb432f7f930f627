"""The results layer: the read side of a study, for people and deployments.

Public API: `show.open_existing` and `show.summary` (a study's trials as rows and figures),
`views` (the terminal tables), `report.page.write` (one offline HTML page; its sections and
their plotly figures one module each under `report`), `export.formats.render` (CLI, vLLM
YAML, compose, Kubernetes or JSON for one trial; one module each under `export`).

Reads trials through `autotune.tuning.records.trialrecord.TrialRecord`; never imports the CLI.
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["compare", "cost", "dashboard", "export", "gputime", "interactivity", "report", "show",
           "summary", "views"]
