"""The verification layer: re-measuring the finished trials of a study, apart from the search.

A study's trials rank configurations from one launch each; before a gain is quoted it is
measured again. This package does that and nothing else: it re-launches a candidate and its
baseline as the study's trials were launched (through `autotune.tuning.trial`), alternating
or side by side, and keeps the result with the study. It never asks Optuna for a trial and
never searches, which is why it sits apart from (above) `autotune.tuning`.

Public API: `validate` (`autotune validate`: paired, alternating re-runs with autotune's
client), `crosscheck` (`validate --client vllm`: the same pairs measured by `vllm bench
serve`), `pairstats` (the statistics of paired runs: a geometric mean of ratios and its 95 %
interval), `finish` (`tune`'s last phases: `explain_and_recheck`); its own `_pairloop` is
the one loop that runs every pair.

Imports tuning, measure, engine and the top-level basics; results and the CLI import it.
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["crosscheck", "finish", "pairstats", "validate", "warmcheck"]
