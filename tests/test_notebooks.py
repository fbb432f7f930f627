"""The notebooks run top to bottom on the real CPU study (nbclient, a real kernel), so they
cannot rot: every cell executes, and every figure cell shows a plotly figure."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbclient
import nbformat
import pytest

pytestmark = [pytest.mark.engine]

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"


def execute(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        f"{name} is committed with outputs"
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return nb


def outputs(nb: nbformat.NotebookNode) -> tuple[int, str]:
    """How many plotly figures the notebook showed, and all the text it printed."""
    figures, text = 0, []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            figures += PLOTLY in out.get("data", {})
            text.append(out.get("text", "") + str(out.get("data", {}).get("text/html", "")))
    return figures, "".join(text)


def test_pareto_notebook(cpu_study, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_STUDY", str(cpu_study.root / "engine-test.db"))
    figures, text = outputs(execute("pareto.ipynb"))
    assert figures >= 4  # front, history, parallel coordinates, guardrail
    assert "study engine-test: 3 trials" in text
    assert "id='trials'" in text and "too-small-kv" in text
    assert "vllm serve" in text and "autotune export engine-test --trial" in text


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
