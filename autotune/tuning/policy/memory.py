"""A pre-launch memory model: will this configuration start, and how many tokens will it cache?

A launch that cannot fit the weights or one max-model-len sequence costs a whole engine
start-up (minutes on a GPU) only to be pruned; the arithmetic below predicts it from the
model's config.json and a few flags, without touching the device. It follows vLLM's own
accounting: KV budget = device memory x gpu-memory-utilization - weights - profiled peak,
split into whole blocks, one of which (the null block) never holds tokens. The prediction
(`Estimate`) is stored with the trial and defined beside its record
(`autotune.tuning.records.estimate`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune import _reasons as reasons
from autotune._flags import integer
from autotune.engine.defaults import Machine, platform_rules
from autotune.tuning.records.estimate import Estimate

GiB = 1 << 30
_DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
                "float32": 4, "fp32": 4, "float": 4}
KV_DTYPES = ("auto", "bfloat16", "float16", "fp8*", "int8_per_token_head",
             "int4_per_token_head")


@dataclass(frozen=True)
class ModelShape:
    """The dimensions of a dense decoder-only model that decide its memory."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    intermediate_size: int
    num_attention_heads: int
    tie_word_embeddings: bool
    dtype_bytes: int  # of the checkpoint; vLLM's --dtype auto serves float32 ones at 16 bits
    max_position_embeddings: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        """Read a Hugging Face config.json (a multimodal one through its `text_config`)."""
        if "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
            config = config["text_config"]
        try:
            heads = int(config["num_attention_heads"])
            hidden = int(config["hidden_size"])
            dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
            return cls(
                num_layers=int(config["num_hidden_layers"]),
                num_kv_heads=int(config.get("num_key_value_heads") or heads),
                head_dim=int(config.get("head_dim") or hidden // heads),
                hidden_size=hidden,
                vocab_size=int(config["vocab_size"]),
                intermediate_size=int(config["intermediate_size"]),
                num_attention_heads=heads,
                tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                # Absent: 16-bit, which is what vLLM serves a dtype-less checkpoint in.
                dtype_bytes=_DTYPE_BYTES.get(dtype.removeprefix("torch."), 2),
                max_position_embeddings=int(config.get("max_position_embeddings") or 2048),
            )
        except KeyError as err:
            raise ValueError(f"config.json has no {err.args[0]!r}") from None


def load_shape(model: str | Path) -> ModelShape | None:
    """The shape of a local model directory; None for a Hub id (or a directory without
    config.json), which cannot be read offline."""
    path = Path(model) / "config.json"
    if not path.is_file():
        return None
    return ModelShape.from_config(json.loads(path.read_text()))


def param_count(shape: ModelShape) -> int:
    """Parameters of a Llama/Qwen3-style model: embeddings, untied lm_head, per layer the
    attention projections, the gated MLP and the norms (Qwen3's q_norm/k_norm included)."""
    h, d = shape.hidden_size, shape.head_dim
    attention = h * shape.num_attention_heads * d * 2 + h * shape.num_kv_heads * d * 2
    layer = attention + 3 * h * shape.intermediate_size + 2 * h + 2 * d
    embeddings = shape.vocab_size * h * (1 if shape.tie_word_embeddings else 2)
    return embeddings + shape.num_layers * layer + h


def served_as(shape: ModelShape, dtype: str | None) -> ModelShape:
    """The shape as `--dtype` serves it: weights and an `auto` KV cache take that dtype's
    bytes (`auto` and unknown values keep the checkpoint's)."""
    size = _DTYPE_BYTES.get(str(dtype or "auto"))
    return replace(shape, dtype_bytes=size) if size else shape


def kv_bytes_per_token(shape: ModelShape, kv_cache_dtype: str = "auto") -> int:
    """Bytes one token takes in the KV cache: K and V of every layer and KV head.

    fp8 halves a bf16 cache, hence doubles its capacity: on an H200, Qwen3-4B went from
    874,048 to 1,748,112 tokens at the same gpu-memory-utilization. The per-token-head
    quantised caches also store scales, which are not counted here.
    """
    if kv_cache_dtype == "auto":
        size: float = shape.dtype_bytes
    elif kv_cache_dtype in ("bfloat16", "float16"):
        size = 2
    elif kv_cache_dtype.startswith("fp8") or kv_cache_dtype == "int8_per_token_head":
        size = 1
    elif kv_cache_dtype == "int4_per_token_head":
        size = 0.5
    else:
        raise ValueError(f"unknown kv-cache-dtype {kv_cache_dtype!r}; known: "
                         f"{', '.join(KV_DTYPES)}")
    return math.ceil(2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * size)


def default_batched_tokens(device_memory_bytes: int) -> int:
    """vLLM's default --max-num-batched-tokens for `vllm serve` on a card of this size
    (`autotune.engine.defaults`; only the size is known here, not the card's name)."""
    return integer(platform_rules(Machine("cuda", None, device_memory_bytes / 2**20)),
                   "max-num-batched-tokens", 0)


def default_max_num_seqs(device_memory_bytes: int) -> int:
    """vLLM's default --max-num-seqs for `vllm serve` on a card of this size (before vLLM
    caps it at max-num-batched-tokens)."""
    return integer(platform_rules(Machine("cuda", None, device_memory_bytes / 2**20)),
                   "max-num-seqs", 0)


def default_overhead(shape: ModelShape, max_num_batched_tokens: int) -> int:
    """What vLLM's start-up profile finds besides the weights, before sizing the KV cache.

    1 GiB for what does not grow with the batch (CUDA context and cuBLAS workspaces that
    appear after start, the sampler's float32 logits for max-num-seqs rows, allocator
    slack), plus the activations of one forward pass of max-num-batched-tokens tokens,
    dominated by the MLP: the gate/up output (2 x intermediate), the SiLU product
    (1 x intermediate) and a few hidden-size buffers (4 x hidden) per token. CUDA graphs
    are captured after the KV cache is allocated and live in the 1 - utilization headroom.
    """
    per_token = 3 * shape.intermediate_size + 4 * shape.hidden_size
    return GiB + max_num_batched_tokens * per_token * shape.dtype_bytes


@dataclass(frozen=True)
class Launch:
    """A launch as the memory model sees it: the memory it has and the flags that size its
    KV cache. The budget is `kv_cache_memory_bytes` (--kv-cache-memory-bytes) when given,
    else `cpu_kvcache_space_gib` (VLLM_CPU_KVCACHE_SPACE) on the CPU engine, else
    `device_memory_bytes` x `gpu_memory_utilization` - weights - `overhead_bytes`
    (`default_overhead` unless given). `block_size` is vLLM's --block-size: 16 on GPUs, 128
    on the CPU engine; `max_model_len` None is the model's own context."""

    device_memory_bytes: int | None
    gpu_memory_utilization: float = 0.92
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    kv_cache_memory_bytes: int | None = None
    cpu_kvcache_space_gib: float | None = None
    overhead_bytes: int | None = None
    block_size: int = 16
    max_num_batched_tokens: int | None = None


def estimate(shape: ModelShape, launch: Launch, request_tokens: int | None = None
             ) -> Estimate:
    """Predict the KV cache of `launch` and whether it can serve one max-model-len request
    (vLLM refuses to start otherwise) and `launch.max_num_seqs` requests of `request_tokens`
    each."""
    utilization, device = launch.gpu_memory_utilization, launch.device_memory_bytes
    if not 0 < utilization <= 1:
        raise ValueError(f"gpu-memory-utilization {utilization} is not in (0, 1]")
    weights = param_count(shape) * shape.dtype_bytes
    per_token = kv_bytes_per_token(shape, launch.kv_cache_dtype)
    mml = launch.max_model_len if launch.max_model_len is not None \
        else shape.max_position_embeddings
    reason = ""
    if launch.kv_cache_memory_bytes is not None:
        budget = int(launch.kv_cache_memory_bytes)
    elif launch.cpu_kvcache_space_gib is not None:
        budget = int(launch.cpu_kvcache_space_gib * GiB)
    elif device is not None:
        overhead = launch.overhead_bytes
        if overhead is None:
            overhead = default_overhead(shape, launch.max_num_batched_tokens
                                        or default_batched_tokens(device))
        budget = int(device * utilization) - weights - overhead
        if budget <= 0:
            reason = (f"{reasons.OOM}: weights and overhead "
                      f"({(weights + overhead) / GiB:.1f} GiB) "
                      f"exceed {device / GiB:.1f} GiB × {utilization}")
    else:
        raise ValueError("need device_memory_bytes, kv_cache_memory_bytes or "
                         "cpu_kvcache_space_gib")
    block_size = launch.block_size
    blocks = max(budget, 0) // (block_size * per_token)
    capacity, longest = blocks * block_size, max(blocks - 1, 0) * block_size
    fits = budget > 0 and mml <= longest
    if not fits and not reason:
        reason = (f"{reasons.KV_TOO_SMALL}: the KV cache holds ~{capacity} tokens, "
                  f"max-model-len is {mml}"
                  f" (at most {longest} fits, one block being held back)")
    workload = None
    if launch.max_num_seqs is not None and request_tokens is not None:
        workload = capacity >= launch.max_num_seqs * request_tokens
    return Estimate(weights, per_token, budget, capacity, mml, longest, fits, workload, reason)


def emulated_utilization(device_memory_bytes: int, emulated_gib: float,
                         utilization: float) -> float:
    """The gpu-memory-utilization that leaves an engine on a big device the memory it would
    have at `utilization` on a card of `emulated_gib` GiB (a 24 GiB 4090D on an H200).

    Only memory is emulated: vLLM picks its default max-num-batched-tokens and max-num-seqs
    from the real device, so `prune.emulate` passes the emulated card's defaults. The budget
    leaves out CUDA graphs and the CUDA context, so the card is a hard limit only while
    `autotune.engine.ballast` holds the rest of the device; vLLM's start-up check (free memory >=
    utilization x total) then sees the emulated card's free memory, as on the real card.
    """
    if emulated_gib * GiB > device_memory_bytes:
        raise ValueError(f"cannot emulate {emulated_gib} GiB on a device of "
                         f"{device_memory_bytes / GiB:.1f} GiB")
    return emulated_gib * GiB * utilization / device_memory_bytes
