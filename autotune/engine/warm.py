"""Warm starts: a reaper that has already imported vLLM, ready for the next engine.

A cold start spends seconds importing vLLM in the API-server process first. A spare reaper
(`python -m autotune.engine._reaper --warm`) does those imports while the previous engine is
torn down, then runs the engine in a fork of itself: same command, flags, environment, log,
process tree and reaping, without the imports on the critical path. A spare serves one
launch: `Server` takes one whose entry point and environment match (`take`) and asks for the
next as soon as its own engine is launched (`prepare`: the imports run while that engine
starts, which nobody measures, and the trial waits for them before it measures), or when it
stops if it had none; anything unusual means a cold start (`Server.launch_path`).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

WARM, COLD = "warm", "cold"
# Environment variables vLLM reads when it is imported (logging set-up, plugins): a spare
# imported with other values is not used.
IMPORT_TIME = ("VLLM_CONFIGURE_LOGGING", "VLLM_LOGGING_LEVEL", "VLLM_LOGGING_CONFIG_PATH",
               "VLLM_LOGGING_PREFIX", "VLLM_PLUGINS", "VLLM_TARGET_DEVICE",
               "CUDA_VISIBLE_DEVICES", "PYTHONPATH")


# Hosts with at least this many cores start engines warm unless told otherwise.
AUTO_MIN_CPUS = 8


def enabled() -> bool:
    """Whether engines start warm: `AUTOTUNE_WARM_START` 1/true/yes/on or 0/false/no/off;
    unset (or another value), on a host with at least AUTO_MIN_CPUS cores (a GPU host),
    where a warm engine was shown to be the same engine; small hosts start cold unless asked
    (benchmarks/README.md, "startup.py")."""
    value = os.environ.get("AUTOTUNE_WARM_START", "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return len(os.sched_getaffinity(0)) >= AUTO_MIN_CPUS


@dataclass(frozen=True)
class EntryPoint:
    """How a command runs as a module: `module` with `sys.argv` = `argv`."""

    module: str
    argv: list[str]
    title: str


def entry(command: Sequence[str]) -> EntryPoint | None:
    """The module form of an engine command, when it has one in this interpreter:
    `python -m M ARGS` (this Python) or vLLM's `vllm serve ARGS` script."""
    cmd = list(command)
    if len(cmd) >= 3 and cmd[1] == "-m" and os.path.realpath(cmd[0]) == \
            os.path.realpath(sys.executable):
        return EntryPoint(cmd[2], [cmd[2], *cmd[3:]], " ".join(cmd))
    if len(cmd) >= 2 and os.path.basename(cmd[0]) == "vllm" and cmd[1] == "serve":
        module = "vllm.entrypoints.cli.main"
        return EntryPoint(module, [cmd[0], *cmd[1:]],
                     " ".join([sys.executable, "-m", module, *cmd[1:]]))
    return None


# Entry points that import vLLM only once they run (vLLM's CLI, autotune.engine.serve):
# their spare imports the serve stack as well, or it would have nothing to skip.
SERVE_STACK = "vllm.entrypoints.cli.serve"
LAZY = {"vllm.entrypoints.cli.main": (SERVE_STACK,), "autotune.engine.serve": (SERVE_STACK,)}


def preloads(module: str) -> list[str]:
    """What a spare for `module` imports: the module, and what it would import on start."""
    return [module, *LAZY.get(module, ())]


def _key(module: str, env: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return module, tuple((k, env.get(k, "")) for k in IMPORT_TIME)


@dataclass
class Spare:
    """One started spare reaper and what it imported."""

    module: str
    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    state: str = "importing"  # importing | ready | failed

    def wait_ready(self, timeout: float) -> bool:
        """Wait for its `ready` line (or failure, or `timeout` s)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while self.state == "importing":
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                if self.proc.poll() is not None:
                    self.state = "failed"
                return self.state == "ready"
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if ready:
                line = self.proc.stdout.readline().decode(errors="replace").strip()
                self.state = "ready" if line == "ready" else "failed"
        return self.state == "ready"

    def start(self, entry_: EntryPoint, env: Mapping[str, str], log_path: str) -> None:
        """Hand it the command: from here on it is the engine's reaper."""
        assert self.proc.stdin is not None
        job = {"module": entry_.module, "argv": entry_.argv, "title": entry_.title,
               "env": dict(env), "log": log_path}
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()
        self.proc.stdin.close()

    def discard(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


_lock = threading.Lock()
_spares: dict[tuple[str, tuple[tuple[str, str], ...]], Spare] = {}


def prepare(module: str, env: Mapping[str, str], grace: float) -> Spare | None:
    """Start a spare for `module` with `env`, unless one is there already; the spare."""
    if not enabled():
        return None
    key = _key(module, env)
    with _lock:
        old = _spares.get(key)
        if old is not None and old.proc.poll() is None:
            return old
        proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.engine._reaper", "--warm", str(grace)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=dict(env), start_new_session=True)
        assert proc.stdin is not None
        proc.stdin.write((json.dumps({"preload": preloads(module)}) + "\n").encode())
        proc.stdin.flush()
        _spares[key] = spare = Spare(module, proc)
    return spare


def take(module: str, env: Mapping[str, str], timeout: float) -> Spare | None:
    """The spare for `module` and `env`, once it is ready (None: start cold)."""
    if not enabled():
        return None
    with _lock:
        spare = _spares.pop(_key(module, env), None)
    if spare is None:
        return None
    if spare.wait_ready(timeout):
        return spare
    spare.discard()
    return None


def discard(spare: Spare) -> None:
    """Stop `spare` and forget it (its launch is not coming)."""
    with _lock:
        for key, found in list(_spares.items()):
            if found is spare:
                del _spares[key]
    spare.discard()


@atexit.register
def discard_all() -> None:
    """Stop every idle spare (they also exit on their own when this process dies)."""
    with _lock:
        spares = list(_spares.values())
        _spares.clear()
    for spare in spares:
        spare.discard()
