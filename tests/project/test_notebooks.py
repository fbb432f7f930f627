"""The notebooks run top to bottom (nbclient, a real kernel), so they cannot rot: as
committed, on the committed H200 studies, from any working directory; through
`jupyter-execute` as the README says; and on a real CPU study (engine tests). Every cell
executes, every figure cell shows a plotly figure, and nothing is written to stderr."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

from tests.paths import ROOT

NOTEBOOKS = ROOT / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"


def execute(name: str, cwd: Path = NOTEBOOKS) -> nbformat.NotebookNode:
    """Run a notebook with its kernel in `cwd` (Jupyter's: the notebook's own folder)."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        f"{name} is committed with outputs"
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}}).execute()
    stderr = [o["text"] for c in nb.cells for o in c.get("outputs", [])
              if o.get("name") == "stderr"]
    assert not stderr, stderr  # no stray warnings
    return nb


def outputs(nb: nbformat.NotebookNode) -> tuple[int, str]:
    """How many plotly figures the notebook showed, and all the text it printed."""
    figures, text = 0, []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            figures += PLOTLY in out.get("data", {})
            text.append(out.get("text", "") + str(out.get("data", {}).get("text/html", "")))
    return figures, "".join(text)


def figure(nb: nbformat.NotebookNode, title: str) -> dict:
    """The plotly figure the notebook showed whose title starts with `title`."""
    shown = [out["data"][PLOTLY] for cell in nb.cells for out in cell.get("outputs", [])
             if PLOTLY in out.get("data", {})]
    return next(f for f in shown
                if str(f["layout"].get("title", {}).get("text", "")).startswith(title))


INTERACTIVITY = "Throughput per GPU against interactivity"


@pytest.mark.parametrize("cwd", ["notebooks", "elsewhere"])
def test_pareto_notebook_as_committed(cwd, tmp_path, monkeypatch):
    """No environment: the committed H200 study, whether the kernel runs in notebooks/ or
    in an unrelated directory."""
    monkeypatch.delenv("AUTOTUNE_STUDY", raising=False)
    monkeypatch.chdir(tmp_path)  # the shell's directory ($PWD) tells nothing either
    monkeypatch.setenv("PWD", str(tmp_path))
    nb = execute("pareto.ipynb", NOTEBOOKS if cwd == "notebooks" else tmp_path)
    figures, text = outputs(nb)
    # front, per GPU against interactivity, history, importances, parallel coordinates,
    # guardrail
    assert figures >= 6
    assert "study qwen3-4b-h200: 16 trials" in text
    # The chart of the decision (#8) and vLLM's defaults, with its definitions: this study's
    # steps keep the SLO's TPOT p95 alone (no median) and derive their total.
    assert "Interactivity is what one user sees: 1000 / TPOT" in text
    assert "median TPOT not stored" in text and "total tokens derived" in text
    chart = figure(nb, INTERACTIVITY)
    assert [t["name"] for t in chart["data"] if t["xaxis"] == "x"] == [
        "#8: the decision, p95 TPOT", "vLLM defaults #0, p95 TPOT"]
    assert "id='trials'" in text and "autotune export qwen3-4b-h200 --trial 8" in text


def test_compare_notebook_as_committed(tmp_path, monkeypatch):
    for var in ("AUTOTUNE_STUDY", "AUTOTUNE_STUDY_B"):
        monkeypatch.delenv(var, raising=False)
    figures, text = outputs(execute("compare_studies.ipynb", tmp_path))
    assert figures == 3  # the fronts side by side, then one history per study
    assert "qwen3-4b-h200: study qwen3-4b-h200, 16 trials" in text
    assert "qwen3-4b-24g: study qwen3-4b-24g, 14 trials" in text
    assert text.count("<tr><td>") == 2


def test_the_readmes_jupyter_execute_command(tmp_path):
    """`AUTOTUNE_STUDY=studies/qwen3-4b-24g.db .venv/bin/jupyter-execute notebooks/...`
    from the repository root: the kernel runs in notebooks/, the path is the shell's."""
    env = {**os.environ, "AUTOTUNE_STUDY": "studies/qwen3-4b-24g.db", "PWD": str(ROOT)}
    out = tmp_path / "run.ipynb"
    proc = subprocess.run([str(Path(sys.executable).with_name("jupyter-execute")),
                           "notebooks/pareto.ipynb", "--output", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (NOTEBOOKS / "run.ipynb").exists()
    nb = nbformat.read(out, as_version=4)
    figures, text = outputs(nb)
    assert "study qwen3-4b-24g: 14 trials" in text and figures >= 4
    assert figure(nb, INTERACTIVITY)["data"]  # the decision is the defaults' stand-in, #1


def test_jupyterlab_is_installed_to_open_them():
    """`make setup` installs a front end: the README's `.venv/bin/jupyter lab notebooks/`."""
    assert Path(sys.executable).with_name("jupyter-lab").exists()


@pytest.mark.engine
def test_pareto_notebook(cpu_study, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_STUDY", str(cpu_study.root / "engine-test.db"))
    figures, text = outputs(execute("pareto.ipynb"))
    assert figures >= 4  # front, history, parallel coordinates, guardrail
    assert "study engine-test: 3 trials" in text
    assert "id='trials'" in text and "too-small-kv" in text
    assert "vllm serve" in text and "autotune export engine-test --trial" in text


@pytest.mark.engine
def test_compare_studies_notebook(cpu_study, monkeypatch, tmp_path):
    # The second study: the same database under another name (no extra engine run).
    other = tmp_path / "engine-test-b.db"
    shutil.copy(cpu_study.root / "engine-test.db", other)
    monkeypatch.setenv("AUTOTUNE_STUDY", str(cpu_study.root / "engine-test.db"))
    monkeypatch.setenv("AUTOTUNE_STUDY_B", str(other))
    figures, text = outputs(execute("compare_studies.ipynb"))
    assert figures == 3  # the fronts side by side, then one history per study
    assert "engine-test: study engine-test, 3 trials" in text
    assert "engine-test-b: study engine-test, 3 trials" in text
    assert text.count("<tr><td>") == 2  # best against baseline, one row per study
