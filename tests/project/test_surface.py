"""Each package declares its public surface: `__all__` in its `__init__.py` names exactly the
modules that code outside the package imports (the package's other modules, the layers above,
benchmarks/, scripts/ and the notebooks), and exactly the modules whose names do not start
with `_`: an internal module is private by its name (`autotune.measure._steady`), as in
Optuna. An import of a private module from outside its package fails here, so a new
dependency on an internal module is a decision (make it public, in `__all__`) rather than an
accident. Tests may import anything."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from tests.paths import ROOT
from tests.project.test_layers import PACKAGE, _imports, _modules

# Code that uses the library from outside it, besides the package's own modules.
USERS = ("benchmarks", "scripts")
NOTEBOOKS = ROOT / "notebooks"


def _notebook_imports(path: Path) -> set[str]:
    """The autotune modules a notebook's code cells import (each cell parsed on its own;
    IPython magics skipped)."""
    found: set[str] = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(line for line in cell["source"] if not line.lstrip().startswith("%"))
        found |= set(_imports_of(source))
    return found


def _imports_of(source: str) -> list[str]:
    """The autotune names `source` imports: each module, and each name taken from one (which
    may be a module: `from autotune.engine import reaper`)."""
    tree = ast.parse(source)
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("autotune")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autotune"):
            out += [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
    return out


def _run_by_name(source: str) -> set[str]:
    """The autotune modules `source` runs as `python -m` in a command it builds (`"-m"`, then
    `"autotune.engine.serve"`, in one list): a module run so is used as if imported."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.List, ast.Tuple)):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found |= {w for before, w in zip(words[:-1], words[1:], strict=True) if before == "-m"
                      and isinstance(w, str) and re.fullmatch(r"autotune(\.\w+)+", w)}
    return found


def importers() -> dict[str, set[str]]:
    """Each importer (a module of the package by dotted name, or `user:PATH` for a file of
    benchmarks/, scripts/ or the notebooks) and the autotune names it imports or runs by
    name."""
    found = {name: set(_imports(name, path)) | _run_by_name(path.read_text())
             for name, path in _modules()}
    for folder in USERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[f"user:{path.relative_to(ROOT)}"] = set(_imports_of(path.read_text()))
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        found[f"user:{path.relative_to(ROOT)}"] = _notebook_imports(path)
    return found


def surfaces() -> dict[str, tuple[set[str], set[str]]]:
    """Per package (dotted name): (its modules imported from outside it, what its `__all__`
    declares)."""
    modules = dict(_modules())
    packages = sorted(n for n, p in modules.items() if p.name == "__init__.py")
    users = importers()
    out = {}
    for package in packages:
        children = {n.rpartition(".")[2] for n in modules
                    if n.rpartition(".")[0] == package and n != package} - {"__main__"}
        used = {child for child in children for who, names in users.items()
                if not who.startswith(package + ".")
                and any(n == f"{package}.{child}" or n.startswith(f"{package}.{child}.")
                        for n in names)}
        tree = ast.parse(modules[package].read_text())
        declared = next((set(ast.literal_eval(node.value)) for node in tree.body
                         if isinstance(node, ast.Assign)
                         and any(isinstance(t, ast.Name) and t.id == "__all__"
                                 for t in node.targets)), set())
        out[package] = (used, declared)
    return out


def problems(found: dict[str, tuple[set[str], set[str]]]) -> list[str]:
    """One line per package whose `__all__` differs from what is imported from outside it,
    or from its modules whose names do not start with `_`."""
    wrong = []
    for package, (used, declared) in sorted(found.items()):
        if used - declared:
            wrong.append(f"{package}: imported from outside but not in __all__: "
                         f"{sorted(used - declared)}")
        if declared - used:
            wrong.append(f"{package}: in __all__ but imported by nothing outside it: "
                         f"{sorted(declared - used)}")
        if private := sorted(n for n in declared if n.startswith("_")):
            wrong.append(f"{package}: private by name but in __all__: {private}")
    return wrong


def unmarked() -> list[str]:
    """Modules that are neither in their package's `__all__` nor private by name."""
    modules = dict(_modules())
    found = surfaces()
    return sorted(n for n in modules if n.rpartition(".")[0] in found
                  and modules[n].name != "__init__.py"
                  and not (leaf := n.rpartition(".")[2]).startswith("_")
                  and leaf not in found[n.rpartition(".")[0]][1])


def test_each_package_declares_what_is_imported_from_outside_it():
    wrong = problems(surfaces())
    assert not wrong, "\n".join(wrong)


def test_every_package_has_a_surface():
    found = surfaces()
    assert "autotune.tuning.records" in found and "autotune.results.export" in found
    assert all(declared for _, declared in found.values()), \
        [p for p, (_, d) in found.items() if not d]
    assert PACKAGE.name == "autotune"


def test_every_module_is_public_or_private_by_name():
    """A module missing from `__all__` must say so by its name (`_reaper`); `__main__` is
    Python's own (`python -m`) and a package is checked as its `__init__`."""
    assert unmarked() == []


def test_a_module_run_by_name_from_outside_is_public():
    """The export's CPU serve command runs `python -m autotune.engine.serve` (a user's
    deployment names it) and `tune --gpus` runs `python -m autotune.cli.worker`: both are
    public though nothing outside imports them. A name merely mentioned is no use."""
    assert {"serve"} <= surfaces()["autotune.engine"][0] & surfaces()["autotune.engine"][1]
    assert {"worker"} <= surfaces()["autotune.cli"][0] & surfaces()["autotune.cli"][1]
    assert _run_by_name('CMD = ["python", "-m", "autotune.engine.serve"]\n'
                        'x = "autotune.engine._reaper"\ny = ("-m", "autotune.cli.worker")\n'
                        ) == {"autotune.engine.serve", "autotune.cli.worker"}


def test_the_check_sees_an_internal_module_imported_from_outside():
    """An outside `from autotune.engine import _reaper` is reported, as is a module declared
    but unused, or a private one declared."""
    names = _imports_of("from autotune.engine import _reaper as reaper\n"
                        "import autotune.measure._steady\n")
    assert "autotune.engine._reaper" in names and "autotune.measure._steady" in names
    used, declared = surfaces()["autotune.engine"]
    assert "_reaper" not in declared and "_reaper" not in used  # vLLM's process reaper
    assert problems({"autotune.engine": (used | {"_reaper"}, declared)}) == [
        "autotune.engine: imported from outside but not in __all__: ['_reaper']"]
    assert problems({"autotune.engine": (used, declared | {"server2"})}) == [
        "autotune.engine: in __all__ but imported by nothing outside it: ['server2']"]
    assert problems({"autotune.engine": (used | {"_serve"}, declared | {"_serve"})}) == [
        "autotune.engine: private by name but in __all__: ['_serve']"]
