"""Run the engine and take its whole process group down with it.

`python -m autotune.engine._reaper GRACE -- CMD...` leads the engine's process session, runs
CMD and exits as it did. Two things take the group down (SIGTERM, GRACE seconds, SIGKILL):
its own parent (the tuner) disappearing, even by SIGKILL (vLLM's API server can miss a
SIGTERM while its engine core starts), and CMD ending however it ends (its engine core and
workers would be left orphaned, holding their memory). It exits only once every other member
of the group is gone, so its exit means "nothing of the engine is left". When CMD ends a
status line (`status_line`) goes to the engine's log, so the tuner reads the exit at once.

With `--warm GRACE` it starts ahead of its engine (`autotune.engine.warm`): it imports the
modules named on one JSON line of stdin, says `ready`, and on a second line runs the command
in a fork of itself, which skips those imports; the entry point runs once as `__main__`.
Python 3.12's warning that it forks multi-threaded is about OpenBLAS's pool, which OpenBLAS
stops before a fork and restarts in the child on demand. Standard library only.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import time

# Starts the status line this process writes to the engine log when CMD ends.
MARK = "[autotune reaper]"
POLL_S = 0.2


def describe(code: int) -> str:
    """An exit status as words: `killed by SIGKILL`, `exited with code 1`."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def status_line(pid: int, code: int) -> str:
    """The line that reports how CMD ended; `autotune.engine.log.launcher_status` reads it."""
    return f"{MARK} engine command (pid {pid}) {describe(code)} (status {code})\n"


def members() -> list[int]:
    """The live processes of this process group other than this one (Linux `/proc`).

    Zombies are left out: they are dead, only not yet reaped by their parent (or init).
    Where `/proc` is missing the group cannot be listed, and the list is empty.
    """
    me, group = os.getpid(), os.getpgrp()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name (field 2) may contain spaces and parentheses: split after it.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == group:
            found.append(int(entry))
    return found


def clear_group(grace: float) -> None:
    """SIGTERM the rest of the group, give it `grace` seconds, SIGKILL what is left.

    This process ignores SIGTERM and is not sent SIGKILL, so it outlives the sweep.
    """
    if not members():
        return
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and members():
        time.sleep(POLL_S)
    for pid in members():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    deadline = time.monotonic() + 5.0  # SIGKILL is not instant: a process exits its calls
    while time.monotonic() < deadline and members():
        time.sleep(0.05)


def _take_down(child: subprocess.Popen[bytes], grace: float) -> None:
    os.killpg(0, signal.SIGTERM)  # this process ignores it
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(POLL_S)
    os.killpg(0, signal.SIGKILL)  # whatever is left, this process included


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--warm":
        return warm(float(argv[1]))
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m autotune.engine._reaper GRACE -- CMD...", file=sys.stderr)
        return 2
    grace = float(argv[0])
    parent = os.getppid()
    # The tuner stops the engine with killpg: the signal reaches CMD directly,
    # and this process stays to reap it and report its exit status.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = subprocess.Popen(argv[2:], preexec_fn=_default_signals)
    while True:
        try:
            code = child.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                _take_down(child, grace)
    return _report(child.pid, code, grace)


def _default_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


_pending = bytearray()  # what standard input gave beyond the last line read


def _line(parent: int) -> dict | None:
    """The next JSON line on standard input; None when the tuner is gone or closed it."""
    while b"\n" not in _pending:
        if os.getppid() != parent:
            return None
        ready, _, _ = select.select([0], [], [], POLL_S)
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return None
        _pending.extend(chunk)
    line, _, rest = bytes(_pending).partition(b"\n")
    _pending[:] = rest
    return json.loads(line)


def warm(grace: float) -> int:
    """Import an engine's entry point now, run the engine later in a fork (see the top)."""
    parent = os.getppid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    first = _line(parent)
    if first is None:
        return 0
    before = dict(os.environ)
    try:
        for module in first["preload"]:
            importlib.import_module(module)
    except BaseException as err:  # noqa: BLE001 - reported to the tuner, which starts cold
        print(f"failed {type(err).__name__}: {err}", flush=True)
        return 1
    print("ready", flush=True)
    job = _line(parent)
    if job is None:  # not needed after all, or the tuner is gone
        return 0
    log = os.open(job["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for fd in (1, 2):
        os.dup2(log, fd)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout.flush()
    # What the imports did to the environment, a cold start's engine has too: vLLM sets
    # variables at import time (TORCHINDUCTOR_CACHE_DIR, ...) that its engine core and
    # workers inherit, and the job's environment would otherwise wipe them.
    job["env"] = imported_env(job["env"], before, dict(os.environ))
    pid = os.fork()
    if pid == 0:
        _run_module(job)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if os.getppid() != parent:
            os.killpg(0, signal.SIGTERM)  # this process ignores it
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and not os.waitpid(pid, os.WNOHANG)[0]:
                time.sleep(POLL_S)
            os.killpg(0, signal.SIGKILL)
        time.sleep(POLL_S)
    return _report(pid, code, grace)


def imported_env(env: dict[str, str], before: dict[str, str],
                 after: dict[str, str]) -> dict[str, str]:
    """`env` as the spare's imports, which changed `before` into `after`, would have left
    it. A variable the imports touched takes their result where `env` holds what the
    spare started with (the imports would have done the same there); where `env` sets its
    own value, that value stays, as a `setdefault` in a cold start would keep it."""
    out = dict(env)
    for key in after.keys() | before.keys():
        if before.get(key) == after.get(key) or env.get(key) != before.get(key):
            continue
        if key in after:
            out[key] = after[key]
        else:
            out.pop(key, None)
    return out


def _run_module(job: dict) -> None:
    """In the fork: become the engine command (its environment, title, argv) and run it."""
    code = 1
    try:
        _default_signals()
        if job.get("title"):
            # Before the environment changes: setproctitle finds its room in the memory
            # after argv, where the original environment lives (cleared, it fails).
            try:
                import setproctitle  # vLLM's own dependency; `ps` then shows the command

                setproctitle.setproctitle(job["title"])
            except ImportError:
                pass
        os.environ.clear()
        os.environ.update(job["env"])
        sys.argv = list(job["argv"])
        # As `python -m` runs it: once, as __main__. The spare imported it under its own
        # name, and a second copy of a module's globals (vLLM's API server keeps state
        # there) is not the engine a cold start runs.
        sys.modules.pop(job["module"], None)
        runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # noqa: BLE001 - the engine's own failure, as a cold start shows it
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _report(pid: int, code: int, grace: float) -> int:
    """Write the status line, clear the group and exit as the command did."""
    try:
        sys.stdout.write(status_line(pid, code))
        sys.stdout.flush()
    except OSError:  # a full disk must not keep the group alive
        pass
    clear_group(grace)
    if code < 0:  # mirror death by signal, so the tuner can tell a SIGKILL (host OOM)
        if -code != signal.SIGKILL:  # SIGKILL's disposition cannot be set (EINVAL)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
