"""Run the commands of a steps file one after the other: a job of several steps in one
`BOX_VERB=job` of box.sh (a study, then a check that reads its cache).

    python3 scripts/gpu/steps.py FILE

Each non-empty line of FILE that does not start with `#` is one command, split as a shell
would split it (`shlex`) and run from the current folder; a command that fails does not
stop the next. Prints each command's start, end and exit code; exits with the first
non-zero code, 0 when all passed.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    lines = Path(sys.argv[1]).read_text().splitlines()
    commands = [shlex.split(ln) for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    first = 0
    for i, command in enumerate(commands, start=1):
        t0 = time.monotonic()
        print(f"[steps] {i}/{len(commands)}: {shlex.join(command)}", flush=True)
        rc = subprocess.call(command)
        print(f"[steps] {i}/{len(commands)} exited {rc} after {time.monotonic() - t0:.0f} s",
              flush=True)
        first = first or rc
    return first


if __name__ == "__main__":
    sys.exit(main())
