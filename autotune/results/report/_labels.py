"""Labels written beside the points of a figure where none overlaps another label or a marker,
reckoned in pixels of the report's plot area (a 1,280-px window)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from autotune.results.report.points import HEIGHT, Point

# Pixel size of a figure's plotting area on the report page (1,280-px window) and of its
# label text, for placing labels where they cannot overlap.
PLOT_W, PLOT_H = 1000, HEIGHT - 180
CHAR_W, LINE_H = 7.0, 14.0
MARKER = 16.0  # px: a marker's box, kept clear of labels

Box = tuple[float, float, float, float]  # left, top, right, bottom in pixels


@dataclass
class Label:
    """A text to write next to the point (x, y) of a figure, in data coordinates."""

    x: float
    y: float
    text: str
    colour: str = "#222"


@dataclass(frozen=True)
class Frame:
    """The plot area labels are placed in: its axis ranges (data coordinates), its width in
    pixels and, in a figure of subplots, which one (`row`, `col`)."""

    x_range: Sequence[float]
    y_range: Sequence[float]
    width: float = PLOT_W
    row: int | None = None
    col: int | None = None

    def pixels(self, x: float, y: float) -> tuple[float, float]:
        """The data point (x, y) in pixels from the plot area's top left corner."""
        xr, yr = self.x_range, self.y_range
        return ((x - xr[0]) / (xr[1] - xr[0]) * self.width,
                (yr[1] - y) / (yr[1] - yr[0]) * PLOT_H)


def axis_range(values: Sequence[float], pad: float = 0.08, log: bool = False
               ) -> list[float]:
    """A range holding `values` with `pad` of it spare on both sides (labels fit inside)."""
    lo, hi = min(values), max(values)
    if log:
        lo, hi = math.log10(max(lo, 1e-9)), math.log10(max(hi, 1e-9))
    span = (hi - lo) or abs(hi) or 1.0
    return [lo - pad * span, hi + pad * span]


def place_labels(fig: go.Figure, labels: Sequence[Label], frame: Frame,
                 points: Sequence[tuple[float, float]] = ()) -> None:
    """Write each label beside its point where it overlaps no other label, no marker and
    stays inside the plot (a label that finds no such place beside its point goes further
    out, on a leader line). Positions are worked out in pixels of the report's plot area."""
    width = frame.width
    taken = [(cx - MARKER / 2, cy - MARKER / 2, cx + MARKER / 2, cy + MARKER / 2)
             for cx, cy in (frame.pixels(x, y) for x, y in points)]
    for lab in sorted(labels, key=lambda lb: (lb.x, lb.y)):
        cx, cy = frame.pixels(lab.x, lab.y)
        w, h = CHAR_W * len(lab.text) + 4, LINE_H + 2
        chosen: tuple[float, float, Box] | None = None
        dy: float  # whole pixels in the loop below, fractions in the fallback
        for dist in (14, 26, 40, 60, 85):
            for dx, dy in ((0, dist), (0, -dist), (dist + w / 2, 0), (-dist - w / 2, 0),
                           (dist + w / 2, dist), (-dist - w / 2, dist),
                           (dist + w / 2, -dist), (-dist - w / 2, -dist)):
                box = (cx + dx - w / 2, cy + dy - h / 2, cx + dx + w / 2, cy + dy + h / 2)
                inside = box[0] >= 0 and box[2] <= width and box[1] >= 0 and box[3] <= PLOT_H
                if inside and not any(overlap(box, t) for t in taken):
                    chosen = (dx, dy, box)
                    break
            if chosen:
                break
        if chosen is None:  # crowded: straight up, as far as it takes
            dy = -30.0
            while any(overlap((cx - w / 2, cy + dy - h / 2, cx + w / 2, cy + dy + h / 2), t)
                      for t in taken) and dy > -PLOT_H:
                dy -= h
            chosen = (0.0, dy, (cx - w / 2, cy + dy - h / 2, cx + w / 2, cy + dy + h / 2))
        dx, dy, box = chosen
        taken.append(box)
        near = abs(dx) <= w / 2 + 14 and abs(dy) <= 14
        # Beside its point the text is shifted (plotly's y grows upwards); further out it
        # hangs on a leader line from the point.
        where = {"xshift": dx, "yshift": -dy, "showarrow": False} if near else \
            {"ax": dx, "ay": dy, "showarrow": True, "arrowwidth": 1, "arrowhead": 0,
             "arrowcolor": "#999", "standoff": 6}
        fig.add_annotation(x=lab.x, y=lab.y, text=lab.text, font={"size": 11,
                           "color": lab.colour}, **where,
                           **({"row": frame.row, "col": frame.col} if frame.row else {}))


def overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """The boxes (left, top, right, bottom) `a` and `b` overlap."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def grouped(pts: Sequence[Point]) -> list[tuple[Point, str]]:
    """Points at the same place (a configuration measured twice: `same as #N`) share one
    label, `#2 = #3`."""
    groups: dict[tuple[float, float], list[Point]] = {}
    for p in pts:
        groups.setdefault((p.throughput, p.latency_ms), []).append(p)
    return [(g[0], " = ".join(p.label for p in g)) for g in groups.values()]
