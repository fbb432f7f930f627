"""Read a vLLM server log: start-up figures and the reason a start failed.

Pure functions over text, so they are tested on real log excerpts. Messages
differ between releases; each pattern lists the spellings seen so far. The file
itself is read from a byte offset (`read_text`, `read_bytes`, `size`): a server
reads only what the current launch wrote, never an earlier launch's failure.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

from autotune import _reasons as reasons
from autotune.engine._reaper import MARK
from autotune.engine.compilecache import HIT, MISS, WarmLaunch
from autotune.stored import Stored

# Failure reasons, stored on pruned trials and shown to users (meanings in `autotune._reasons`).
OOM = reasons.OOM
KV_TOO_SMALL = reasons.KV_TOO_SMALL
INVALID_FLAG = reasons.INVALID_FLAG
PORT_IN_USE = reasons.PORT_IN_USE
TIMEOUT = reasons.TIMEOUT
FAILED_TO_START = reasons.FAILED_TO_START
CRASHED = reasons.CRASHED
REASONS = (OOM, KV_TOO_SMALL, INVALID_FLAG, PORT_IN_USE, TIMEOUT, FAILED_TO_START, CRASHED)

# First match wins: a KV-capacity error also mentions memory, and config
# validation errors are wrapped in ValueError.
_FAILURES: list[tuple[str, re.Pattern[str]]] = [
    (PORT_IN_USE, re.compile(r"Address already in use|\[Errno 98\]")),
    (KV_TOO_SMALL, re.compile(
        r"larger than the available KV cache memory"
        r"|larger than the maximum number of tokens that can be stored in KV cache"
        r"|max_model_len \S+ is larger than")),
    (OOM, re.compile(
        r"No available memory for the cache blocks"
        r"|CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError"
        r"|is less than desired (?:GPU|CPU) memory utilization"
        r"|is less than requested memory for kv"
        r"|Cannot allocate memory")),
    (INVALID_FLAG, re.compile(
        r"unrecognized arguments|error: argument|invalid choice"
        r"|Value error,|validation error|ValidationError|ValueError:|TypeError:.*argument")),
]


@dataclass(frozen=True)
class StartupFigures(Stored):
    """What the engine says about itself while starting; None where it did not say."""

    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    num_blocks: int | None = None
    block_size: int | None = None
    weights_load_s: float | None = None
    weights_gib: float | None = None
    compile_s: float | None = None
    graph_capture_s: float | None = None
    engine_init_s: float | None = None
    # What the engine made of `--async-scheduling`: it turns it off by itself for some
    # configurations (ngram speculation), so the flags alone do not say what ran.
    async_scheduling: bool | None = None
    # What the engine decided for flags its parser leaves unset (`autotune.engine.defaults`).
    max_num_batched_tokens: int | None = None
    prefix_caching: bool | None = None
    # Whether torch.compile found its work in the compile cache (HIT) or compiled it (MISS),
    # and the cache's key (vLLM's hash of the configuration as it derived it); None where
    # the engine did not say (eager, or the CPU build, whose compiler logs nothing of it:
    # `autotune.engine.compilecache.outcome` reads its cache folder instead).
    compile_cache: str | None = None
    compile_key: str | None = None


@dataclass(frozen=True)
class Startup(StartupFigures):
    """A trial's start-up as its record keeps it: the engine's figures, how it was launched
    (`Server.launch_path`) and seconds per phase (`phases.PhaseClock`). A failed start keeps
    only the last two, records made before the phases were timed only the figures, and a
    trial that started nothing none of it."""

    launch: str | None = None
    phases: dict[str, float] = field(default_factory=dict)
    # How the launch shared compiled code (`autotune.engine.compilecache.WarmLaunch`): the
    # flags added to hold the compile key (what was measured, so exports carry them), the
    # compile cache's folder and the environment the launcher set; None before warm restarts.
    warm: WarmLaunch | None = None
    NESTED = {"warm": WarmLaunch}
    EMPTY = ("warm",)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


_FIGURES: list[tuple[str, re.Pattern[str]]] = [
    ("kv_cache_tokens", re.compile(r"KV cache size: ([\d,]+) tokens")),
    ("max_concurrency", re.compile(
        r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x")),
    ("num_blocks", re.compile(r"# (?:GPU|CPU) blocks: ([\d,]+)|num_gpu_blocks(?:=|: )([\d,]+)")),
    ("block_size", re.compile(r"block_size(?:=|: )(\d+)")),
    ("weights_load", re.compile(
        r"Model loading took ([\d.]+) ?GiB(?: memory)? and ([\d.]+) ?s")),
    ("weights_load_s", re.compile(r"Loading weights took ([\d.]+) ?s")),
    ("compile_s", re.compile(r"torch\.compile t(?:akes|ook) ([\d.]+) ?s in total")),
    ("graph_capture_s", re.compile(r"Graph capturing finished in ([\d.]+) ?sec")),
    ("engine_init_s", re.compile(
        r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) ?s")),
]


# vLLM 0.26 (GPU) logs the first when async scheduling is on; 0.32 (CPU build and GPU)
# warns with the second when ngram speculation turns it off.
_ASYNC = re.compile(r"Asynchronous scheduling is (enabled|disabled)"
                    r"|Async scheduling not supported with .* will be (disabled)")


# The scheduler's budget when chunked prefill is on, and the engine's configuration line.
_BATCHED = re.compile(r"max_num_batched_tokens=([\d,]+)")
_PREFIX_CACHING = re.compile(r"enable_prefix_caching=(True|False)")


def parse_startup(log: str) -> StartupFigures:
    """Start-up figures from a server log (the last value wins when repeated)."""
    found: dict[str, float | int | bool] = {}
    for m in _ASYNC.finditer(log):
        found["async_scheduling"] = (m.group(1) or m.group(2)) == "enabled"
    for m in _BATCHED.finditer(log):
        found["max_num_batched_tokens"] = int(_num(m.group(1)))
    for m in _PREFIX_CACHING.finditer(log):
        found["prefix_caching"] = m.group(1) == "True"
    for key, pattern in _FIGURES:
        for m in pattern.finditer(log):
            if key == "max_concurrency":
                found["max_concurrency_tokens"] = int(_num(m.group(1)))
                found["max_concurrency"] = _num(m.group(2))
            elif key == "weights_load":
                found["weights_gib"] = _num(m.group(1))
                found["weights_load_s"] = _num(m.group(2))
            elif key in ("kv_cache_tokens", "num_blocks", "block_size"):
                found[key] = int(_num(next(g for g in m.groups() if g is not None)))
            else:
                found.setdefault(key, _num(m.group(1)))
    state, key_hash = compile_cache(log)
    return StartupFigures(**found, compile_cache=state,  # type: ignore[arg-type]
                          compile_key=key_hash)


# vLLM's torch.compile cache as 0.26-0.32 log it on a GPU: the key's folder, a compiled
# range loaded or compiled, the whole ahead-of-time artifact loaded or saved (or a load
# that failed: the CPU build's AOT artifacts never load, so it compiles again).
_CACHE_DIR = re.compile(r"torch_compile_cache/([0-9a-f]{10})/")
_AOT_DIR = re.compile(r"torch_aot_compile/([0-9a-f]{10})")
_LOADED = re.compile(r"Directly load (?:the compiled graph|AOT compilation)")
_COMPILED = re.compile(r"Compiling a graph for compile range|saved AOT compiled function"
                       r"|Compiling model again due to a load failure")


def compile_cache(log: str) -> tuple[str | None, str | None]:
    """(HIT or MISS or None, the key) from a start-up's log: a miss when any graph was
    compiled, a hit when graphs were only loaded, None when the log says neither."""
    key = _CACHE_DIR.search(log) or _AOT_DIR.search(log)
    state = MISS if _COMPILED.search(log) else HIT if _LOADED.search(log) else None
    return state, key.group(1) if key else None


def classify_failure(log: str, returncode: int | None) -> str:
    """The reason a server that exited during start-up failed: what its log names, else
    `failed_to_start` (an engine that never served did not crash while measured)."""
    for reason, pattern in _FAILURES:
        if pattern.search(log):
            return reason
    # Killed by the kernel's OOM killer (or anyone) with SIGKILL: host memory.
    if returncode is not None and returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return OOM
    return FAILED_TO_START


def error_summary(log: str, limit: int = 300) -> str:
    """The most telling line of a failed start, for one-line reports: the line a failure
    reason was read from, else the log's last error line (`last_error`)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for _, pattern in _FAILURES:
        for line in reversed(lines):
            if pattern.search(line):
                return _shorten(line, limit)
    if error := last_error(log, limit):
        return error
    for line in reversed(lines):
        if re.search(r"Error|error|Exception", line):
            return _shorten(line, limit)
    return _shorten(lines[-1], limit) if lines else "no output"


