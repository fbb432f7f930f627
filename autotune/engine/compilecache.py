"""Warm restarts: one compile cache per study, and the environment that lets a trial use it.

vLLM keeps what torch.compile made under `VLLM_CACHE_ROOT/torch_compile_cache/<key>`, the
key a hash of the whole configuration as the engine derived it (and, in vLLM 0.26, of the
API key: `api_key`): on the H200 every trial compiled afresh (28-44 s) where a hit loads in
2-6 s. The study therefore keeps its own cache folder (kept across trials, time boxes and
resumed runs; one per engine version and device, since compiled kernels are both's), and
`autotune.tuning.policy.compilekey` may hold the token budget out of the key.

The CPU build compiles with the stock Inductor backend: its ahead-of-time artifacts never
load (vLLM 0.32: "Compiling model again due to a load failure"), and each of them keeps its
own Inductor cache, keyed on the whole configuration again. With the AOT path off and one
Inductor folder, Inductor's own cache (keyed on the graph itself, so it cannot load code
compiled for another graph) serves every configuration: 14 s cold, 2-3 s after.

On a GPU the launcher also forks vLLM's engine-core process instead of spawning it
(`VLLM_WORKER_MULTIPROC_METHOD=fork`, vLLM's own default outside its CLI, which sets
`spawn`): the fresh interpreter re-imported vLLM for 17-25 s of every H200 start. vLLM
itself falls back to `spawn` where CUDA is already initialised, and the CPU build always
spawns (`vllm/platforms/cpu.py`). None of this reaches an export: it changes how fast an
engine starts, not what it serves.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from autotune._flags import Flags
from autotune.stored import Stored

HIT, MISS = "hit", "miss"
ROOT = "VLLM_CACHE_ROOT"
AOT = "VLLM_USE_AOT_COMPILE"
INDUCTOR = "TORCHINDUCTOR_CACHE_DIR"
START_METHOD = "VLLM_WORKER_MULTIPROC_METHOD"
# What `engine.compile_cache` may say besides a folder: the study's own folder, or vLLM's
# default cache (`~/.cache/vllm`, shared by every engine of the machine).
STUDY, VLLM = "study", "vllm"


@dataclass(frozen=True)
class WarmLaunch(Stored):
    """How one launch shared compiled code, as its trial keeps it: the flags added to hold
    the compile key (`compilekey`; they are part of what was measured), the cache folder
    (None: vLLM's own) and the environment the launcher set for it."""

    flags: Flags = field(default_factory=dict)
    cache: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def folder(base: Path, engine: tuple[str, str], device: str | None,
           speculative_tokens: int = 0) -> Path:
    """The cache folder of one engine version on one device under a study's `base`.

    Speculative token counts get folders of their own: vLLM leaves the count out of its
    key (vLLM issue #53366), and a graph compiled for one count loaded for another fails
    with `AssertionError: expected size 7==9`."""
    name = "-".join([*engine, _slug(device or "cpu")])
    path = base / name
    return path / f"spec-{speculative_tokens}" if speculative_tokens else path


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "device"


# Set once a forked engine core failed to start in this process (`Server` then starts it
# again spawned): every later launch of the process spawns (`launch_env`).
_fork_failed: list[str] = []
SPAWN = {START_METHOD: "spawn"}  # what a failed forked start is retried with


def fork_failed(why: str) -> None:
    """A forked engine core failed to start (`why`): spawn every later one."""
    _fork_failed.append(why)


def launch_env(cache: Path | None, *, cpu: bool, fork: bool,
               user: Mapping[str, str]) -> dict[str, str]:
    """The environment a launch gets for a warm restart; a variable the scenario's
    `engine.env` (`user`) sets is the user's and kept (this process's own environment is
    not asked: the scenario's `engine.compile_cache` says where the cache goes)."""
    env: dict[str, str] = {}
    if cache is not None:
        env[ROOT] = str(cache)
        if cpu:
            env[AOT] = "0"
            env[INDUCTOR] = str(cache / "inductor")
    if fork and not cpu and not _fork_failed:
        env[START_METHOD] = "fork"
    return {k: v for k, v in env.items() if k not in user}


def api_key(cache: str | None) -> str:
    """The API key of an engine that keeps its compiled code in `cache` (None: vLLM's own
    cache): one per cache folder, made once and kept beside it, else one per user.

    vLLM 0.26 hashes every `VLLM_*` variable it knows into its compile cache's key, the API
    key autotune passes as `VLLM_API_KEY` included (`envs.compile_factors`; 0.32 leaves it
    out): a new key per engine gave every H200 and H100 trial a key of its own and a full
    compile. The key still keeps other users of the machine off a trial's server: its file
    is the user's alone (0600), a folder autotune makes for it too (0700; vLLM writes its
    hash factors, the key among them, inside the cache folder), and it is never on a
    command line. A folder that exists keeps its permissions (a team's shared cache)."""
    base = Path(cache) if cache else _autotune_cache()
    try:
        base.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        pass                        # made before, or by an engine launched beside this one
    path = base / "api-key"
    try:
        return path.read_text().strip() or _new_key(path)
    except FileNotFoundError:
        return _new_key(path)


def _new_key(path: Path) -> str:
    """Writes a new key where none is, or reads the one an engine launched at the same
    moment wrote first: the key is written whole to a file of this process's own and
    linked into place, which fails where a key already is, so two launches side by side
    (validate's pairs) end up with one key and never read a half-written file."""
    key = secrets.token_hex(16)
    own = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
        try:
            os.link(own, path)
        except FileExistsError:
            first = path.read_text().strip()
            if first:
                return first
            os.replace(own, path)   # an empty file holds no key: this one takes its place
    finally:
        own.unlink(missing_ok=True)
    return key


def _autotune_cache() -> Path:
    return Path(os.environ.get("AUTOTUNE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "autotune"))


def files(cache: str | None) -> int | None:
    """How many files a cache folder holds (None: no folder of autotune's): a launch that
    added none compiled nothing new."""
    if cache is None:
        return None
    root = Path(cache)
    return sum(len(names) for _, _, names in os.walk(root)) if root.is_dir() else 0


def outcome(logged: str | None, before: int | None, after: int | None,
            compiled: bool) -> str | None:
    """A launch's compile-cache outcome: what the engine's log said (`log.compile_cache`)
    where it said anything; else, for an engine that compiled, a miss when the cache
    folder gained files during the start and a hit when it gained none (the CPU build
    logs nothing of its cache)."""
    if logged is not None or not compiled or before is None or after is None:
        return logged
    return MISS if after > before else HIT
