"""The `autotune` command: parse arguments, call one function, map errors to exit codes."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable, Sequence

from . import __version__
from .errors import AutotuneError, ConfigError


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that exits 2 with one line, like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {message}")


def _cmd_tiny_model(args: argparse.Namespace) -> int:
    from . import tinymodel

    built = tinymodel.build(args.dir, preset=args.preset, seed=args.seed, device=args.device)
    how = "reused" if built.reused else f"built in {built.seconds:.1f} s"
    print(f"{built.path}  ({built.preset}, {built.params:,} parameters, {how})")
    return 0


def _cmd_engine(args: argparse.Namespace) -> int:
    from .engineinfo import engine_info

    info = engine_info(use_cache=not args.refresh)
    if args.json:
        json.dump({"distribution": info.distribution, "version": info.version,
                   "device": info.device,
                   "kv_cache_dtype": info.choices("kv-cache-dtype")}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{info.distribution} {info.version} ({info.device})")
    dtypes = ", ".join(info.choices("kv-cache-dtype") or [])
    print(f"{len(info.flags)} flags; --kv-cache-dtype: {dtypes}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from .benchcli import run_bench

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="autotune", description=(
        "Find the fastest safe vLLM launch configuration for a model, a GPU and a workload."))
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)

    p = sub.add_parser("tiny-model", help="write a random-weight Qwen3 model (no download)")
    p.add_argument("dir", nargs="?", default=None,
                   help="output directory (default: ~/.cache/autotune/models/PRESET)")
    p.add_argument("--preset", default="tiny", choices=["tiny", "qwen3-4b"],
                   help="tiny: for the CPU engine; qwen3-4b: Qwen3-4B-Instruct-2507's shapes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="where to initialise weights: auto, cpu, cuda")
    p.set_defaults(func=_cmd_tiny_model)

    p = sub.add_parser("engine", help="show the installed vLLM and the choices it accepts")
    p.add_argument("--json", action="store_true")
    p.add_argument("--refresh", action="store_true", help="re-read the engine's flags")
    p.set_defaults(func=_cmd_engine)

    from .benchcli import add_bench_arguments

    p = sub.add_parser("bench", help="benchmark a running server or one it launches",
                       description="Benchmark a vLLM server like `vllm bench serve`. Pass vLLM "
                       "flags for a launched server after `--`.")
    add_bench_arguments(p)
    p.set_defaults(func=_cmd_bench)
    return parser


def _raise_interrupt(signum: int, frame: object) -> None:
    # SIGTERM takes the same clean-up path as Ctrl-C: context managers stop engines.
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        # Everything after `--` is passed to `vllm serve` untouched.
        engine_args = argv[argv.index("--") + 1:] if "--" in argv else []
        argv = argv[: argv.index("--")] if "--" in argv else argv
        args = build_parser().parse_args(argv)
        args.engine_args = engine_args
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except AutotuneError as err:
        print(f"autotune: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
