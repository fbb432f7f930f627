"""autotune: an Optuna study over `vllm serve` launch flags."""

__version__ = "0.1.0"
