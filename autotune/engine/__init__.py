"""The engine layer: start, watch and stop one vLLM server.

Public API: `server.Server` (a context manager around one `vllm serve`), `info.engine_info`
and `info.installed` (what the installed engine accepts), `log` (start-up figures and the
classification of start-up failures from the engine's log, and the log file read from a
byte offset), `prometheus` (the `/metrics` text), `endpoints` (the server's `/health`, text
pages and one completion, as the launcher asks them), `gpu` (NVML), `ballast` (holding the
rest of a device to emulate a smaller card), `liveness` (which of a running engine's
processes died; `Server.death` reports it), `cpuplace` (cores of their own for CPU engines
side by side).
`reaper` and `serve` are entry points of the processes `Server` starts
(`python -m autotune.engine.reaper`, `python -m autotune.engine.serve`).

Imports only the top-level basics (`autotune.errors`, `autotune.flags`).
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own.
__all__ = ["ballast", "compilecache", "cpuplace", "defaults", "gpu", "info", "log", "phases",
           "prometheus", "server", "warm"]
