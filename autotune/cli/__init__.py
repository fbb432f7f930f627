"""The command line: parse, call one library function, map errors to exit codes.

`main.main` is the `autotune` console script; `bench` holds `autotune bench`; `worker.main`
is the entry point of one `tune --gpus` worker (`python -m autotune.cli.worker`).
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own.
__all__ = ["main"]
