"""Build random-weight Qwen3 models that vLLM can serve, without any download.

`tiny` is small enough for the CPU engine in tests and CI; `qwen3-4b` has the
exact architecture of Qwen3-4B-Instruct-2507 (same shapes, hence the same speed
and memory on a GPU) for machines that cannot fetch the real weights. Each model
comes with a byte-level BPE tokenizer padded to the model's vocabulary, so that
every id a random model emits decodes to visible text (otherwise streams carry
empty deltas and TTFT/ITL are wrong), and a ChatML chat template.

A built model is cached: the directory holds `autotune-model.json` with the
fingerprint of what was asked, and a second call with the same request returns
at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import _realmodel as realmodel

BUILDER_VERSION = 2
MARKER = "autotune-model.json"

PRESETS: dict[str, dict[str, Any]] = {
    # Qwen/Qwen3-4B-Instruct-2507 config.json (bf16, tied embeddings)
    "qwen3-4b": dict(
        vocab_size=151936, hidden_size=2560, intermediate_size=9728,
        num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, max_position_embeddings=262144, rope_theta=5000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
    # A few hundred KB. head_dim 64: the CPU attention kernels reject 16.
    "tiny": dict(
        vocab_size=512, hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        head_dim=64, max_position_embeddings=8192, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
}

# Every preset `build` takes: the random-weight ones above and the real ones.
ALL = (*PRESETS, *realmodel.PRESETS)

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Text the tokenizer's merges are learnt from: English, code, Chinese, digits.
_CORPUS = [
    "The quick brown fox jumps over the lazy dog. ",
    "vLLM serves large language models with paged attention and continuous batching. ",
    "def quicksort(xs):\n    return xs if len(xs) < 2 else sorted(xs)\n",
    "请用Python写一个快速排序。大语言模型推理服务的吞吐量和延迟。",
    "0123456789 +-*/=()[]{}<>,.;:!?'\"#$%&@^_`|~ \n\t",
]


@dataclass(frozen=True)
class BuiltModel:
    path: Path
    preset: str
    params: int
    reused: bool
    seconds: float


def default_dir(preset: str) -> Path:
    """Where `autotune tiny-model` puts a preset when no directory is given."""
    return realmodel.cache_root() / "models" / preset


def fingerprint(preset: str, seed: int) -> str:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; allowed: {', '.join(sorted(ALL))}")
    spec = {"preset": preset, "shape": PRESETS[preset], "seed": seed, "builder": BUILDER_VERSION}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def cached(out: Path, preset: str, seed: int = 0) -> bool:
    """True when `out` already holds exactly this preset and seed."""
    try:
        marker = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("fingerprint") == fingerprint(preset, seed)


def build(out: str | Path | None = None, preset: str = "tiny", seed: int = 0,
          device: str = "auto") -> BuiltModel:
    """Write (or reuse) a random-weight model of `preset` in `out`; a real preset
    (`autotune._realmodel`) is built from its package instead."""
    if preset in realmodel.PRESETS:
        real = realmodel.build(Path(out) if out is not None else default_dir(preset), preset)
        return BuiltModel(real.path, preset, real.params, real.reused, real.seconds)
    t0 = time.perf_counter()
    fp = fingerprint(preset, seed)
    out = Path(out) if out is not None else default_dir(preset)
    if cached(out, preset, seed):
        marker = json.loads((out / MARKER).read_text())
        return BuiltModel(out, preset, marker["params"], True, time.perf_counter() - t0)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise FileExistsError(f"{out} exists, is not empty and was not made by autotune")
    logging.getLogger("autotune").info("building the %s model in %s (first use; the "
                                       "qwen3-4b preset takes about a minute)", preset, out)
    # Build next to the target and rename, so an interrupted build never looks cached.
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        shape = PRESETS[preset]
        ids = _build_tokenizer(tmp, shape["vocab_size"])
        params = _build_weights(tmp, shape, ids, seed, device)
        (tmp / MARKER).write_text(json.dumps(
            {"fingerprint": fp, "preset": preset, "seed": seed, "params": params}, indent=2))
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return BuiltModel(out, preset, params, False, time.perf_counter() - t0)


def _build_tokenizer(out: Path, vocab_size: int) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=min(1000, vocab_size - 8), special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    trained.train_from_iterator(_CORPUS * 50, trainer)
    model = json.loads(trained.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    for s in SPECIALS:
        vocab.pop(s)
    vocab = {tok: i for i, tok in enumerate(sorted(vocab, key=vocab.__getitem__))}
    # Pad to the model's vocabulary with tokens no merge produces but that decode
    # to text ("Ġt123" -> " t123"); specials take the last ids, as in Qwen.
    n = len(vocab)
    while n < vocab_size - len(SPECIALS):
        vocab[f"Ġt{n}"] = n
        n += 1
    for s in SPECIALS:
        vocab[s] = n
        n += 1
    full = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    full.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    full.decoder = decoders.ByteLevel()
    full.add_special_tokens(SPECIALS)
    if full.get_vocab_size() != vocab_size:
        raise RuntimeError(f"tokenizer has {full.get_vocab_size()} ids, model {vocab_size}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=full, bos_token=None, eos_token="<|im_end|>",
        pad_token="<|endoftext|>", unk_token=None, additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML
    fast.model_max_length = 1 << 30
    fast.save_pretrained(str(out))
    ids = {s: full.token_to_id(s) for s in SPECIALS}
    lost = [s for s, i in ids.items() if i is None]
    if lost:  # added above, so never: token_to_id answers None for unknown tokens
        raise RuntimeError(f"tokenizer lacks its special tokens: {', '.join(lost)}")
    return {s: i for s, i in ids.items() if i is not None}


def _build_weights(out: Path, shape: dict[str, Any], ids: dict[str, int], seed: int,
                   device: str) -> int:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        **shape, hidden_act="silu", attention_dropout=0.0, attention_bias=False,
        use_cache=True, use_sliding_window=False,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    cfg.architectures = ["Qwen3ForCausalLM"]
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    # Build on the meta device and fill in place: no full-precision copy and no
    # slow default initialisation, so the 4B preset takes seconds, not minutes.
    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model = model.to_empty(device=device)
    # Drawing 4 billion normals takes minutes on a CPU; copying windows of one
    # seeded pool of 2^22 normals is memory-bound and takes about a second.
    # The weights are meaningless either way; only shapes and dtypes matter.
    gen = torch.Generator(device="cpu").manual_seed(seed)
    pool = (torch.randn(1 << 22, generator=gen) * 0.02).to(torch.bfloat16).to(device)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                p.fill_(1.0)
                continue
            flat, done = p.view(-1), 0
            start = int(torch.randint(0, pool.numel(), (1,), generator=gen))
            while done < flat.numel():
                n = min(flat.numel() - done, pool.numel() - start)
                flat[done:done + n].copy_(pool[start:start + n])
                done, start = done + n, 0
    model.tie_weights()
    model.save_pretrained(str(out), safe_serialization=True)
    # transformers 5 writes `dtype`; older readers look for `torch_dtype`.
    path = out / "config.json"
    config = json.loads(path.read_text())
    config["torch_dtype"] = config["dtype"] = "bfloat16"
    path.write_text(json.dumps(config, indent=2))
    return sum(p.numel() for p in model.parameters())


def resolve(tiny: str | None, path: str | None) -> str:
    """What the engine loads for a scenario's `model:` section: the tiny preset (built on
    first use, then cached), else the given directory or model id."""
    if tiny:
        return str(build(preset=tiny).path)
    if path is None:
        raise ValueError("a model needs `tiny` or `path`")
    return str(path)
