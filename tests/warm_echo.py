"""A stand-in engine command for the warm reaper's tests: prints what it was given and exits
with the code in its first argument."""

import os
import sys

if __name__ == "__main__":
    print("argv", sys.argv[1:], "env", os.environ.get("WARM_ECHO"), flush=True)
    sys.exit(int(sys.argv[1]))
