"""Search policy: what a study tries, what it does not launch, and how it scores.

`space` (the search space and Optuna's suggestions), `relief` (a move that relieves the
best trial's bottleneck), `memory` (the KV-cache model that prunes a configuration before
launch), `prune` (the rules that stop a running trial early) and `objective` (scores,
constraints and the gain over vLLM's defaults). The loop (`autotune.tuning.study`) asks
them; they never start an engine.
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["compilekey", "evidence", "memory", "objective", "prune", "relief", "space"]
