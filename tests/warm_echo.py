"""A stand-in engine command for the warm reaper's tests: prints what it was given and exits
with the code in its first argument (with `hold`: starts a child and waits, as an engine).

It imports `tests.warm_echo_dep`, which sets a variable at import time as vLLM's modules do
(TORCHINDUCTOR_CACHE_DIR, ...), and says whether its own module is also loaded under its
name (a cold `python -m` has it only as `__main__`)."""

import os
import sys

import tests.warm_echo_dep  # noqa: F401 - for its import-time side effect

if __name__ == "__main__" and sys.argv[1:] == ["hold"]:
    # An engine's stand-in: a child of its own (as the engine core is), then wait.
    import subprocess
    import time

    held = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("holding", os.getpid(), held.pid, flush=True)
    time.sleep(600)
elif __name__ == "__main__":
    print("argv", sys.argv[1:], "env", os.environ.get("WARM_ECHO"), "dep",
          os.environ.get("WARM_ECHO_DEP"), "copy", "tests.warm_echo" in sys.modules,
          flush=True)
    sys.exit(int(sys.argv[1]))
