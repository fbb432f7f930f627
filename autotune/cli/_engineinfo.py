"""`autotune engine`: the installed vLLM, its version, device, flags and choices."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "show the installed vLLM and the choices it accepts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")
    p.add_argument("--refresh", action="store_true", help="re-read the engine's flags")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from autotune.engine.info import engine_info, multiples_text

    info = engine_info(use_cache=not args.refresh)
    if args.json:
        json.dump({"distribution": info.distribution, "version": info.version,
                   "device": info.device,
                   "kv_cache_dtype": info.choices("kv-cache-dtype"),
                   "block_size_multiple_of": info.multiples("block-size")},
                  sys.stdout, indent=2)
        print()
        return 0
    print(f"{info.distribution} {info.version} ({info.device})")
    dtypes = ", ".join(info.choices("kv-cache-dtype") or [])
    print(f"{len(info.flags)} flags; --kv-cache-dtype: {dtypes}")
    if blocks := info.multiples("block-size"):
        print(f"--block-size: {multiples_text(blocks)}")
    return 0
