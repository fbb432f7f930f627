"""Each package declares its public surface: `__all__` in its `__init__.py` names exactly the
modules that code outside the package imports (the package's other modules, the layers above,
benchmarks/, scripts/ and the notebooks). A module not named there is the package's own: an
import of it from outside fails here, so a new dependency on an internal module is a decision
(add it to `__all__`) rather than an accident. Tests may import anything."""

from __future__ import annotations

import ast
import json
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


def importers() -> dict[str, set[str]]:
    """Each importer (a module of the package by dotted name, or `user:PATH` for a file of
    benchmarks/, scripts/ or the notebooks) and the autotune names it imports."""
    found = {name: set(_imports(name, path)) for name, path in _modules()}
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
    """One line per package whose `__all__` differs from what is imported from outside it."""
    wrong = []
    for package, (used, declared) in sorted(found.items()):
        if used - declared:
            wrong.append(f"{package}: imported from outside but not in __all__: "
                         f"{sorted(used - declared)}")
        if declared - used:
            wrong.append(f"{package}: in __all__ but imported by nothing outside it: "
                         f"{sorted(declared - used)}")
    return wrong


def test_each_package_declares_what_is_imported_from_outside_it():
    wrong = problems(surfaces())
    assert not wrong, "\n".join(wrong)


def test_every_package_has_a_surface():
    found = surfaces()
    assert "autotune.tuning.records" in found and "autotune.results.export" in found
    assert all(declared for _, declared in found.values()), \
        [p for p, (_, d) in found.items() if not d]
    assert PACKAGE.name == "autotune"


def test_the_check_sees_an_internal_module_imported_from_outside():
    """An outside `from autotune.engine import reaper` names `autotune.engine.reaper`, and a
    module used from outside but not declared (or declared and unused) is reported."""
    names = _imports_of("from autotune.engine import reaper\nimport autotune.measure.steady\n")
    assert "autotune.engine.reaper" in names and "autotune.measure.steady" in names
    used, declared = surfaces()["autotune.engine"]
    assert "reaper" not in declared  # the engine's own: vLLM's process reaper
    assert problems({"autotune.engine": (used | {"reaper"}, declared)}) == [
        "autotune.engine: imported from outside but not in __all__: ['reaper']"]
    assert problems({"autotune.engine": (used, declared | {"serve"})}) == [
        "autotune.engine: in __all__ but imported by nothing outside it: ['serve']"]
