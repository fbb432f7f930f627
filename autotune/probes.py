"""Read the engine's Prometheus `/metrics` text.

Pure parsing here; sampling while a load runs lives with the load generator.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def scrape(text: str) -> dict[str, float]:
    """`vllm:` samples summed over label sets (one engine, several model labels)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith("vllm:") or sample.name.endswith("_created"):
                continue
            if sample.name.endswith("_info"):
                continue
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    return values


def cache_config(text: str) -> dict[str, str]:
    """Labels of `vllm:cache_config_info`: block size, block count, KV dtype, capacity."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:cache_config_info":
                return dict(sample.labels)
    return {}


def as_int(value: str | None) -> int | None:
    """A label value as an int; vLLM writes "None" for unset ones."""
    try:
        return int(float(value)) if value not in (None, "None", "") else None
    except ValueError:
        return None
