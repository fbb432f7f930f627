"""The distribution: an unclaimed name, every import declared, and `pip install .` into a
fresh venv without the engine gives working `show`, `report` and `export` (and a one-line
error naming the extra where a command needs more)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import tomllib

from tests.paths import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Modules whose distribution is named otherwise (and not findable from this venv alone).
DISTRIBUTION = {"yaml": "pyyaml", "pynvml": "nvidia-ml-py", "vllm": "vllm",
                "prometheus_client": "prometheus-client"}


def _requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower().replace("_", "-")
            for r in reqs}


def _guarded(tree: ast.AST) -> set[int]:
    """ids of import nodes inside `try: ... except ImportError` (optional by design, e.g.
    setproctitle, which comes with vLLM)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError",
                                                               "ModuleNotFoundError")
                for h in node.handlers):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _imports() -> dict[str, set[str]]:
    """Third-party top-level modules imported by the package, with the files importing them
    (imports guarded by `except ImportError` are optional and left out)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "autotune").rglob("*.py"):
        tree = ast.parse(path.read_text())
        guarded = _guarded(tree)
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module \
                and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top != "autotune" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    """Module -> distributions, read once: each read scans every installed distribution's
    metadata (half a second here)."""
    return importlib.metadata.packages_distributions()


def _distribution(module: str) -> str:
    if module in DISTRIBUTION:
        return DISTRIBUTION[module]
    dists = _distributions().get(module) or [module]
    return dists[0].lower().replace("_", "-")


def test_the_name_is_not_the_unrelated_autotune_on_the_index():
    assert PYPROJECT["project"]["name"] == "vllm-autotune"
    assert PYPROJECT["project"]["scripts"] == {"autotune": "autotune.cli.main:main"}


def test_every_import_is_declared_and_every_dependency_used():
    core = _requirement_names(PYPROJECT["project"]["dependencies"])
    extras = {name: _requirement_names(reqs)
              for name, reqs in PYPROJECT["project"]["optional-dependencies"].items()}
    declared = core | set().union(*extras.values())
    imported = {_distribution(m): files for m, files in _imports().items()}
    missing = {d: sorted(f) for d, f in imported.items() if d not in declared}
    assert not missing, f"imported but not declared: {missing}"
    unused = core - set(imported)
    assert not unused, f"declared but never imported: {unused}"
    # The optional ones sit in the extra a command's error message names.
    from autotune.cli.main import EXTRAS

    for module, extra in EXTRAS.items():
        assert _distribution(module) in extras[extra], (module, extra)
    assert {"transformers", "tokenizers"} <= extras["bench"]
    assert {"torch", "transformers"} <= extras["model"]


def _sources(dest: Path) -> Path:
    """What `pip install .` needs, copied (a build writes into its source tree)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    shutil.copytree(ROOT / "autotune", dest / "autotune",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_pip_install_without_the_engine_reads_studies(tmp_path):
    """A fresh venv, `pip install .` (dependencies from the package registry, or pip's
    cache), then the read side on a committed H200 study, outside the repository."""
    venv = tmp_path / "venv"
    # This venv's pip installs into it (`pip --python`): the same install, without the 3 s
    # of seeding a pip of its own. `--no-compile`: byte-compiling all 230 MB (plotly's
    # thousands of modules) took half the install; the commands below compile what they
    # import, once, as any first run does (bytecode writing is on for them).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                          "install", "--quiet", "--no-compile",
                          str(_sources(tmp_path / "src"))],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")}
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ROOT / "studies" / "qwen3-4b-h200.db", work / "h200.db")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "autotune"), *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=300)

    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-c", "import vllm"], capture_output=True).returncode != 0
    shown = run("show", "h200.db", "--json")
    assert shown.returncode == 0, shown.stderr
    assert '"study": "qwen3-4b-h200"' in shown.stdout
    made = run("report", "h200.db", "-o", "r.html")
    assert made.returncode == 0 and (work / "r.html").stat().st_size > 1_000_000, made.stderr
    # One format written with PyYAML, one without: every format is in one module with the
    # same imports, and tests/results checks each format's text.
    for fmt in ("k8s", "cli"):
        out = run("export", "h200.db", "--format", fmt)
        assert out.returncode == 0 and "VLLM_USE_FLASHINFER_SAMPLER" in out.stdout, out.stderr
    # Commands that need an extra say which, in one line, with no traceback.
    model = run("tiny-model", str(work / "m"))
    assert model.returncode == 2 and "Traceback" not in model.stderr, model.stderr
    assert "pip install 'vllm-autotune[" in model.stderr and model.stderr.count("\n") == 1
    dash = run("dashboard", "h200.db", "--port", "0")
    assert dash.returncode == 2 and "vllm-autotune[dashboard]" in dash.stderr, dash.stderr


@pytest.fixture
def fake_server():
    sys.path.insert(0, str(ROOT / "tests"))
    from fakeserver import FakeServer

    with FakeServer(interval=0.0) as url:
        yield url


def test_bench_without_transformers_names_the_extra(fake_server, monkeypatch, capsys):
    """`bench --url` builds prompts with the model's tokenizer (transformers)."""
    from autotune.cli.main import main

    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    assert main(["bench", "--url", fake_server, "--served-model-name", "m",
                 "--num-requests", "2"]) == 2
    err = capsys.readouterr().err
    assert err == ("autotune: error: transformers is not installed, and this command needs "
                   "it: pip install 'vllm-autotune[bench]'\n")
