"""The command line: parse, call one library function, map errors to exit codes.

`main.main` is the `autotune` console script; `bench` holds `autotune bench`; `worker.main`
is the entry point of one `tune --gpus` worker (`python -m autotune.cli.worker`).
"""
