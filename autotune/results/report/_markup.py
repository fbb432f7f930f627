"""The page's HTML pieces every section uses: escaping, a figure as a `<div>` (plotly.js is
inlined once by the page, not here), flags as a command line, and a titled `Section`."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio

from autotune._flags import FlagValue

# Plotly's modebar links to plotly's site; a report is read offline.
CONFIG = {"displaylogo": False, "responsive": True}


def escape(value: object) -> str:
    return html.escape(str(value))


def flags_text(flags: Mapping[str, FlagValue]) -> str:
    """`--max-num-seqs 256 --enable-prefix-caching ...`, or `(defaults)`."""
    return " ".join(f"--{k}" if v is True else f"--no-{k}" if v is False
                    else f"--{k} {json.dumps(v) if isinstance(v, dict) else v}"
                    for k, v in flags.items()) or "(defaults)"


def figure_html(fig: go.Figure, div_id: str) -> str:
    return pio.to_html(fig, full_html=False, include_plotlyjs=False, config=CONFIG,
                       div_id=div_id)


@dataclass(frozen=True)
class Section:
    """One titled section of the page; `body` is HTML."""

    title: str
    body: str

    def html(self) -> str:
        return f"<section><h2>{escape(self.title)}</h2>{self.body}</section>"
