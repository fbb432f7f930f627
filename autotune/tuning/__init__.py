"""The tuning layer: an Optuna study over launch flags, one trial at a time.

Public API: `study.tune` (the ask -> run -> tell loop), `trial.run_trial` (one configuration,
start to finish), `records` (what the study stores: `trialrecord.TrialRecord`, what a trial
measured, and the study's own `studyrecord.StudyRecord`, the only readers and writers of
Optuna's user attributes), `ranking` (the study's winner by the one rule of `standing`:
capacity at SLO, ties within noise, then the fewest overrides; `_standing` is its own),
`space`, `memory` and `prune` (what to try and what not to launch), `objective` (scores and
constraints), `quality` (the guardrail: quality against reference outputs). Re-measuring a winner
against vLLM's defaults is `autotune.verify`, above this layer.

Imports measure, engine and the top-level basics, never verify, results or the CLI. Inside,
its parts import down one order, lowest first: `quality`, `records`, `policy`, `_standing`,
`ranking`, `_deadline` and `interrupts`, `sharing`, `starter` and `trial`, `study`,
`ablation` (docs/architecture.md).
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["ablation", "interrupts", "policy", "quality", "ranking", "records", "sharing",
           "starter", "study", "trial"]
