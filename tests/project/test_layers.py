"""The package's shape: imports point down the layers, and inside `tuning/` down its own
order of parts, no module imports itself through others, and only the record modules touch
Optuna's user attributes (docs/architecture.md's layers, checked on the source itself)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.paths import ROOT

PACKAGE = ROOT / "autotune"
# Lowest first: a module may import its own layer and those below it.
LAYERS = ("", "engine", "measure", "tuning", "verify", "results", "cli")
# Inside `tuning/`, the parts (a sub-package or a module), lowest first: a module may import
# its own part and the parts of lower levels; the parts of one level import neither each
# other. What a study stores sits just above the guardrail's measurements, which it keeps;
# the search policy and the ranking read it, the mechanics of a shared study run over them,
# one trial and the loop above that, and `explain`, which runs the loop, last.
TUNING_LAYERS = (("quality",), ("records",), ("policy",), ("_standing",), ("ranking",),
                 ("_deadline", "interrupts"), ("sharing",), ("starter", "trial"), ("study",),
                 ("ablation",))
TUNING = "autotune.tuning"


def _layer(module: str) -> int:
    """The layer of a dotted module name under `autotune` ("" for the top-level basics)."""
    parts = module.split(".")[1:]
    sub = parts[0] if len(parts) > 1 or (parts and parts[0] in LAYERS) else ""
    return LAYERS.index(sub if sub in LAYERS else "")


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        out.append((name, path))
    return out


def _imports(name: str, path: Path) -> list[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("autotune")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("autotune"):
                found += [f"{target}.{a.name}" if _is_module(f"{target}.{a.name}") else target
                          for a in node.names]
    return found


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").exists() or (PACKAGE / rel / "__init__.py").exists()


def test_the_folder_listing_shows_the_layers():
    assert {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} == \
        set(LAYERS[1:])
    for sub in LAYERS[1:]:
        assert ast.get_docstring(ast.parse((PACKAGE / sub / "__init__.py").read_text())), sub


@pytest.mark.parametrize(("name", "path"), _modules(), ids=[m for m, _ in _modules()])
def test_imports_point_down_the_layers(name, path):
    own = _layer(name) if name != "autotune.__main__" else LAYERS.index("cli")
    upward = [i for i in _imports(name, path) if _layer(i) > own]
    assert not upward, f"{name} ({LAYERS[own] or 'top level'}) imports a higher layer: {upward}"


def test_layer_of_names():
    assert _layer("autotune.config") == 0 and _layer("autotune.engine") == 1
    assert _layer("autotune.engine.server") == 1 and _layer("autotune.cli.main") == 6
    # The checker itself would see an upward import.
    assert _layer("autotune.results.show") > _layer("autotune.tuning.study")
    assert _layer("autotune.tuning.study") < _layer("autotune.verify.validate") < \
        _layer("autotune.results.show")


def _tuning_part(module: str) -> str | None:
    """The part of `tuning/` a dotted module name belongs to (its sub-package or module; ""
    for the package's own `__init__.py`), or None outside `tuning/`."""
    if module != TUNING and not module.startswith(TUNING + "."):
        return None
    return module[len(TUNING) + 1:].split(".")[0]


def _tuning_level(part: str) -> int:
    """The level of a part in `TUNING_LAYERS` (the package itself, a docstring only, lowest)."""
    if not part:
        return -1
    return next(i for i, level in enumerate(TUNING_LAYERS) if part in level)


def upward_in_tuning(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Every import between two modules of `tuning/` that does not point down its order: to a
    higher level, or to another part of the same level. One line each, naming both modules,
    their parts and levels."""
    found = []
    for module in sorted(graph):
        own = _tuning_part(module)
        if own is None:
            continue
        for target in sorted(set(graph[module])):
            part = _tuning_part(target)
            if part is None or part == own or _tuning_level(part) < _tuning_level(own):
                continue
            found.append(f"{module} ({own or 'tuning'}, level {_tuning_level(own)}) imports "
                         f"{target} ({part}, level {_tuning_level(part)})")
    return found


def test_every_part_of_tuning_has_its_place_in_the_order():
    """Each sub-package and module of `tuning/` is in `TUNING_LAYERS`, once."""
    folder = PACKAGE / "tuning"
    parts = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"} | \
        {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    listed = [part for level in TUNING_LAYERS for part in level]
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == parts, (sorted(parts - set(listed)), sorted(set(listed) - parts))


def test_tuning_imports_point_down_its_order():
    """Every module under `autotune/tuning/` imports only its own part and lower ones
    (`TUNING_LAYERS`); imports inside functions and under `TYPE_CHECKING` count too."""
    found = upward_in_tuning(_graph())
    assert not found, "imports up the order of tuning/ (TUNING_LAYERS):\n" + "\n".join(found)


def test_the_order_check_sees_an_upward_import(tmp_path):
    graph = {"autotune.tuning.records.trialrecord": {"autotune.tuning.policy.memory",
                                                     "autotune.tuning.records.origin",
                                                     "autotune.tuning.quality.verdict",
                                                     "autotune._flags"},
             "autotune.tuning.policy.relief": {"autotune.tuning.records.trialrecord",
                                               "autotune.tuning.sharing.heartbeat"},
             "autotune.tuning._deadline": {"autotune.tuning.interrupts"},
             "autotune.tuning.study": {"autotune.tuning.trial", "autotune.tuning"},
             "autotune.results.views": {"autotune.tuning.study"}}
    assert upward_in_tuning(graph) == [
        "autotune.tuning._deadline (_deadline, level 5) imports autotune.tuning.interrupts "
        "(interrupts, level 5)",
        "autotune.tuning.policy.relief (policy, level 2) imports "
        "autotune.tuning.sharing.heartbeat (sharing, level 6)",
        "autotune.tuning.records.trialrecord (records, level 1) imports "
        "autotune.tuning.policy.memory (policy, level 2)"]
    assert upward_in_tuning({"autotune.tuning.ablation": {"autotune.tuning.study"}}) == []
    # A made-up module of records/ that reaches up only inside a function and under
    # TYPE_CHECKING is caught, as the source is read for the test above.
    path = tmp_path / "progress.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from autotune.tuning.sharing.heartbeat import SharedStudy\n"
        "def later():\n    from autotune.tuning import study\n    from . import origin\n")
    name = "autotune.tuning.records.progress"
    assert [line.split(" imports ")[1] for line in
            upward_in_tuning({name: set(_imports(name, path))})] == [
        "autotune.tuning.sharing.heartbeat (sharing, level 6)",
        "autotune.tuning.study (study, level 8)"]


def _graph() -> dict[str, set[str]]:
    """Each module of the package (by dotted name) and the modules of the package it
    imports, wherever the import statement stands."""
    modules = dict(_modules())
    return {name: {i for i in _imports(name, path) if i in modules}
            for name, path in modules.items()}


def _reach(graph: Mapping[str, Iterable[str]], start: str) -> set[str]:
    """The modules `start` imports, directly or through others (itself only by a circle)."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import circles of `graph`, each as its sorted modules: every strongly connected
    component of more than one module, and every module that imports itself. A module lies
    on a circle when it reaches itself; its circle is the modules it reaches that reach it."""
    reach = {m: _reach(graph, m) for m in graph}
    found = {frozenset(w for w in reach[m] if m in reach[w]) for m in graph if m in reach[m]}
    return sorted(sorted(c) for c in found)


def test_no_import_circles():
    """No module imports itself, directly or through others: a circle makes the modules on
    it one unit (none can be understood, tested or moved without the others) and makes
    their import order matter. Every import statement counts: one inside a function is as
    much a dependency as one at the top (deferring it only hides the circle), and so is one
    under `if TYPE_CHECKING:`, since the annotation still names the other module (and
    `TYPE_CHECKING` is the other usual way to hide a circle). A package's own `__init__.py`,
    which Python runs before any module inside it, is not counted as imported by them: each
    holds only a docstring (`test_the_folder_listing_shows_the_layers`)."""
    graph = _graph()
    found = [f"{' <-> '.join(c)}: " + "; ".join(
        f"{m} imports {', '.join(sorted(set(graph[m]) & set(c)))}" for m in c)
        for c in cycles(graph)]
    assert not found, "import circles:\n" + "\n".join(found)


def test_the_circle_finder_sees_circles(tmp_path):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}) == \
        [["a", "b", "c"]]
    assert cycles({"a": {"a"}, "b": {"a"}}) == [["a"]]  # a module importing itself
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}, "e": {"a", "c"}}) == \
        [["a", "b"], ["c", "d"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"x"}}) == []
    # The imports it is given include those inside functions and under TYPE_CHECKING.
    (pkg := tmp_path / "pkg").mkdir()
    (pkg / "m.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from autotune import _slo\n"
        "def f():\n    from autotune.results import cost\n    import autotune._flags\n")
    assert sorted(_imports("autotune.results.m", pkg / "m.py")) == \
        ["autotune._flags", "autotune._slo", "autotune.results.cost"]

# Reading or writing Optuna's user attributes, of a trial or of the study, whatever the
# name before the dot (`study.user_attrs`, `t.user_attrs`, `s.set_user_attr(...)`).
USER_ATTRS = re.compile(r"user_attrs\[|\.user_attrs\b|\.set_user_attr\(|\bset_user_attr\b")


def _touching_user_attrs(allowed: set[Path]) -> list[str]:
    return [f"{p.relative_to(PACKAGE.parent)}:{i}" for p in sorted(PACKAGE.rglob("*.py"))
            if p not in allowed for i, line in enumerate(p.read_text().splitlines(), 1)
            if USER_ATTRS.search(line)]


# The modules that read or write them: a trial's record (`TrialRecord.of`), the study's own
# attributes (`StudyRecord.of` and its setters) and a trial's writers (`write`,
# `set_constraints`).
RECORD_MODULES = {PACKAGE / "tuning" / "records" / f"{name}.py"
                  for name in ("trialrecord", "studyrecord", "writers")}


def test_only_the_record_modules_read_or_write_user_attributes():
    """Trials' user attributes and the study's own (its scenario, engine defaults,
    reference, baselines, workers, validations, explanations) go through
    `tuning/records/` (`TrialRecord`, `StudyRecord` and their writers); no other module
    touches them."""
    assert all(p.is_file() for p in RECORD_MODULES), sorted(map(str, RECORD_MODULES))
    found = _touching_user_attrs(RECORD_MODULES)
    assert not found, found


def test_the_user_attribute_check_sees_study_and_trial_access():
    for line in ("x = study.user_attrs.get('scenario')", "study.set_user_attr('k', 1)",
                 "a = t.user_attrs", "trial.set_user_attr('reason', 'oom')",
                 "attrs['user_attrs'] = user_attrs['x']"):
        assert USER_ATTRS.search(line), line
    for line in ("study.enqueue_trial({}, user_attrs=writers.queued(DEFAULTS, {}))",
                 "attrs = trial.setdefault('user_attrs', [])"):
        assert not USER_ATTRS.search(line), line


def test_no_private_optuna_internals():
    pattern = re.compile(r"\._storage\b|\._trial_id\b|storages\._rdb|filterwarnings")
    found = [f"{p.relative_to(PACKAGE.parent)}:{i}" for p in PACKAGE.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found


def duplicate_classes(package: Path = PACKAGE) -> dict[str, list[str]]:
    """Each class name defined in more than one module of `package`, with those modules."""
    where: dict[str, list[str]] = {}
    for name, path in _modules():
        if not path.is_relative_to(package):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(name)
    return {cls: sorted(mods) for cls, mods in where.items() if len(mods) > 1}


def test_one_class_per_name():
    """A name means one thing across the package: two `Summary` classes (a benchmark's and
    a study's) had callers importing one as the other under an alias."""
    found = duplicate_classes()
    assert not found, "class names defined more than once:\n" + "\n".join(
        f"{cls}: {', '.join(mods)}" for cls, mods in sorted(found.items()))


def test_one_spelling_per_verb():
    """`summarize` and `summarise` both existed (the benchmark's and a re-check's): a
    reader looking for one did not find the other. The package spells these verbs -ize."""
    british = re.compile(r"(summar|normal|optim|serial|initial|minim|maxim|real)is(e|es|ed|ing)")
    found = [f"{p.relative_to(PACKAGE.parent)}: {node.name}" for p in PACKAGE.rglob("*.py")
             for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
             and british.search(node.name.lower())]
    assert not found, found
