"""The command line: parse, call one library function, map errors to exit codes.

`main.main` is the `autotune` console script and `worker.main` the entry point of one `tune
--gpus` worker (`python -m autotune.cli.worker`, which `tuning.sharing.workers` runs); each
subcommand is a private module of its own (`_tune`, `_bench`, ...).
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["main", "worker"]
