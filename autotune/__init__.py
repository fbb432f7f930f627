"""autotune: an Optuna study over `vllm serve` launch flags."""

__version__ = "0.1.0"

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["cli", "config", "engine", "errors", "measure", "results", "stored", "tinymodel",
           "traffic", "tuning", "verify"]
