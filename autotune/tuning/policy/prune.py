"""Early pruning: spend no engine time on configurations that cannot win.

Before launch, the memory model (`autotune.tuning.policy.memory`) rules out configurations
whose KV cache cannot hold one max-model-len sequence. During the run, a probe
phase (the first share of the requests) stops configurations that preempt
(vLLM V1 recomputes instead of swapping: preemption is the swap signal),
saturate the KV cache while requests queue, or fail requests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from autotune import _reasons as reasons
from autotune import _traces as traces
from autotune._flags import Flags, number
from autotune.config import Hardware, PruneSpec, Scenario
from autotune.engine import gpu
from autotune.engine.server import cpu_memory_default
from autotune.errors import AutotuneError, ConfigError
from autotune.measure.measurement import Measurement
from autotune.traffic import WorkloadSpec
from autotune.tuning.policy import memory
from autotune.tuning.records.estimate import Estimate

PREEMPTION, KV_SATURATED, FAILURES, BEHIND = \
    reasons.PREEMPTION, reasons.KV_SATURATED, reasons.FAILURES, reasons.BEHIND


class GpuBusy(AutotuneError):
    """The previous engine's GPU memory was not released in time."""


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def device_bytes() -> int | None:
    device = gpu.device()
    return int(device.memory_mib * 2**20) if device else None


def emulate(flags: Flags, hardware: Hardware, device_memory: int | None
            ) -> Flags:
    """Flags that give the engine the memory of the emulated card (GPU only).

    `--gpu-memory-utilization` is a fraction of the whole device, so the searched
    value is read as a fraction of the emulated card and rescaled to the real one.
    vLLM sizes its default max-num-batched-tokens and max-num-seqs by the real card
    (8192 and 1024 on an H200, 2048 and 256 on a 24 GB card), so where the flags
    leave them unset they are passed as the emulated card would get them.
    """
    if hardware.memory_gib is None or device_memory is None:
        return flags
    wanted = number(flags, "gpu-memory-utilization", 0.92)
    scaled = memory.emulated_utilization(device_memory, hardware.memory_gib, wanted)
    card = int(hardware.memory_gib * 2**30)
    tokens = _int(flags.get("max-num-batched-tokens")) or memory.default_batched_tokens(card)
    defaults = {"max-num-batched-tokens": tokens,
                "max-num-seqs": min(memory.default_max_num_seqs(card), tokens)}
    return {**defaults, **flags, "gpu-memory-utilization": round(scaled, 6)}


def predict(scenario: Scenario, model: str, flags: Mapping[str, Any],
            env: Mapping[str, str]) -> Estimate | None:
    """The memory model's estimate for this launch, or None when it cannot say."""
    shape = memory.load_shape(model)
    if shape is None:
        return None
    shape = memory.served_as(shape, flags.get("dtype"))  # --dtype float32 doubles the bytes
    device = device_bytes()
    if scenario.hardware.memory_gib is not None and device is not None:
        device = int(scenario.hardware.memory_gib * 2**30)
    kv_bytes = _int(flags.get("kv-cache-memory-bytes"))
    # The same environment the launcher gives the engine (1 GiB for an unsized CPU build).
    launch_env = {**os.environ, **env, **cpu_memory_default(flags, env)}
    cpu_space = launch_env.get("VLLM_CPU_KVCACHE_SPACE")
    if device is None and cpu_space is None and kv_bytes is None:
        return None  # a share of an unknown host's memory
    w = scenario.workload
    # Front-end and scheduling flags (api-server-count, async-scheduling, stream-interval)
    # and any other flag not read here do not change KV memory: ignored on purpose.
    try:
        return memory.estimate(shape, memory.Launch(
            device_memory_bytes=device,
            gpu_memory_utilization=float(flags.get("gpu-memory-utilization", 0.92)),
            kv_cache_dtype=str(flags.get("kv-cache-dtype", "auto")),
            max_model_len=_int(flags.get("max-model-len")),
            max_num_seqs=_int(flags.get("max-num-seqs")),
            kv_cache_memory_bytes=kv_bytes,
            cpu_kvcache_space_gib=float(cpu_space) if cpu_space and device is None
            and kv_bytes is None else None,
            block_size=_int(flags.get("block-size")) or (16 if device else 128),
            max_num_batched_tokens=_int(flags.get("max-num-batched-tokens"))),
            request_tokens=w.prefix_len + w.input_len + w.output_len)
    except ValueError:
        return None


def longest_request(workload: WorkloadSpec) -> int | None:
    """Tokens of the workload's longest request (prompt + output), where the spec says.

    `random` prompts and traces have lengths known before sending; chat histories and
    prompt files are measured by the engine itself.
    """
    if workload.kind == "trace":
        try:
            found = traces.of(workload)
        except ConfigError:  # an unreadable trace fails the run, not this estimate
            return None
        return max(r.input_tokens + max(1, r.output_tokens) for r in found.requests)
    if workload.kind != "random":
        return None
    r = workload.range_ratio
    return (workload.prefix_len + max(1, int(workload.input_len * (1 + r)))
            + max(1, int(workload.output_len * (1 + r))))


def too_short(flags: Mapping[str, Any], workload: WorkloadSpec) -> str | None:
    """Why an explicit --max-model-len cannot serve the workload, or None.

    vLLM rejects every request longer than max-model-len with HTTP 400: launching such
    a configuration only measures failures, after a full start-up.
    """
    mml, longest = _int(flags.get("max-model-len")), longest_request(workload)
    if mml is None or longest is None or mml >= longest:
        return None
    return (f"{reasons.MAX_MODEL_LEN_TOO_SHORT}: max-model-len {mml} is below the "
            "workload's "
            f"longest request ({longest} tokens)")


def before_launch(estimate: Estimate | None, spec: PruneSpec) -> str | None:
    """Why not to launch at all, or None."""
    if estimate is None or not (spec.enabled and spec.memory_model):
        return None
    if not estimate.fits_one_sequence:
        return estimate.reason
    if spec.workload_fit and estimate.fits_workload is False:
        return (f"{reasons.WORKLOAD_FIT}: the KV cache holds "
                f"~{estimate.kv_capacity_tokens:,} tokens, "
                "less than max-num-seqs requests of the workload")
    return None


def probe_verdict(summary: Measurement, spec: PruneSpec) -> str | None:
    """Reason to stop after the probe phase, or None to go on."""
    probes = summary.probes
    if probes and (probes.preemptions or 0) > spec.preemption_allowance:
        return PREEMPTION
    if probes and (probes.kv_cache_usage_max or 0) >= 0.99 and probes.requests_waiting_max:
        return KV_SATURATED
    total = summary.completed + summary.failed
    if total and summary.completed / total < spec.min_success_rate:
        return FAILURES
    return None


def wait_gpu_released(before_mib: float | None, timeout_s: float,
                      index: int | None = None) -> float:
    """Wait until the device's used memory is back to `before_mib` (+512 MiB); seconds waited.

    Raises GpuBusy with a clear message when something still holds the memory.
    """
    if before_mib is None:
        return 0.0
    monitor = gpu.Monitor(index)
    t0 = time.monotonic()
    while True:
        used = monitor.used_mib()
        if used is None or used <= before_mib + 512:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            raise GpuBusy(f"GPU memory still {used:.0f} MiB used {timeout_s:.0f} s after "
                          f"the engine stopped (was {before_mib:.0f} MiB before the study); "
                          "another process holds the GPU")
        time.sleep(1.0)
