"""The Prometheus text of an engine's `/metrics`: the `vllm:` samples, summed over label sets.

The engine layer reads its cache figures here at start-up; the probes of the measurement
layer read their gauges and counters through the same parser.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

# The families the probes read: parsing only these lines keeps a sample to ~2 ms instead of
# parsing every histogram of a 60-KB page (7 ms of a 2-core host's CPU, twice a second).
PROBED = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:num_preemptions", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits")


def _only(text: str, names: tuple[str, ...]) -> str:
    """The lines of a Prometheus page that belong to families starting with `names`."""
    heads = tuple(f"# {kind} {n}" for kind in ("HELP", "TYPE") for n in names)
    return "\n".join(ln for ln in text.splitlines()
                     if ln.startswith(names) or ln.startswith(heads)) + "\n"


def scrape(text: str, only: tuple[str, ...] | None = None) -> dict[str, float]:
    """`vllm:` samples summed over label sets (one engine, several model labels); with
    `only`, just the families whose names start with one of those."""
    values: dict[str, float] = {}
    if only is not None:
        text = _only(text, only)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith("vllm:") or sample.name.endswith("_created"):
                continue
            if sample.name.endswith("_info"):
                continue
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    return values


def by_label(text: str, name: str, label: str) -> dict[str, float]:
    """The samples of `name` keyed by one label's value (summed over the other labels):
    `vllm:spec_decode_num_accepted_tokens_per_pos_total` by `position`."""
    values: dict[str, float] = {}
    family = name.removesuffix("_total")
    for fam in text_string_to_metric_families(_only(text, (family,))):
        for sample in fam.samples:
            if sample.name == name and label in sample.labels:
                key = sample.labels[label]
                values[key] = values.get(key, 0.0) + float(sample.value)
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
