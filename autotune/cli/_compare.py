"""`autotune compare`: which GPU serves one model at one SLO for the least money.

Parses the studies and prices, calls `autotune.results.compare.compare`, prints its ranking
as a table or JSON. Each study is named as `show` names one: a .db file, a study name under
--studies-dir, or a storage URL holding one study.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING

from autotune.cli import _options as options
from autotune.cli._options import positive
from autotune.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from autotune.results.compare import Comparison, Entry

HELP = "which GPU: studies of one model at one SLO, ranked by their winners' cost per " \
    "million output tokens"


def named_price(text: str) -> tuple[str, float]:
    """`--gpu-hour NAME=PRICE`: a study's name and its price per GPU-hour, above 0."""
    name, sep, value = text.rpartition("=")
    try:
        price = float(value)
    except ValueError:
        price = math.nan
    if not sep or not name or not (price > 0 and math.isfinite(price)):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=PRICE with a price above 0")
    return name, price


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("studies", nargs="+", metavar="STUDY",
                   help="a .db file, a study name under --studies-dir, or a URL (two or more)")
    p.add_argument("--studies-dir", default="studies")
    p.add_argument("--gpu-hour", type=named_price, action="append", default=[],
                   metavar="NAME=PRICE", help="price of one GPU-hour in the study NAME "
                   "(of one hour of the machine for a study on vLLM's CPU build; default: "
                   "its scenario's cost.gpu_hour; repeatable)")
    p.add_argument("--load", type=positive, metavar="REQ/S",
                   help="also the replicas each needs for this load, and their cost an hour")
    p.add_argument("--any-model", action="store_true",
                   help="compare studies of different models too")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.results.compare import compare
    from autotune.results.show import open_existing
    from autotune.stored import json_data
    from autotune.tuning.sharing import storage

    prices = dict(args.gpu_hour)
    if len(prices) < len(args.gpu_hour):
        raise ConfigError("compare: --gpu-hour gives one study two prices")
    root = Path(args.studies_dir)
    studies = []
    for target in args.studies:
        url, name = storage.locate(target, None, root)
        storage.check(url, create=False, write=False)
        studies.append(open_existing(url, name, root))
    result = compare(studies, prices, args.load, args.any_model)
    if args.json:
        print(json.dumps(json_data(result), indent=2, default=str))
    else:
        show(result, options.console())
    return 0


def show(c: Comparison, console: Console) -> None:
    """The priced studies cheapest first, then those without a price by capacity per GPU."""
    from rich.table import Table
    from rich.text import Text

    from autotune.results.cost import NO_PRICE
    from autotune.results.show import slo_text

    console.print(Text(f"{c.model}; SLOs {slo_text(c.slos)}"))
    load = c.load
    table = Table(title="cost per million output tokens of each study's winner at its "
                  "capacity at SLO" + (f"; replicas for {load:g} req/s" if load else ""))
    cols = ["rank", "study", "device", "winner", "req/s", "per GPU", "replica-hour",
            "per M tokens", *(["replicas", "an hour"] if load else [])]
    for col in cols:
        table.add_column(col, overflow="fold")
    for i, e in enumerate([*c.priced, *c.unpriced], 1):
        table.add_row(*(Text(cell) for cell in _cells(i, e, load is not None)))
    console.print(table)
    if c.unpriced:
        console.print(Text(", ".join(e.study for e in c.unpriced) + f": {NO_PRICE} (or "
                           "--gpu-hour NAME=PRICE); ranked after, by capacity per GPU"))
    for e in [*c.priced, *c.unpriced]:
        if e.missing and e.missing != NO_PRICE:
            console.print(Text(f"{e.study}: {e.missing}"))
        if e.winner is not None and e.winner.cpu:  # no GPU: the price is the machine's
            console.print(Text(f"{e.study}: measured on vLLM's CPU build: a replica is one "
                               "CPU machine, no GPU" + (f"; {e.price.text(cpu=True)}"
                                                        if e.price.known else "")))
    for note in c.notes:
        console.print(Text(f"note: {note}"))


def _cells(rank: int, e: Entry, load: bool) -> list[str]:
    from autotune.results.cost import money
    from autotune.results.show import fmt

    w, cur = e.winner, e.price.currency
    head = [str(rank), e.study, e.device, f"#{w.number}" if w else "-"]
    if w is None:
        return head + ["-"] * (4 + 2 * load)
    return head + [fmt(w.capacity_rps, ".3g"), fmt(e.capacity_rps_per_gpu, ".3g"),
                   money(w.replica_hour, cur), money(w.per_million, cur),
                   *([fmt(w.replicas, "d"), money(w.load_hour, cur)] if load else [])]