# An exception as Python prints it (`vllm...EngineDeadError: ...`), or a line logged at
# ERROR level; a loose "error" anywhere also matches names in a native library's exit
# chatter (nanobind lists leaked functions by name when the engine dies).
_ERROR_LINE = re.compile(r"^[\w.]*(?:Error|Exception)\b|\b(?:ERROR|CRITICAL)\b")
# vLLM's prefix of a logged line: `(APIServer pid=1) ERROR 11-30 12:11:03 [file.py:906] `.
_PREFIX = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:[A-Z]+ \d\d-\d\d [\d:]+ \[[^\]]*\] )?")


def last_error(log: str, limit: int = 300) -> str | None:
    """The last error line of a log (an exception, or a line logged at ERROR level) without
    vLLM's prefix; None when there is none. For an engine that died while serving, its
    last words say more than the start-up failure patterns of `error_summary`."""
    for line in reversed(log.splitlines()):
        text = _PREFIX.sub("", line.strip(), count=1)
        if text and not text.startswith("Traceback") and (
                _ERROR_LINE.search(text) or _ERROR_LINE.search(line)):
            return _shorten(text, limit)
    return None


_STATUS = re.compile(re.escape(MARK) + r".*\(status (-?\d+)\)")


def launcher_status(log: str) -> int | None:
    """The launched command's exit status as the reaper wrote it in the log (negative: the
    signal that killed it), or None when it has not ended yet."""
    found = _STATUS.findall(log)
    return int(found[-1]) if found else None


def _shorten(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def tail(log: str, lines: int = 40) -> str:
    return "\n".join(log.splitlines()[-lines:])


def read_bytes(path: Path, since: int = 0) -> bytes:
    """The log file's bytes from byte offset `since`; empty when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(since)
            return f.read()
    except OSError:
        return b""


def read_text(path: Path, since: int = 0) -> str:
    """The log file from byte offset `since` as text; empty when it cannot be read."""
    return read_bytes(path, since).decode(errors="replace")


def size(path: Path) -> int:
    """The log file's size in bytes (0 when it does not exist yet): where the next read
    starts to see only what was written after now."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
