"""`autotune report` of the real CPU study, opened in a real headless Chromium (Debian's
package, driven over the DevTools Protocol): every plot is drawn with as many points as the
study database holds, no JavaScript error, nothing fetched from the network."""

from __future__ import annotations

import struct

import pytest
from browser import load

from autotune.cli.main import main
from autotune.results import show
from autotune.results.report import _startup as startup
from autotune.results.report import importance, parallel, points
from autotune.tuning.records.snapshot import records

pytestmark = [pytest.mark.engine]

# Per plot: its traces, drawn SVG markers and bars, parallel-coordinate axes, and how many
# pixels its WebGL canvases painted (plotly draws parallel coordinates with WebGL).
PROBE = """(() => {
  const painted = c => {
    const o = document.createElement('canvas'); o.width = c.width; o.height = c.height;
    const ctx = o.getContext('2d'); ctx.drawImage(c, 0, 0);
    const d = ctx.getImageData(0, 0, o.width, o.height).data; let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
    return n;
  };
  const plots = [...document.querySelectorAll('.js-plotly-plot')].map(gd => ({
    id: gd.id,
    traces: gd._fullData.map(t => t.name),
    markers: gd.querySelectorAll('.scatterlayer .point').length,
    bars: gd.querySelectorAll('.barlayer .point').length,
    axes: gd.querySelectorAll('.parcoords .y-axis').length,
    painted: [...gd.querySelectorAll('canvas')].reduce((n, c) => n + painted(c), 0),
  }));
  return {plots, notes: [...document.querySelectorAll('p.note')].map(p => p.textContent),
          rows: document.querySelectorAll('#trials tbody tr').length};
})()"""


def test_report_renders_every_plot_in_chromium(cpu_study, tmp_path, capsys):
    db = cpu_study.root / "engine-test.db"
    page = tmp_path / "report.html"
    assert main(["report", str(db), "-o", str(page)]) == 0
    assert f"written to {page}" in capsys.readouterr().err
    st = show.open_existing(str(db))
    shot = tmp_path / "report.png"
    run = load(page, PROBE, screenshot=shot)

    assert run.errors == []
    assert all(url.startswith("file://") for url in run.requests), run.requests  # offline
    plots = {p["id"]: p for p in run.probe["plots"]}
    measured = points.points(st)[0]
    checked = [r for r in records(st) if r.quality and r.quality.checked]
    assert len(measured) >= 2 and checked  # the defaults and the searched trial
    assert plots["pareto"]["markers"] == len(measured)
    assert "baselines" in plots["pareto"]["traces"]
    assert plots["history"]["markers"] == len([p for p in measured if p.gain is not None])
    (coordinates,) = parallel.parallel_figure(st).data
    assert plots["parallel"]["axes"] == len(coordinates.dimensions)
    assert plots["parallel"]["painted"] > 1000  # the lines themselves, drawn by WebGL
    assert plots["guardrail"]["bars"] == 2 * len(checked)
    imp = importance.importances(st)
    if isinstance(imp, str):  # one searched trial: a note instead of a plot, not a crash
        assert set(plots) == {"pareto", "history", "parallel", "guardrail", "startup",
                              "gputime", "interactivity"}
        assert imp in run.probe["notes"]
    else:
        assert plots["importances"]["bars"] == len(imp)
    # Start-up: one stacked bar per started engine, a segment per phase it showed.
    started = [r.startup.phases for r in records(st) if r.startup_s is not None]
    assert len(started) >= 2 and all(started)
    shown = {name for phases in started for name in phases}
    assert plots["startup"]["traces"] == [n.replace("_", " ") for n in startup.PHASE_COLOURS
                                          if n in shown]
    # plotly draws a bar element for every trial on every trace (empty where a phase is absent)
    assert plots["startup"]["bars"] == len(plots["startup"]["traces"]) * len(started)
    assert run.probe["rows"] == len(st.trials)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width == 1400 and height > 2000  # the whole page, not one screen
