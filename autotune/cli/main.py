"""The `autotune` command: parse arguments, call one subcommand's function, map errors to
exit codes. Each subcommand is a module of this package (`COMMANDS`), imported here by name
so that the package's import checks see every command (each defers its heavy imports to
the function it runs)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from autotune import __version__
from autotune.cli import _bench as bench
from autotune.cli import _compare as compare
from autotune.cli import _dashboard as dashboard
from autotune.cli import _engineinfo as engineinfo
from autotune.cli import _explain as explain
from autotune.cli import _export as export
from autotune.cli import _init as init
from autotune.cli import _report as report
from autotune.cli import _show as show
from autotune.cli import _tinymodel as tinymodel
from autotune.cli import _tune as tune
from autotune.cli import _validate as validate
from autotune.cli._options import Parser
from autotune.errors import AutotuneError
from autotune.tuning import interrupts

# Optional dependencies (pyproject.toml's extras) by the module that needs them: a command
# that imports one where it is missing says which extra to install, instead of a traceback.
EXTRAS = {"transformers": "bench", "tokenizers": "bench", "torch": "model",
          "optuna_dashboard": "dashboard", "psycopg": "postgres"}


# The subcommands in `--help`'s order, each a module of this package with `HELP`,
# `add_arguments(parser)` (which sets `func`) and, where it needs one, `DESCRIPTION`.
COMMANDS: dict[str, ModuleType] = {
    "tiny-model": tinymodel, "engine": engineinfo, "bench": bench, "tune": tune,
    "show": show, "report": report, "dashboard": dashboard, "export": export, "init": init,
    "compare": compare, "explain": explain, "validate": validate}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="autotune", description=(
        "Find the fastest safe vLLM launch configuration for a model, a GPU and a workload."))
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, module in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=module.HELP,
                                            description=getattr(module, "DESCRIPTION", None)))
    return parser


def _raise_interrupt(signum: int, frame: object) -> None:
    """SIGTERM takes Ctrl-C's path (context managers stop engines), as a SIGINT: inside
    `asyncio.run` the runner then cancels its main task cleanly, whereas a KeyboardInterrupt
    raised in the middle of a task is stored on it, and Python printed a page of "Task
    exception was never retrieved" after the one line.

    A process started in the background of a script (`autotune tune ... &`, nohup) inherits
    SIGINT ignored, and the SIGINT raised here would be lost with it: `kill PID` did
    nothing. Python's own handler then takes it for this signal (Ctrl-C stays ignored
    until a SIGTERM came)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.raise_signal(signal.SIGINT)


def main(argv: Sequence[str] | None = None) -> int:
    def command() -> int:
        words = list(sys.argv[1:] if argv is None else argv)
        # Everything after `--` is passed to `vllm serve` untouched.
        engine_args = words[words.index("--") + 1:] if "--" in words else []
        words = words[: words.index("--")] if "--" in words else words
        args = build_parser().parse_args(words)
        args.engine_args = engine_args
        if args.command == "tune":  # reading the engine's flags can take a while
            print(f"autotune tune: checking {args.scenario or args.model} against the "
                  "installed engine", file=sys.stderr if args.json else sys.stdout, flush=True)
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)

    return guarded(command)


def guarded(command: Callable[[], int]) -> int:
    """Run one command as an `autotune` process: SIGTERM takes Ctrl-C's path, and an error
    of autotune's own is one line and its exit code (a `--gpus` worker runs this way too).
    An interrupt Python drops is remembered for the command (`interrupts.remembered`): it
    still stops the study before its next trial."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with interrupts.remembered():
            return command()
    except AutotuneError as err:
        from autotune.tuning.sharing.storage import masked

        print(f"autotune: error: {masked(str(err))}", file=sys.stderr)
        return err.exit_code
    except ModuleNotFoundError as err:
        extra = EXTRAS.get((err.name or "").partition(".")[0])
        if extra is None:
            raise
        print(f"autotune: error: {err.name} is not installed, and this command needs it: "
              f"pip install 'vllm-autotune[{extra}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `autotune show ... | head`: the reader left; say nothing more, as `cat` does.
        # Python would complain again when it flushes stdout at exit, so stdout is pointed
        # at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:
        if not interrupts.interrupted(err):
            raise
        # A Ctrl-C inside a database call, re-raised by the storage as its own error.
        print("autotune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
