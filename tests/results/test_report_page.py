"""The report of every committed study as a person sees it in a 1,280-px browser window
(headless Chromium): the page fits the window, no label covers another, the tilted axis
titles of the parallel coordinates stand apart, and `autotune report` prints nothing but
its one line (no warnings)."""

from __future__ import annotations

import math

import optuna
import pytest
from browser import chromium, load
from optuna.trial import TrialState

from autotune.cli.main import main
from tests.paths import ROOT

STUDIES = ROOT / "studies"
COMMITTED = sorted(STUDIES.glob("*.db"))
# Measured once plotly has placed its annotations, a moment after the plots are drawn: the
# page is measured every 100 ms until two measures in a row agree (at most 3 s; a fixed
# wait of 1 s cost 13 s of the inner loop's time over the committed studies).
PROBE = """new Promise(done => {
  const rects = sel => [...document.querySelectorAll(sel)].map(e => e.getBoundingClientRect())
    .filter(r => r.width > 0);
  const overlaps = bs => { const out = [];
    for (let i = 0; i < bs.length; i++) for (let j = i + 1; j < bs.length; j++) {
      const a = bs[i], b = bs[j];
      if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 &&
          b.top < a.bottom - 1) out.push([i, j]); }
    return out; };
  const measure = () => {
    const xs = [...document.querySelectorAll('#parallel .axis-title')]
      .map(e => e.getBoundingClientRect().left).sort((a, b) => a - b);
    return {width: document.documentElement.scrollWidth,
            labels: rects('#pareto g.annotation text').length,
            pareto: overlaps(rects('#pareto g.annotation text')),
            history: overlaps(rects('#history g.annotation text')),
            gap: xs.length > 1 ? Math.min(...xs.slice(1).map((x, i) => x - xs[i])) : 1e9,
            title: parseFloat(getComputedStyle(document.querySelector('#parallel .axis-title')
                                               || document.body).fontSize)}; };
  let last = JSON.stringify(measure()), waited = 0;
  const again = () => setTimeout(() => {
    const now = measure(), same = JSON.stringify(now) === last;
    waited += 100;
    if ((same && waited >= 200) || waited >= 3000) done(now);
    else { last = JSON.stringify(now); again(); }
  }, 100);
  again();
})"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One Chromium for the module's pages, each written to the same path: the browser
    compiles the inlined plotly.js once for that URL (see `browser.load`): about 2 s a page
    instead of 3. The tests are independent all the same: a page is a new navigation."""
    with chromium() as port:
        yield port, tmp_path_factory.mktemp("page") / "report.html"


@pytest.mark.parametrize("db", COMMITTED, ids=[p.stem for p in COMMITTED])
def test_report_fits_1280_px_with_no_overlapping_labels(db, browser, capsys):
    port, page = browser
    page.unlink(missing_ok=True)  # the page loaded is this study's or none
    assert main(["report", str(db), "-o", str(page)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err  # no warnings
    run = load(page, PROBE, width=1280, port=port)
    assert run.errors == []
    got = run.probe
    assert got["width"] <= 1280, got
    # a label for each completed trial, up to two (a study whose searched trials were all
    # pruned at their bursts has one: vLLM's defaults)
    completed = sum(1 for t in optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
                    .get_trials(states=(TrialState.COMPLETE,)))
    assert got["labels"] >= min(2, completed) and got["pareto"] == [] \
        and got["history"] == [], got
    # Axis titles tilted by 30 degrees clear each other when the axes stand further apart
    # than the text's height divided by sin(30 degrees).
    assert got["gap"] * math.sin(math.radians(30)) > 1.2 * got["title"], got
