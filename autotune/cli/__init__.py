"""The command line: parse, call one library function, map errors to exit codes.

`main.main` is the `autotune` console script; `bench` holds `autotune bench`.
"""
