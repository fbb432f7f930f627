"""Quality measurement: the guardrail that checks a trial's answers against reference
outputs, and the task check's items and their paired accuracy.

Public API: `guard` (`Guard`, the guardrail's part in a run, and `make_guard`), `checking`
(`make_reference` and `check` on a served engine), `verdict` (the `Quality` record, the
thresholds, the verdict and its Optuna constraint), `reference` (the stored reference and
its file), `prompts` (the prompt set and a reference from expected outputs), `template`
(chat or plain prompts), `client` (the HTTP requests), `tasks` (the task check's items) and
`accuracy` (their paired accuracy and the verdict's words). Its own: `_comparison` (drift
and agreement) and `_contextfit` (what fits the engine's context).
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["accuracy", "checking", "client", "guard", "prompts", "reference", "tasks", "template",
           "verdict"]
