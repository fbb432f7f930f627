"""The engine layer: start, watch and stop one vLLM server.

Public API: `server.Server` (a context manager around one `vllm serve`), `info.engine_info`
and `info.installed` (what the installed engine accepts), `log` (start-up figures and the
classification of start-up failures from the engine's log, and the log file read from a
byte offset), `prometheus` (the `/metrics` text), `gpu` (NVML), `ballast` (holding the
rest of a device to emulate a smaller card), `cpuplace` (cores of their own for CPU engines
side by side), `serve` (`python -m autotune.engine.serve`: vLLM's serve subcommand on the
CPU build, which `Server` and an exported deployment run).
Its own: `_endpoints` (the server's `/health`, text pages and one completion, as the
launcher asks them), `_liveness` (which of a running engine's processes died;
`Server.death` reports it) and `_reaper` (`python -m autotune.engine._reaper`, the process
that stops an engine whose tuner died).

Imports only the top-level basics (`autotune.errors`, `autotune._flags`).
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["ballast", "compilecache", "cpuplace", "defaults", "gpu", "info", "log", "phases",
           "prometheus", "serve", "server", "warm"]
