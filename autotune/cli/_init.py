"""`autotune init` and `autotune tune --model`: a study from one command line, no YAML.

Reads the card (NVML: name and memory; none on the CPU build), the model's config.json and
the installed vLLM's flags, builds the scenario (`autotune.tuning.starter`), checks it
against the engine, and writes it into the study's folder as `scenario.yaml`
(`STUDIES/NAME/`, or beside the SQLite file of `--storage`), commented, so that the next
run can start from it (`autotune tune STUDIES/NAME/scenario.yaml`, or the same command
again, which finds the file and resumes). Prints one line per choice.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from autotune.cli._options import duration, positive, study_name, whole
from autotune.errors import ConfigError

HELP = "write a study's scenario from --model and --slo (what `tune --model` runs), " \
    "saying what it chose and why"


def model_arguments(p: argparse.ArgumentParser, required: bool) -> None:
    """The options `init` and `tune --model` share."""
    p.add_argument("--model", required=required, metavar="PATH_OR_ID",
                   help="a model directory with config.json, or a Hugging Face id")
    p.add_argument("--slo", action="append", metavar="KEY=MS",
                   help="an SLO the capacity is measured under, e.g. ttft_p95_ms=500 "
                   "(repeatable; at least one with --model)")
    p.add_argument("--workload", default="random", metavar="random|chat|text|trace|FILE",
                   help="the traffic: random (token counts, shared prefix on a GPU), chat "
                   "(conversations sharing a system prompt), text (shipped real text), trace "
                   "(the shipped day: bursts, a daily shape, shared prefixes), a trace file "
                   "(CSV or timestamped JSONL: your own traffic) or a JSONL file of prompts "
                   "(default random)")
    p.add_argument("--memory-gib", type=positive, metavar="GIB",
                   help="emulate a smaller card on this GPU (hardware.memory_gib)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    model_arguments(p, required=True)
    p.add_argument("--trials", type=whole(1), help="budget.trials (default 20; 5 on the CPU)")
    p.add_argument("--timeout", type=duration, help="budget.timeout, e.g. 8h")
    p.add_argument("--study", type=study_name,
                   help="study name (default: the model's folder name and the card)")
    p.add_argument("--studies-dir", default="studies", help="where the study folder goes")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path, _ = started(args, trials=args.trials,
                      timeout=f"{args.timeout:g}s" if args.timeout else None)
    print(f"next: autotune tune {path}")
    return 0


def started(args: argparse.Namespace, *, trials: int | None = None,
            timeout: str | None = None) -> tuple[Path, bool]:
    """Build, check and write the scenario of `args.model` (unless the same one is written
    already); the path, and whether an existing file was reused. Says what it chose.
    `trials` and `timeout` go into its budget (`init`'s; `tune --model` keeps its own
    `--trials` and `--timeout` for the run, so that the same command resumes)."""
    from autotune import _slo as slo
    from autotune import config
    from autotune.engine import gpu
    from autotune.engine.info import engine_info
    from autotune.tuning import starter
    from autotune.tuning.policy import memory, space
    from autotune.tuning.sharing import storage, workers

    if not args.slo:
        raise ConfigError("--model needs at least one --slo KEY=MS (e.g. ttft_p95_ms=500): "
                          "the capacity is measured under it")
    try:
        slos = slo.parse_all(args.slo)
    except ValueError as err:
        raise ConfigError(f"--slo: {err}") from None
    workload = args.workload
    if workload not in starter.WORKLOADS and not Path(workload).is_file():
        raise ConfigError(f"--workload {workload!r}: not one of "
                          f"{', '.join(starter.WORKLOADS)} and no such file")
    model = os.path.expanduser(args.model)
    if problem := config.model_problem(model):  # before a scenario is built, or written
        raise ConfigError(f"--model {args.model}: {problem}")
    try:
        shape = memory.load_shape(model)
    except ValueError as err:
        raise ConfigError(f"--model {args.model}: {err}") from None
    info = engine_info()
    device = gpu.device() if info.device != "cpu" else None
    cores = os.cpu_count() or 1
    card = starter.Card(device.name, device.memory_mib / 1024, cores) \
        if device is not None else starter.Card("cpu", None, cores)
    if args.memory_gib is not None and device is None:
        raise ConfigError("--memory-gib emulates a smaller card on a GPU; this machine runs "
                          "the CPU build")
    asked = starter.Asked(model, slos, workload, name=args.study, trials=trials,
                          timeout=timeout, memory_gib=args.memory_gib)
    start = starter.build(asked, card=card, engine=info, shape=shape,
                          check=starter.check_tokens(model) if shape is not None else None)
    name, root = str(start.scenario.name), Path(args.studies_dir)
    # the study's own folder (`tune --model --storage ...` keeps it beside that database)
    url = getattr(args, "storage", None) or os.environ.get(workers.STORAGE_ENV) \
        or f"sqlite:///{storage.database(name, root)}"
    path = storage.folder_of(url, name, root) / "scenario.yaml"
    config.check_files(start.scenario, path)
    space.check_against_engine(start.scenario, info, path)
    if path.exists():
        if config.load(path).model_dump() != start.scenario.model_dump():
            raise ConfigError(f"{path} exists and says otherwise: run `autotune tune {path}` "
                              "(it is yours to edit), or name another study with --study")
        print(f"{path}: already written, the same scenario")
        return path, True
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(start.yaml())
    except OSError as err:
        raise ConfigError(f"--studies-dir {args.studies_dir}: cannot write {path}: "
                          f"{err.strerror or err}") from None
    print(f"wrote {path} for {card.name} ({start.engine}):")
    for choice in start.choices:
        print(f"  {choice.text}")
    return path, False
